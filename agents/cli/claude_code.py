"""Claude Code (`claude -p ... --output-format stream-json`), on the Anthropic messages API.

It calls POST {ANTHROPIC_BASE_URL}/v1/messages, always streaming. Its own retries are off (the proxy retries and
records the waiting), as are telemetry, error reports and update checks. `--dangerously-skip-permissions` lets it
act without asking; as root it refuses that unless IS_SANDBOX=1, and it does run in a2rl's sandbox.
Token totals are in the final `result` event (per-message usage in stream-json is provisional).
"""
from __future__ import annotations

from agents.cli.base import CliAdapter, Context, Launch, TraceParser, cut, event, extra_args, usage_event
from contracts.registry import register


@register("cli_adapter", "claude_code")
class ClaudeCode(CliAdapter):
    name = "claude_code"
    executable = "claude"
    package = "@anthropic-ai/claude-code"
    providers = ("anthropic",)
    release = "claude"

    def launch(self, ctx: Context) -> Launch:
        argv = ["claude", "-p", ctx.prompt, "--output-format", "stream-json", "--verbose",
                "--dangerously-skip-permissions"]
        if ctx.model:
            argv += ["--model", ctx.model]
        env = {
            "ANTHROPIC_BASE_URL": ctx.proxy_url,
            "ANTHROPIC_API_KEY": ctx.key,
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "IS_SANDBOX": "1",
        }
        if ctx.model:  # its side calls (titles, summaries) would otherwise name a small model of their own
            env["ANTHROPIC_SMALL_FAST_MODEL"] = ctx.model
        return Launch(argv + extra_args(ctx), env)

    def parser(self) -> TraceParser:
        return StreamJson()


class StreamJson(TraceParser):
    def feed(self, obj: dict) -> list[dict]:
        kind = obj.get("type")
        if kind == "system" and obj.get("subtype") == "init":
            return [event("session", "system/init", model=obj.get("model"), session_id=obj.get("session_id"))]
        if kind in ("assistant", "user"):
            out = []
            for block in (obj.get("message") or {}).get("content") or []:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and block.get("text"):
                    out.append(event("message", kind, role=kind, text=cut(block["text"])))
                elif block.get("type") == "tool_use":
                    out.append(event("tool_call", kind, tool=block.get("name"), input=cut(block.get("input")),
                                     id=block.get("id")))
                elif block.get("type") == "tool_result":
                    content = block.get("content")
                    if isinstance(content, list):
                        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                    out.append(event("tool_result", kind, id=block.get("tool_use_id"),
                                     ok=not block.get("is_error"), output=cut(content)))
            return out
        if kind == "result":
            u = obj.get("usage") or {}
            cached = u.get("cache_read_input_tokens") or 0
            # Anthropic's input_tokens leaves out cache reads and writes; a2rl counts every billed prompt token.
            inp = (u.get("input_tokens") or 0) + (u.get("cache_creation_input_tokens") or 0) + cached
            return [usage_event("result", "run", inp, u.get("output_tokens"), cached, obj.get("total_cost_usd")),
                    event("result", "result", ok=not obj.get("is_error"), text=cut(obj.get("result")),
                          turns=obj.get("num_turns"), subtype=obj.get("subtype"))]
        return []

