"""Scores keyed by a model's weight digest, per (task, eval split): baselines and resubmissions cost nothing twice.

Lives under CACHE_DIR/grading, which agents never see (it holds per-item results on the hidden split).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from contracts.records import write_json_durably
from contracts.specs import task_identity

# Bump when what a score means changes (scale, scoring rule), so no stale cached score is served.
SCORING_VERSION = 7  # 2: scores are percentages; 3: generated eval splits are salted with a secret; 4: decoding
# by the task's protocol (the transformers backend applies the model's repetition penalty under a2rl's, as vLLM did);
# 5: a generated hidden split leaves out the questions its instructions show (arithmetic's examples); 6: ALFWorld's
# paper protocol cuts a prompt too long for 4,096 tokens, as rdagent 1.0.0 does; 7: HumanEval's paper verdict from one
# run without CPU or memory limits, and paper scores in the original's arithmetic (OpenCompass's two decimals)


def split_key(task_cfg: dict) -> str:
    """What decides a score besides the weights: the task's data and grading settings, not its resources."""
    identity = {k: v for k, v in task_identity(task_cfg).items() if k != "retention"}  # scored apart, once more
    blob = json.dumps([SCORING_VERSION, identity], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".npz", ".msgpack", ".h5")


def score_key(model_dir: Path, weights_digest: str) -> str:
    """What decides a model's score: its weights and everything else it loads with (config, tokenizer, chat
    template, generation config). Weight files are covered by the digest of the loaded tensors."""
    h = hashlib.sha256(weights_digest.encode())
    for path in sorted(p for p in Path(model_dir).rglob("*") if p.is_file()):
        if path.suffix not in WEIGHT_SUFFIXES and not path.name.endswith(".index.json"):
            h.update(str(path.relative_to(model_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class ScoreCache:
    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def get(self, digest: str) -> dict | None:
        path = self.root / f"{digest}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def put(self, digest: str, entry: dict, details: list | None = None) -> None:
        if details is not None:
            write_json_durably(self.root / f"{digest}.items.json", {"items": details})
        write_json_durably(self.root / f"{digest}.json", entry)
