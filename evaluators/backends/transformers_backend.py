"""The transformers backend: plain `generate` with left padding, greedy, in length-sorted batches."""
from __future__ import annotations

import gc
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.decoding import Decoding, Prompt
from contracts.registry import register
from contracts.errors import ModelLoadError
from evaluators.backends.base import EvaluatorBackend

MAX_REASON = 600  # characters of an underlying error kept in the reason shown to the agent


def _short(e: Exception) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + "..."


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    model_dir: Path
    eos_ids: list[int]
    pad_id: int


@register("backend", "transformers")
class TransformersBackend(EvaluatorBackend):
    def __init__(self, batch_size: int = 32, device: str = "auto", torch_threads: int | None = None):
        import torch

        super().__init__(batch_size, device, torch_threads)
        if device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if torch_threads:
            torch.set_num_threads(int(torch_threads))

    def load(self, model_dir) -> LoadedModel:
        import torch
        from transformers import AutoModelForCausalLM

        from evaluators.model_size import check_fits, free_bytes

        path = Path(model_dir)
        config, tokenizer = load_config_and_tokenizer(path)
        # fp32 on CPU (bf16 matmuls are slow there); the saved dtype on GPU
        dtype = torch.float32 if self.device == "cpu" else "auto"
        # nothing is allocated for a model that would not fit, or whose checkpoint lacks weights
        check_fits(path, config, torch.float32 if self.device == "cpu" else None, free_bytes(self.device))
        try:
            model, info = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dtype,
                                                               trust_remote_code=False, output_loading_info=True)
        except Exception as e:
            raise ModelLoadError(f"{path} is not a loadable causal LM: {_short(e)}") from e
        missing = info.get("missing_keys") or []
        if missing:
            # transformers would fill these randomly and go on; a grader must not score a half-random model
            raise ModelLoadError(f"weights missing in {path} for {len(missing)} parameter(s), e.g. "
                                 f"{sorted(missing)[:3]}")
        vocab = model.get_input_embeddings().num_embeddings
        if len(tokenizer) > vocab:
            raise ModelLoadError(f"the tokenizer has {len(tokenizer)} tokens but the model's embedding only {vocab}")
        eos_ids = eos_token_ids(tokenizer, model.generation_config)
        if not eos_ids:
            raise ModelLoadError(f"neither the tokenizer nor generation_config.json in {path} names an eos token")
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
        model.to(self.device).eval()
        return LoadedModel(model=model, tokenizer=tokenizer, model_dir=path, eos_ids=eos_ids, pad_id=pad_id)

    def generate(self, loaded: LoadedModel, prompts: list[Prompt], decoding: Decoding) -> list[str]:
        import torch
        from transformers import GenerationConfig

        tok = loaded.tokenizer
        ids = [prompt_ids(tok, p, decoding) for p in prompts]
        # Longest first: batches of similar lengths waste little on padding, and an out-of-memory shows up at once.
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        gen_config = GenerationConfig(max_new_tokens=int(decoding.max_new_tokens), do_sample=False, num_beams=1,
                                      eos_token_id=loaded.eos_ids, pad_token_id=loaded.pad_id,
                                      repetition_penalty=repetition_penalty(decoding, loaded.model.generation_config))
        replies: list[str] = [""] * len(ids)
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            width = max(len(ids[i]) for i in batch)
            input_ids = torch.full((len(batch), width), loaded.pad_id, dtype=torch.long)
            attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):  # left padding: every prompt ends where generation starts
                input_ids[row, width - len(ids[i]):] = torch.tensor(ids[i], dtype=torch.long)
                attention_mask[row, width - len(ids[i]):] = 1
            stop = [StopInReply(tok, width, decoding.stop)] if decoding.stop else None
            with torch.inference_mode():
                out = loaded.model.generate(input_ids=input_ids.to(self.device),
                                            attention_mask=attention_mask.to(self.device),
                                            generation_config=gen_config, stopping_criteria=stop)
            self.generated_tokens += len(batch) * (out.shape[1] - width)
            for row, i in enumerate(batch):
                replies[i] = decoding.cut(reply_text(tok, out[row, width:].tolist(), loaded.eos_ids))
        return replies

    def weights_digest(self, loaded: LoadedModel) -> str:
        import torch

        h = hashlib.sha256()
        state = loaded.model.state_dict()
        for name in sorted(state):
            t = state[name].detach().to("cpu").contiguous()
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        return h.hexdigest()

    def weights(self, loaded: LoadedModel) -> dict:
        return {name: t.detach().to("cpu") for name, t in loaded.model.state_dict().items()}

    def unload(self, loaded: LoadedModel) -> None:
        import torch

        loaded.model = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class StopInReply:
    """Ends a row's generation once its reply holds a stop string. transformers' own `stop_strings` also match
    across the prompt's end (a chat prompt ends with "\n", so a stop "\n\n" fired on the reply's first "\n"); vLLM
    looks at the reply only, and so does this."""

    def __init__(self, tokenizer, prompt_width: int, stop: tuple[str, ...]):
        self.tokenizer, self.width, self.stop = tokenizer, prompt_width, stop

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        texts = self.tokenizer.batch_decode(input_ids[:, self.width:], skip_special_tokens=True)
        return torch.tensor([any(s in text for s in self.stop) for text in texts], device=input_ids.device)


