"""RD-Agent's RL post-training loop (`python -m rdagent.app.rl.loop`), a Python program from PyPI in an environment of
its own. Its loop is written for this benchmark's original harness: it reads WORKSPACE, MODEL_PATH, DATA_PATH,
OUTPUT_DIR, TASK, BASE_MODEL and GRADING_SERVER_URL (a2rl sets them all), asks its LLM for a hypothesis and a
`main.py`, runs that with `python` in code/ (a2rl's interpreter: torch, transformers, trl) and posts the newest model
under output/ to $GRADING_SERVER_URL/submit. No part of this loop uses Docker (its scenarios for Kaggle and Qlib do;
they are not this one). Its LLM is LiteLLM, set through its own settings: LITELLM_CHAT_MODEL `<provider>/<model>`,
the provider's base-URL and key variables pointing at the driver proxy with the per-cell key.

The pinned release cannot run a cell (measured with rdagent 1.0.0, the newest on PyPI, against the scripted
upstream): the loop stops at start, before its first LLM call, with `TypeError: Can't instantiate abstract class
RLPostTrainingScen with abstract methods get_scenario_all_desc, rich_style_description`; and its runner posts to
/submit with no Authorization header, which a2rl's grader refuses (401 missing_token). So a cell refuses it as an
infra error with that reason (UNRUNNABLE) instead of starting it. tests/test_python_agents.py re-measures the first
defect on the real install: when a release fixes both, pin it, empty UNRUNNABLE for it, and the cell runs.
"""
from __future__ import annotations

from pathlib import Path

from agents.cli.base import Context, Launch, PythonCli, TraceParser, extra_args
from contracts.registry import register

# driver provider -> (LiteLLM's model prefix, its base-URL variable, its key variable, path under the proxy)
PROVIDERS = {
    "openai": ("openai", "OPENAI_API_BASE", "OPENAI_API_KEY", "/v1"),
    "openai-compatible": ("openai", "OPENAI_API_BASE", "OPENAI_API_KEY", "/v1"),
    "anthropic": ("anthropic", "ANTHROPIC_API_BASE", "ANTHROPIC_API_KEY", ""),
    "gemini": ("gemini", "GEMINI_API_BASE", "GEMINI_API_KEY", "/v1beta"),
}
DEFECTS = ("its RL loop stops at start with `TypeError: Can't instantiate abstract class RLPostTrainingScen with "
           "abstract methods get_scenario_all_desc, rich_style_description`, and its runner submits without the run "
           "token (no Authorization header: a2rl's grader answers 401)")
UNRUNNABLE = {"1.0.0": DEFECTS}


@register("cli_adapter", "rdagent")
class RdAgent(PythonCli):
    name = "rdagent"
    executable = "rdagent"      # its console script; the loop runs on the python beside it
    package = "rdagent"
    python = "3.11"
    providers = tuple(PROVIDERS)

    def unavailable(self, version: str | None) -> str | None:
        if version in UNRUNNABLE:
            return (f"rdagent {version} cannot run a2rl cells: {UNRUNNABLE[version]}. Needed: an RD-Agent release "
                    "whose RL scenario implements those methods and whose runner sends `Authorization: Bearer "
                    "$A2RL_RUN_TOKEN`; pin it with agent.version=... (agents/cli/rdagent.py). Meanwhile a fixed "
                    "checkout can run as a command agent with +agent.needs_driver=true (docs/agents.md, section 7)")
        return None

    def launch(self, ctx: Context) -> Launch:
        """Not reached while the pinned release is refused (unavailable); written from its settings and entry point,
        never run end to end."""
        prefix, base_var, key_var, path = PROVIDERS[ctx.provider]
        model = f"{prefix}/{ctx.model}"
        env = {"LITELLM_CHAT_MODEL": model, base_var: ctx.proxy_url + path, key_var: ctx.key,
               "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # LiteLLM's price map from its package, not GitHub
        return Launch(["python", "-m", "rdagent.app.rl.loop", *extra_args(ctx)], env)

    def command_line(self, exe: Path, argv: list[str]) -> list[str]:
        return [str(exe.parent / "python"), *argv[1:]]  # the loop is a module, run on its environment's python

    def parser(self) -> TraceParser:
        return LogText()


class LogText(TraceParser):
    """RD-Agent logs text (loguru), not JSON events: its stdout stays in agent.stdout, no trace events come of it."""

    def feed(self, obj: dict) -> list[dict]:
        return []
