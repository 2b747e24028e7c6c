"""OpenHands CLI (`openhands --headless --json -t PROMPT`), a Python program from PyPI in an environment of its own,
on any of the providers through LiteLLM: Anthropic, OpenAI, an OpenAI-compatible server, Gemini.

Its agent is written to ~/.openhands/agent_settings.json (what the CLI's own set-up would save): the LiteLLM model
`<provider>/<driver model>` at the proxy's URL with the per-cell key, LiteLLM's retries off (the proxy retries), the
CLI's default tools and its summarising condenser on the same model. Headless mode approves every action (there is
no prompt to answer; a2rl's bubblewrap is the sandbox) and turns the critic off. It tries to clone its public skills
from GitHub at start; in the isolated network that fails at once and it goes on without them.

`--json` prints one JSON object per conversation event (MessageEvent, ActionEvent, ObservationEvent, errors) amid
plain text; token counts are not in them but in the conversation's state (base_state.json under
~/.openhands/conversations/), read once the run ends.
"""
from __future__ import annotations

import json

from agents.cli.base import (
    Context,
    Launch,
    PythonCli,
    TraceParser,
    cut,
    event,
    extra_args,
    usage_event,
    write_json,
)
from contracts.registry import register

# driver provider -> (LiteLLM's model prefix, path under the proxy)
PROVIDERS = {
    "anthropic": ("anthropic", ""),
    "openai": ("openai", "/v1"),
    "openai-compatible": ("openai", "/v1"),
    "gemini": ("gemini", "/v1beta"),
}


@register("cli_adapter", "openhands")
class OpenHands(PythonCli):
    name = "openhands"
    executable = "openhands"
    package = "openhands"
    python = "3.12"             # the CLI requires Python 3.12
    providers = tuple(PROVIDERS)

    def launch(self, ctx: Context) -> Launch:
        prefix, path = PROVIDERS[ctx.provider]

        def llm(usage_id: str) -> dict:
            return {"model": f"{prefix}/{ctx.model}", "base_url": ctx.proxy_url + path, "api_key": ctx.key,
                    "usage_id": usage_id, "num_retries": 0}

        write_json(ctx.home / ".openhands" / "agent_settings.json", {
            "kind": "Agent", "llm": llm("agent"),
            "tools": [{"name": "terminal"}, {"name": "file_editor"}, {"name": "task_tracker"}],
            "system_prompt_kwargs": {"cli_mode": True, "llm_security_analyzer": True},
            "condenser": {"kind": "LLMSummarizingCondenser", "llm": llm("condenser")},
        })
        env = {"OPENHANDS_SUPPRESS_BANNER": "1",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # LiteLLM's price map from its package, not GitHub
        return Launch(["openhands", "--headless", "--json", *extra_args(ctx), "-t", ctx.prompt], env)

    def parser(self) -> TraceParser:
        return EventJson()


def _text(content) -> str:
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


class EventJson(TraceParser):
    def feed(self, obj: dict) -> list[dict]:
        kind = obj.get("kind", "")
        if kind == "MessageEvent" and obj.get("source") == "agent":
            msg = obj.get("llm_message") or {}
            out = [event("message", kind, role="reasoning", text=cut(msg["reasoning_content"]))] \
                if msg.get("reasoning_content") else []
            return out + [event("message", kind, role="assistant", text=cut(_text(msg.get("content"))))]
        if kind == "ActionEvent":
            call = obj.get("tool_call") or {}
            try:
                args = json.loads(call.get("arguments") or "{}")
            except ValueError:
                args = call.get("arguments")
            return [event("tool_call", kind, tool=obj.get("tool_name"), input=cut(args), id=obj.get("tool_call_id"))]
        if kind in ("ObservationEvent", "UserRejectObservation", "AgentErrorEvent"):
            obs = obj.get("observation") or {}
            ok = kind == "ObservationEvent" and not obs.get("is_error") and obs.get("exit_code") in (None, 0)
            output = _text(obs.get("content")) if kind == "ObservationEvent" else \
                obj.get("error") or obj.get("rejection_reason")
            return [event("tool_result", kind, id=obj.get("tool_call_id"), ok=ok, exit_code=obs.get("exit_code"),
                          output=cut(output))]
        if kind == "ConversationErrorEvent":
            return [event("error", kind, message=cut(obj.get("detail") or obj.get("code")))]
        return []

    def flush(self) -> list[dict]:
        """Token totals of each conversation this HOME holds (one per session: a re-prompt starts another)."""
        out = []
        states = sorted(self.home.glob(".openhands/conversations/*/base_state.json")) if self.home else []
        for state in states:
            try:
                metrics = (json.loads(state.read_text()).get("stats") or {}).get("usage_to_metrics") or {}
            except (OSError, ValueError):
                continue
            for usage_id, m in sorted(metrics.items()):
                total = m.get("accumulated_token_usage") or {}
                if total.get("prompt_tokens") or total.get("completion_tokens"):
                    # LiteLLM's prompt_tokens include the cached reads, as the proxy counts them
                    out.append({**usage_event(f"base_state.json/{usage_id}", "run", total.get("prompt_tokens"),
                                              total.get("completion_tokens"), total.get("cache_read_tokens"),
                                              m.get("accumulated_cost") or None),
                                "session_id": state.parent.name})
        return out

