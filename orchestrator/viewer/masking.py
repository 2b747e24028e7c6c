"""Secrets never reach a viewer page: run tokens, driver keys (the proxy's per-cell ones and the real ones) are masked.

Every page and data file the viewer writes or serves goes through `Masker.mask` as one text, so nothing escapes by
taking another path to the page. Two layers, like the driver proxy's scrub (agents/proxy/app.py), which replaces the
real key it knows with "***":
- the exact secrets the sweep's records know: each run's token and its driver-proxy key (the run registry's journal,
  OUTPUT_DIR/run-registry.jsonl, and a workspace's run.json), and the real keys of the drivers the cells name (the
  environment variables in their api_key_env, when set where the viewer runs);
- patterns of what a secret looks like, for one the records do not name (a key an agent found and printed): the
  proxy's key format, common provider key formats, a bearer token, and the value of a variable named like a key.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from contracts.records import read_jsonl

MASK = "***"
MIN_SECRET = 8  # shorter "secrets" (an empty key, "none") would mask ordinary words
REGISTRY_JOURNAL = "run-registry.jsonl"  # orchestrator.services.REGISTRY_JOURNAL (not imported: that pulls Ray in)

PATTERNS = re.compile("|".join([
    r"a2rl-[A-Za-z0-9_-]{32}",                  # the driver proxy's per-cell key (agents/proxy/cells.py)
    r"sk-[A-Za-z0-9_-]{16,}",                   # OpenAI and Anthropic keys (sk-..., sk-ant-..., sk-proj-...)
    r"AIza[0-9A-Za-z_-]{30,}",                  # Google (Gemini) keys
    r"hf_[A-Za-z0-9]{30,}",                     # Hugging Face tokens
]))
# A secret after what names it (kept): a bearer token or an API key header written out (not "$A2RL_RUN_TOKEN"), the
# value of a variable named like a secret (an `env` dump: A2RL_RUN_TOKEN=..., OPENAI_API_KEY=...), run.json's token.
NAMED = re.compile(r'((?:[Bb]earer |[Xx]-[Aa]pi-[Kk]ey: |[A-Z_](?:TOKEN|KEY|SECRET|PASSWORD)=|\\?"run_token\\?": \\?"))'
                   r"(?!\$)[A-Za-z0-9._~+/=-]{8,}")


class Masker:
    def __init__(self, secrets: set[str]):
        known = sorted((s for s in secrets if s and len(s) >= MIN_SECRET), key=len, reverse=True)
        self.exact = re.compile("|".join(map(re.escape, known))) if known else None

    def mask(self, text: str) -> str:
        if self.exact is not None:
            text = self.exact.sub(MASK, text)
        return NAMED.sub(lambda m: m.group(1) + MASK, PATTERNS.sub(MASK, text))


def known_secrets(output_dir: Path, specs: list[dict], workspace_root: Path | None = None) -> set[str]:
    """The run tokens and driver keys of a sweep's runs, and the real keys of its cells' drivers (when set here)."""
    found: set[str] = set()
    for line in _journal(output_dir / REGISTRY_JOURNAL):
        if len(line) >= 3 and line[0] == "register":
            found.add(str(line[1]))
            if isinstance(line[2], dict) and line[2].get("driver_key"):
                found.add(str(line[2]["driver_key"]))
    root = workspace_root or output_dir / "workspaces"
    for run_json in root.glob("*/run.json") if root.is_dir() else ():
        try:
            token = json.loads(run_json.read_text()).get("run_token")
        except (OSError, ValueError, AttributeError):
            continue
        if token:
            found.add(str(token))
    for spec in specs:
        env = ((spec or {}).get("driver") or {}).get("api_key_env")
        if env and os.environ.get(env):
            found.add(os.environ[env])
    return found


def _journal(path: Path) -> list[list]:
    return [line for line in read_jsonl(path) if isinstance(line, list)] if path.exists() else []