def load_config_and_tokenizer(path: Path):
    """The checks every backend makes before it loads weights: a config, a tokenizer, a chat template."""
    from transformers import AutoConfig, AutoTokenizer

    if not path.is_dir():
        raise ModelLoadError(f"{path} is not a directory")
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} has no config.json: save the model with model.save_pretrained(dir)")
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except Exception as e:
        raise ModelLoadError(f"config.json in {path} cannot be read: {_short(e)}") from e
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as e:
        raise ModelLoadError(f"no usable tokenizer in {path} (save it with tokenizer.save_pretrained(dir)): "
                             f"{_short(e)}") from e
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(f"the tokenizer in {path} has no chat template; the grader renders prompts with it")
    return config, tokenizer


def prompt_ids(tokenizer, prompt: Prompt, decoding: Decoding) -> list[int]:
    """A prompt as the grader sends it: a chat through the model's template with the generation prompt, or raw text
    tokenised as a completion would be (with the tokenizer's own special tokens, e.g. a BOS, as vLLM does), after
    the decoding's `fit` where it has one."""
    decoding.check_prompt(prompt)
    if isinstance(prompt, str):
        if decoding.fit is not None:  # the protocol's cut of a prompt too long for its context, by this tokenizer
            prompt = decoding.fit(prompt, tokenizer)
        return tokenizer(prompt)["input_ids"]
    # The template already holds the special tokens it wants; tokenising its text adds none (no double BOS).
    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def repetition_penalty(decoding: Decoding, generation_config) -> float:
    """The protocol's penalty, or (None) the one the model's generation_config.json names (Qwen's chat models: 1.1)."""
    if decoding.repetition_penalty is not None:
        return float(decoding.repetition_penalty)
    return float(getattr(generation_config, "repetition_penalty", None) or 1.0)


def reply_text(tokenizer, new_tokens: list[int], eos_ids: list[int]) -> str:
    """The generated tokens as the reply's text, cut at the first eos (what follows it is padding)."""
    for n, token in enumerate(new_tokens):
        if token in eos_ids:
            new_tokens = new_tokens[:n]
            break
    return tokenizer.decode(new_tokens, skip_special_tokens=True)


def eos_token_ids(tokenizer, generation_config) -> list[int]:
    """Where a reply ends: the tokenizer's eos and generation_config.json's (Qwen's chat models name two)."""
    ids = []
    gen_eos = getattr(generation_config, "eos_token_id", None)
    for value in (tokenizer.eos_token_id, gen_eos):
        for i in (value if isinstance(value, list) else [value]):
            if i is not None and i not in ids:
                ids.append(int(i))
    return ids
