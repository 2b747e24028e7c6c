"""The real agent CLIs in paper cells (issue 34, item 5): Claude Code, Codex, Gemini CLI and OpenCode, installed from
npm as tests/test_cli_agents.py installs them, each on alfworld_small and webshop_small graded by the paper's protocol
(small sizes, generated games and store), driven by a scripted upstream on loopback in place of the paid API.

The scripted model reads the submit commands out of what the CLI sent it, as sent, and asks the CLI to run them:
the mission list's one line, where the original's start.sh built the prompt (as written, its body
`{\\"model_path\\": ...}` is not JSON and the original's server answers it 400:
tests/fixtures/parity/agent_side/*.json), then instructions.md's own example, which every paper prompt holds. Nothing
is unescaped: a CLI that mangles its prompt fails here as a real model would fail to submit. The submission is a
copy of the base model, made the way an agent makes one: `cp -r "$MODEL_PATH/." "$OUTPUT_DIR/v1"`. Each cell must
reach its grader through its relay, with no token, and score; the answers are kept in the workspace's code/ for the
assertions. The model's user message is checked against the prompt: a2rl's, whole, where a2rl launched the CLI; the
original's start.sh prompt holding instructions.md unchanged, where that script did.

The cells are slow (two interactive tasks built and graded, twelve CLI cells): `.venv/bin/python -m pytest -m slow
tests/test_paper_real_clis.py`. OpenHands (a Python program, `-m python_agents`) is left out here.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from agents.cli.base import build_prompt
from tests.support.fake_upstream import SHELL_TOOLS, FakeRequest, Reply, ToolCall, FakeUpstream
from tests.test_cli_agents import (  # noqa: F401  (cli_bin and sweep_runner are fixtures this module uses)
    REAL_KEY,
    USAGE,
    cli_bin,
    collect,
    drivers_override,
    fake_driver,
    sweep_runner,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "parity" / "agent_side"
CELLS = [("claude_code", "fake-anthropic"), ("codex", "fake-openai"), ("gemini_cli", "fake-gemini"),
         ("opencode", "fake-anthropic"), ("opencode", "fake-openai"), ("opencode", "fake-gemini")]
ORIGINAL = {"claude_code": "claude", "codex": "codex", "gemini_cli": "gemini", "opencode": "opencode"}
PROVIDERS = {"fake-anthropic": ("anthropic", "claude-fake"), "fake-openai": ("openai", "gpt-fake"),
             "fake-gemini": ("gemini", "gemini-fake")}
# Small on two cores: a few generated games / products and two eval episodes (the paper's 50 steps each, its decoding).
TASKS = {"alfworld_small": ["task.protocol=paper", "task.n_train=4", "task.n_eval=2", "task.final_size=0"],
         "webshop_small": ["task.protocol=paper", "task.n_products=60", "task.n_train=4", "task.n_eval=2",
                           "task.final_size=0"]}
ONE_LINE = re.compile(r"^\s*curl -X POST \S+/submit .*-d '.*'\s*$")          # the mission list's step 6
SPANNING = re.compile(r'^\s*curl -X POST "\$GRADING_SERVER_URL/submit" \\$')  # instructions.md's first example


def texts(value) -> list[str]:
    """Every string in a request body (messages, system prompt, instructions), however the provider nests them."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []


def submit_commands(body: dict) -> tuple[str | None, str | None]:
    """(the prompt's one-line mission command, instructions.md's first example joined into one line), as given."""
    lines = [line for text in texts(body) for line in text.splitlines()]
    one = [line.strip() for line in lines if ONE_LINE.match(line)]
    for i, line in enumerate(lines):
        if SPANNING.match(line):
            block = [line.strip()]
            while block[-1].endswith("\\") and i + len(block) < len(lines):
                block.append(lines[i + len(block)].strip())
            return (one[-1] if one else None), " ".join(part.rstrip("\\").strip() for part in block)
    return (one[-1] if one else None), None


def run_the_prompts_curl(req: FakeRequest) -> Reply:
    """The scripted model: one shell command (copy the base model, the mission line as given, the example), done."""
    if req.tool_results:
        return Reply(text="Submitted the model. Done.")
    name = next((n for n in SHELL_TOOLS if n in req.tools), None)
    mission, example = submit_commands(req.body)
    if name is None or example is None:
        return Reply(text="No shell tool or no submit example in the prompt.")
    as_given = f"{{ {mission} -s -w '\\n%{{http_code}}' > code/as_given.txt; }}; " if mission else ""
    command = (f'mkdir -p "$OUTPUT_DIR" && cp -r "$MODEL_PATH/." "$OUTPUT_DIR/v1" && {as_given}'
               f"{example} -s > code/submission.json && echo SUBMITTED")
    props = (req.tools[name] or {}).get("properties") or {}
    param = next((p for p in ("command", "cmd") if p in props), "command")
    value = ["bash", "-lc", command] if (props.get(param) or {}).get("type") == "array" else command
    return Reply(tool_calls=[ToolCall(name, {param: value})])


