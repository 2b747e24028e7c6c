"""Codex CLI (`codex exec --json`), on the OpenAI responses API.

Codex ignores OPENAI_BASE_URL: the proxy is a custom model provider in $CODEX_HOME/config.toml (wire_api
"responses", the only one it still speaks), with its retries, update checks, analytics and feedback off. It runs
commands without its own sandbox (a2rl's bubblewrap is the sandbox) and without approvals. By default it strips
variables named like *TOKEN* or *KEY* from the commands it runs, which would hide A2RL_RUN_TOKEN from the agent's
curl to the grader: ignore_default_excludes keeps them (the only key it holds is the cell's proxy key).
Token totals are in each `turn.completed` event. `codex exec --json` writes its warnings as completed items of type
`error` (e.g. "Model metadata for `<model>` not found. Defaulting to fallback metadata", for a model it does not
know: every local one), its errors as `error` and `turn.failed` events: the first are notices, not errors.
"""
from __future__ import annotations

import json

from agents.cli.base import CliAdapter, Context, Launch, TraceParser, cut, event, extra_args, usage_event
from contracts.registry import register

KEY_VARIABLE = "A2RL_DRIVER_KEY"


def toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


@register("cli_adapter", "codex")
class Codex(CliAdapter):
    name = "codex"
    executable = "codex"
    package = "@openai/codex"
    providers = ("openai", "openai-compatible")
    args = ("reasoning_effort",)
    release = "codex"
    release_not_held = (
        "--search: Codex offers the model its web search tool, which the provider runs (OpenAI's hosted tool); it "
        "holds only where the driver's server has that tool (not a local server), and the isolated sandbox never "
        "reaches the web itself",)

    def launch(self, ctx: Context) -> Launch:
        codex_home = ctx.home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        effort = ctx.args.get("reasoning_effort")
        # A model Codex does not know (a local one) gets the window its server reported, for Codex's compaction. Its
        # output cap is the proxy's to apply: 0.169 ignores model_max_output_tokens (its trace says so).
        window = [f"model_context_window = {ctx.context_window}"] if ctx.context_window else []
        (codex_home / "config.toml").write_text("\n".join([
            f"model = {toml_str(ctx.model)}",
            'model_provider = "a2rl"',
            'approval_policy = "never"',
            'sandbox_mode = "danger-full-access"',
            "check_for_update_on_startup = false",
            *([f"model_reasoning_effort = {toml_str(effort)}"] if effort else []),
            *window,
            "[analytics]", "enabled = false",
            "[feedback]", "enabled = false",
            "[features]", "unbounded_connection_retries = false",
            "[shell_environment_policy]", 'inherit = "all"', "ignore_default_excludes = true",
            # the proxy, also under the name the original's start.sh picks by default (its CODEX_PROVIDER: any other
            # name makes that script fetch an Azure token and exit), so a paper cell runs it with its own settings
            *[line for name in ("a2rl", "litellm") for line in (
                f"[model_providers.{name}]",
                'name = "a2rl driver proxy"',
                f"base_url = {toml_str(ctx.proxy_url + '/v1')}",
                f"env_key = {toml_str(KEY_VARIABLE)}",
                'wire_api = "responses"',
                "request_max_retries = 0",
                "stream_max_retries = 0")],
        ]) + "\n")
        argv = ["codex", "exec", "--json", "--skip-git-repo-check", *extra_args(ctx), ctx.prompt]
        return Launch(argv, {"CODEX_HOME": str(codex_home), KEY_VARIABLE: ctx.key})

    def parser(self) -> TraceParser:
        return ExecJson()


class ExecJson(TraceParser):
    def feed(self, obj: dict) -> list[dict]:
        kind = obj.get("type", "")
        if kind == "thread.started":
            return [event("session", kind, session_id=obj.get("thread_id"))]
        if kind == "turn.completed":
            u = obj.get("usage") or {}
            return [usage_event(kind, "turn", u.get("input_tokens"), u.get("output_tokens"),
                                u.get("cached_input_tokens"))]
        if kind == "turn.failed":
            return [event("error", kind, message=cut((obj.get("error") or {}).get("message")))]
        if kind == "error":
            return [event("error", kind, message=cut(obj.get("message")))]
        item = obj.get("item") or {}
        itype, iid = item.get("type"), item.get("id")
        if kind == "item.started" and itype == "command_execution":
            return [event("tool_call", f"{kind}/{itype}", tool="shell", input={"command": cut(item.get("command"))},
                          id=iid)]
        if kind != "item.completed":
            return []
        source = f"{kind}/{itype}"
        if itype == "agent_message":
            return [event("message", source, role="assistant", text=cut(item.get("text")))]
        if itype == "reasoning":
            return [event("message", source, role="reasoning", text=cut(item.get("text")))]
        if itype == "command_execution":
            return [event("tool_result", source, id=iid, ok=item.get("exit_code") == 0,
                          exit_code=item.get("exit_code"), output=cut(item.get("aggregated_output")))]
        if itype == "error":  # Codex's warnings (its errors are `error` and `turn.failed` events): a notice
            return [event("notice", source, message=cut(item.get("message")))]
        if itype in ("file_change", "mcp_tool_call", "web_search", "todo_list"):
            fields = {k: v for k, v in item.items() if k not in ("id", "type")}
            return [event("tool_call", source, tool=itype, input=cut(fields), id=iid)]
        return []

