"""Gemini CLI (`gemini -p ... --output-format stream-json --yolo`), on the Gemini API.

It calls POST {GOOGLE_GEMINI_BASE_URL}/v1beta/models/M:streamGenerateContent?alt=sse. ~/.gemini/settings.json picks
API-key auth (required in headless mode), one attempt per call (the proxy retries), and no usage statistics,
telemetry or update checks. Headless runs refuse an untrusted folder: GEMINI_CLI_TRUST_WORKSPACE trusts the
workspace. Token totals are in the final `result` event.
"""
from __future__ import annotations

from agents.cli.base import CliAdapter, Context, Launch, TraceParser, cut, event, extra_args, usage_event, write_json
from contracts.registry import register


@register("cli_adapter", "gemini_cli")
class GeminiCli(CliAdapter):
    name = "gemini_cli"
    executable = "gemini"
    package = "@google/gemini-cli"
    providers = ("gemini",)
    release = "gemini"

    def launch(self, ctx: Context) -> Launch:
        write_json(ctx.home / ".gemini" / "settings.json", {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"maxAttempts": 1, "disableAutoUpdate": True, "disableUpdateNag": True},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        })
        argv = ["gemini", "-p", ctx.prompt, "--output-format", "stream-json", "--yolo"]
        if ctx.model:
            argv += ["--model", ctx.model]
        env = {"GOOGLE_GEMINI_BASE_URL": ctx.proxy_url, "GEMINI_API_KEY": ctx.key,
               "GEMINI_CLI_TRUST_WORKSPACE": "true"}
        return Launch(argv + extra_args(ctx), env)

    def parser(self) -> TraceParser:
        return StreamJson()


class StreamJson(TraceParser):
    """Assistant text arrives in deltas of a few characters: they are joined into one message event."""

    def __init__(self):
        self.text: list[str] = []

    def flush(self) -> list[dict]:
        if not self.text:
            return []
        text, self.text = "".join(self.text), []
        return [event("message", "message", role="assistant", text=cut(text))]

    def feed(self, obj: dict) -> list[dict]:
        kind = obj.get("type")
        if kind == "message":
            if obj.get("role") == "assistant":
                self.text.append(obj.get("content") or "")
                if not obj.get("delta"):
                    return self.flush()
            return []  # the user message is the prompt itself
        out = self.flush()
        if kind == "init":
            out.append(event("session", kind, model=obj.get("model"), session_id=obj.get("session_id")))
        elif kind == "tool_use":
            out.append(event("tool_call", kind, tool=obj.get("tool_name"), input=cut(obj.get("parameters")),
                             id=obj.get("tool_id")))
        elif kind == "tool_result":
            output = obj.get("output") if obj.get("output") is not None else (obj.get("error") or {}).get("message")
            out.append(event("tool_result", kind, id=obj.get("tool_id"), ok=obj.get("status") == "success",
                             output=cut(output)))
        elif kind == "error":  # severity "warning" (a loop detected, ...) is a notice, "error" an error
            out.append(event("notice" if obj.get("severity") == "warning" else "error", kind,
                             message=cut(obj.get("message"))))
        elif kind == "result":
            stats = obj.get("stats") or {}
            out.append(usage_event(kind, "run", stats.get("input_tokens"), stats.get("output_tokens"),
                                   stats.get("cached")))
            out.append(event("result", kind, ok=obj.get("status") == "success",
                             text=cut((obj.get("error") or {}).get("message"))))
        return out