@pytest.fixture(scope="module")
def paper_runs(sweep_runner):  # noqa: F811
    fake = FakeUpstream(script=run_the_prompts_curl, usage=USAGE, expect_key=REAL_KEY).start()
    drivers = [fake_driver(name, provider, fake, model) for name, (provider, model) in PROVIDERS.items()]
    runs = {}
    try:
        for task, overrides in TASKS.items():
            out = sweep_runner(f"paper-real-{task}", [
                f"sweep.agents=[{','.join(dict.fromkeys(a for a, _ in CELLS))}]", drivers_override(drivers),
                f"task={task}", *overrides, "sweep.budget.wall_time_s=600", "sweep.budget.max_submissions=3"])
            runs[task] = collect(out, fake)
    finally:
        fake.stop()
    return runs


@pytest.mark.slow
@pytest.mark.timeout(2400)  # the first cell waits on the install, two task builds and eight cells
@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("agent, driver", CELLS)
def test_a_real_cli_submits_with_the_prompts_curl_line_and_scores(paper_runs, task, agent, driver):
    run = paper_runs[task]
    row, events = run.of(agent, driver)
    adir = run.out / "cells" / row["cell_id"] / "attempt-1"
    outcome = json.loads((adir / "outcome.json").read_text())
    stderr = (adir / "agent.stderr").read_text(errors="replace")[-1500:]
    assert row["status"] == "completed", (row, stderr)
    assert outcome.get("agent_side") == "paper", outcome  # the original's workspace, environment and API
    assert isinstance(outcome.get("not_held"), list), outcome  # what docs/agents.md promises for every paper cell
    workspace = Path(outcome["workspace"])
    mine = [r for r in run.fake.requests if str(workspace) in r.raw.decode()]
    if outcome["launch"] == "a2rl":  # a2rl's prompt, whole, as the model's user message
        prompt = build_prompt(workspace, {}, paper=True)
        assert any(prompt in r.user_texts() for r in mine), [t[:300] for r in mine for t in r.user_texts()]
    else:  # the original's start.sh prompt: instructions.md inside it, unchanged
        instructions = (workspace / "instructions.md").read_text().strip()
        assert any(instructions in t for r in mine for t in r.user_texts()), outcome["launch"]
    answer = json.loads((workspace / "code" / "submission.json").read_text())
    assert isinstance(answer.get("score"), (int, float)) and answer["submission_id"] >= 1, answer  # graded
    assert answer["model_path"].endswith("/output/v1"), answer
    subs = [e["payload"] for e in events if e["kind"] == "submission"]
    assert subs and all(s["score"] is not None for s in subs), subs
    assert "copy_of_base" in subs[-1]["flags"], subs  # the grader saw it was the base model
    if outcome.get("launch") != "a2rl":  # the original's start.sh: its mission line, as the original answers it
        body, _, status = (workspace / "code" / "as_given.txt").read_text().rpartition("\n")
        # the original's server refuses a body that is not JSON before anything of the task: gsm8k's fixture says
        original = json.loads((FIXTURES / f"{ORIGINAL[agent]}-gsm8k.json").read_text())
        assert int(status) == original["start_sh"]["submit"]["as_given"]["status"], body
    calls = [e["payload"] for e in events if e["kind"] == "agent_trace" and e["payload"]["type"] == "tool_call"]
    assert any("/submit" in json.dumps(c["input"]) for c in calls), calls


def test_the_scripted_model_finds_both_forms_of_the_submit_command():
    """The mission list's one line (the original's start.sh) and instructions.md's spanning example, as given."""
    one = ("6. Submit:\n   curl -X POST http://127.0.0.1:9/submit -H 'Content-Type: application/json' "
           "-d '{\\\"model_path\\\": \\\"/w/output/v1\\\"}'\n")
    spanning = ('```bash\ncurl -X POST "$GRADING_SERVER_URL/submit" \\\n    -H "Content-Type: application/json" \\\n'
                "    -d '{\"model_path\": \"'$OUTPUT_DIR'/v1\"}'\n```\n")
    mission, example = submit_commands({"messages": [{"content": [{"text": one + spanning}]}]})
    assert mission == one.splitlines()[1].strip()
    assert shlex.split(example)[:4] == ["curl", "-X", "POST", "$GRADING_SERVER_URL/submit"]
    assert example.endswith("v1\"}'")
    quoted = '"' + spanning.replace('"', '\\"') + '"'  # what OpenCode's `run` made of a message given as an argument
    assert submit_commands({"messages": [{"content": quoted}]}) == (None, None)
    assert submit_commands({"messages": []}) == (None, None)
