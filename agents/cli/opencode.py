"""OpenCode (`opencode run --format json`), on any of the providers: Anthropic, OpenAI (responses), an
OpenAI-compatible server (chat completions, e.g. vLLM) or Gemini.

Its config (OPENCODE_CONFIG) declares one provider whose base URL is the proxy and whose key is the per-cell key,
with the driver's model declared in it (the models.dev catalogue is not fetched), every tool allowed, and
sharing and auto-update off. The prompt goes on standard input: `opencode run` quotes a message given as an
argument (wrapped in `"`, every `"` inside sent as `\\"`) but hands one read from stdin to the model unchanged.
Its title agent is disabled: it would decode a title (up to 4,096 tokens) beside the first call. At start it tries
an npm install of its plugins: a dead registry on loopback makes that fail at once instead of reaching the internet.
Token counts are in each `step_finish` event.
"""
from __future__ import annotations

from agents.cli.base import CliAdapter, Context, Launch, TraceParser, cut, event, extra_args, usage_event, write_json
from contracts.registry import register

# driver provider -> (OpenCode provider id, path under the proxy, AI SDK package for a custom provider)
PROVIDERS = {
    "anthropic": ("anthropic", "/v1", None),
    "openai": ("openai", "/v1", None),
    "openai-compatible": ("a2rl", "/v1", "@ai-sdk/openai-compatible"),
    "gemini": ("google", "/v1beta", None),
}
DEAD_REGISTRY = "http://127.0.0.1:9/"


@register("cli_adapter", "opencode")
class OpenCode(CliAdapter):
    name = "opencode"
    executable = "opencode"
    package = "opencode-ai"
    providers = tuple(PROVIDERS)
    args = ("context_limit",)

    def launch(self, ctx: Context) -> Launch:
        pid, path, npm = PROVIDERS[ctx.provider]
        model = {"name": ctx.model, "tool_call": True,
                 "limit": {"context": int(ctx.context_limit), "output": int(ctx.output_limit)}}
        provider = {"options": {"baseURL": ctx.proxy_url + path, "apiKey": ctx.key}, "models": {ctx.model: model}}
        if npm:
            provider.update(npm=npm, name="a2rl driver proxy")
        config = ctx.home / ".config" / "opencode" / "a2rl.json"
        write_json(config, {
            "$schema": "https://opencode.ai/config.json",
            "provider": {pid: provider}, "enabled_providers": [pid],
            "model": f"{pid}/{ctx.model}", "small_model": f"{pid}/{ctx.model}",
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow"},
            "agent": {"title": {"disable": True}},
            "autoupdate": False, "share": "disabled",
        })
        env = {"OPENCODE_CONFIG": str(config), "npm_config_registry": DEAD_REGISTRY,
               **{f"OPENCODE_DISABLE_{v}": "1" for v in ("AUTOUPDATE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS",
                                                          "MODELS_FETCH", "SHARE", "CLAUDE_CODE",
                                                          "EXTERNAL_SKILLS")}}
        return Launch(["opencode", "run", "--format", "json", *extra_args(ctx)], env, stdin=ctx.prompt)

    def parser(self) -> TraceParser:
        return RunJson()


class RunJson(TraceParser):
    def feed(self, obj: dict) -> list[dict]:
        kind, part = obj.get("type"), obj.get("part") or {}
        if kind == "text" and part.get("text"):
            return [event("message", kind, role="assistant", text=cut(part["text"]))]
        if kind == "tool_use":
            state = part.get("state") or {}
            out = [event("tool_call", kind, tool=part.get("tool"), input=cut(state.get("input")),
                         id=part.get("callID"))]
            if state.get("status") in ("completed", "error"):
                exit_code = (state.get("metadata") or {}).get("exit")
                out.append(event("tool_result", kind, id=part.get("callID"),
                                 ok=state["status"] == "completed" and exit_code in (None, 0),
                                 output=cut(state.get("output") or state.get("error"))))
            return out
        if kind == "step_finish":
            t = part.get("tokens") or {}
            cache = t.get("cache") or {}
            # OpenCode's input leaves out cache reads and writes, and its output leaves out reasoning.
            return [usage_event(kind, "step", (t.get("input") or 0) + (cache.get("read") or 0)
                                + (cache.get("write") or 0), (t.get("output") or 0) + (t.get("reasoning") or 0),
                                cache.get("read"), part.get("cost"))]
        if kind == "error":
            err = obj.get("error") or {}
            return [event("error", kind, message=cut((err.get("data") or {}).get("message") or err.get("name")))]
        return []

