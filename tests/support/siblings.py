"""Models trained apart from the tiny base model, as a public sibling of a real base model is (the instruct model
beside its base): the base trained on other text for a few steps, deterministically."""
from __future__ import annotations

import shutil
from pathlib import Path


def train_apart(base_dir: Path, out: Path, texts: list[str], steps: int, lr: float = 1e-3, seed: int = 0,
                batch_size: int = 16, max_length: int = 64) -> Path:
    """The model in base_dir trained `steps` steps on `texts` (causal LM loss, AdamW), saved with its tokenizer and
    generation config to out (safetensors, as the hub's are)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for step in range(steps):
        batch = [texts[(step * batch_size + i) % len(texts)] for i in range(batch_size)]
        enc = tokenizer(batch, return_tensors="pt", padding=True, truncation=True, max_length=max_length)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = model(**enc, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for path in base_dir.iterdir():  # the base's tokenizer and chat template, as a sibling shares them
        if path.is_file() and not (out / path.name).exists() and path.suffix != ".safetensors":
            shutil.copyfile(path, out / path.name)
    return out


def chats(base_dir: Path, prompts: list, answer: str) -> list[str]:
    """Each grader prompt (a task's messages) rendered with the model's chat template, answered `answer`: text that
    trains a model to give that reply to the grader."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    return [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False) + answer + "<|im_end|>"
            for p in prompts]
