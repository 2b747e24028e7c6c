"""The report's LLM-written run summaries (analysis.summarize): a real sweep, then the report with a driver that is the
scripted upstream speaking OpenAI's real wire protocol on 127.0.0.1."""
from __future__ import annotations

import json
import secrets
import textwrap

import pandas as pd
import pytest

from agents.proxy.usage import Usage
from contracts.records import read_jsonl
from contracts.specs import ConfigError
from orchestrator.analysis import run_summary
from orchestrator.analysis.report import build_report
from orchestrator.ledger import Ledger
from tests.conftest import compose
from tests.support.fake_upstream import FakeUpstream, Reply

KEY_VAR = "A2RL_TEST_SUMMARY_KEY"
REAL_KEY = "sk-summary-" + secrets.token_hex(16)
USAGE = Usage(input_tokens=3000, output_tokens=150, cached_tokens=1000)
PRICES = {"price_input_per_mtok": 1.25, "price_output_per_mtok": 10.0, "price_cached_input_per_mtok": 0.125}
SUMMARY = "### What the agent tried\nIt submitted the base model twice.\n### Why the score moved\nIt did not.\n" \
          "### Outcome\ncopy_model_fallback: both submissions are flagged copy_of_base."

# Two submissions of the base model, with the code changed in between: a trajectory, snapshots and a diff to read.
AGENT = """
import json, pathlib, shutil, urllib.request
run = json.load(open("run.json"))

def submit():
    headers = {"Authorization": "Bearer " + run["run_token"], "Content-Type": "application/json"}
    body = json.dumps({"model_path": "output/m"}).encode()
    request = urllib.request.Request(run["grading_url"] + "/submit", body, headers)
    print("ANSWER", urllib.request.urlopen(request, timeout=600).read().decode(), flush=True)

shutil.copytree("model", "output/m")
pathlib.Path("code/train.py").write_text("LEARNING_RATE = 1e-3\\n")
submit()
pathlib.Path("code/train.py").write_text("LEARNING_RATE = 3e-4  # lowered after the first score\\n")
submit()
"""


def driver_override(fake: FakeUpstream, model: str) -> str:
    driver = {"name": "fake-gpt", "provider": "openai", "model": model, "base_url": fake.url + "/v1",
              "api_key_env": KEY_VAR, **PRICES}
    return "analysis.summarize={" + ",".join(f"{k}:'{v}'" if isinstance(v, str) else f"{k}:{v}"
                                              for k, v in driver.items()) + "}"


def summarizer(out, *overrides):
    cfg = compose([f"output_dir={out}", "driver_proxy.backoff_s=0.01", *overrides])
    return run_summary.summarizer_from_config(cfg.analysis, cfg.driver_proxy)


def test_run_summaries_are_written_metered_cached_and_optional(run_sweep, tmp_path, monkeypatch):
    (tmp_path / "agent.py").write_text(textwrap.dedent(AGENT))
    _, _, out = run_sweep(["sweep=smoke", "agent=command", f"agent.files=[{tmp_path / 'agent.py'}]",
                           "agent.command=python code/agent.py", "task=arithmetic", "sweep.budget.wall_time_s=300",
                           "sandbox.kill_grace_s=1"])
    ((cell_id, row),) = Ledger(out / "ledger.sqlite").cells().items()
    # its second submission was its last (smoke's max_submissions=2): the budget ended it
    assert (row["status"], row["limit_hit"], row["error"]) == ("budget_exhausted", "submissions", None), row
    cell_dir = out / "cells" / cell_id

    # Off by default: the deterministic report only, and it is what stays the same whatever a driver does.
    assert summarizer(out) is None
    build_report(out)
    run_report_md = (cell_dir / "report.md").read_text()
    report = json.loads((cell_dir / "report.json").read_text())
    assert report["n_submissions"] == 2 and not (cell_dir / "summary.md").exists()
    assert "Run summaries" not in (out / "report" / "report.md").read_text()

    # A named driver whose key is not set is refused before anything is read.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="analysis.summarize=gpt: the environment variable OPENAI_API_KEY"):
        summarizer(out, "analysis.summarize=gpt")

    monkeypatch.setenv(KEY_VAR, REAL_KEY)
    fake = FakeUpstream(script=lambda req: Reply(text=SUMMARY), usage=USAGE, expect_key=REAL_KEY).start()
    try:
        with_summary = summarizer(out, driver_override(fake, "gpt-fake"))
        build_report(out, summarizer=with_summary)
        assert fake.calls == 1
        (req,) = fake.requests
        # The prompt holds the run report's facts, the code diff between the submissions and the timeline.
        assert req.model == "gpt-fake" and req.system == run_summary.SYSTEM
        assert req.body["max_completion_tokens"] == 4096 and "temperature" not in req.body
        prompt = req.last_user_text
        assert cell_id in prompt and f"Outcome: {report['outcome_class']}" in prompt
        assert report["outcome_class"] == "copy_model_fallback" and "copies of the base: 2" in prompt
        assert "## Submission #1" in prompt and "to #2" in prompt
        assert "-LEARNING_RATE = 1e-3" in prompt and "+LEARNING_RATE = 3e-4  # lowered after the first score" in prompt
        assert "submission #1: score" in prompt and "submission #2: score" in prompt and "copy_of_base" in prompt
        assert "records no trace" in prompt and "ANSWER" in prompt  # a command agent: what it printed instead

        # Written beside the run report, which is untouched; metered exactly as the upstream reported.
        assert (cell_dir / "report.md").read_text() == run_report_md
        assert SUMMARY in (cell_dir / "summary.md").read_text()
        cost = (2000 * 1.25 + 1000 * 0.125 + 150 * 10.0) / 1e6
        kept = json.loads((cell_dir / "summary.json").read_text())
        assert (kept["input_tokens"], kept["output_tokens"], kept["cached_tokens"]) == (3000, 150, 1000)
        assert kept["cost_usd"] == pytest.approx(cost, rel=1e-12) and kept["model"] == "gpt-fake"
        (call,) = read_jsonl(cell_dir / "analysis_calls.jsonl")
        assert call["kind"] == "analysis_usage" and call["status"] == 200 and call["attempts"] == 1
        assert (call["input_tokens"], call["output_tokens"], call["cost_usd"]) == (3000, 150, round(cost, 10))
        assert REAL_KEY not in (cell_dir / "analysis_calls.jsonl").read_text() + (cell_dir / "summary.json").read_text()
        sweep_md = (out / "report" / "report.md").read_text()
        assert f"[summary](../cells/{cell_id}/summary.md)" in sweep_md
        assert "> It submitted the base model twice." in sweep_md
        assert f"This report asked for 1: 3000 input and 150 output tokens, ${cost:.4f}" in sweep_md
        (row,) = pd.read_parquet(out / "report" / "summaries.parquet").itertuples()
        assert (row.cell_id, row.status, row.input_tokens, row.output_tokens) == (cell_id, "new", 3000, 150)

        # A second report is served from the cache: nothing is asked, nothing more is metered.
        build_report(out, summarizer=with_summary)
        assert fake.calls == 1 and len(read_jsonl(cell_dir / "analysis_calls.jsonl")) == 1
        sweep_md = (out / "report" / "report.md").read_text()
        assert "This report asked for 0: 0 input and 0 output tokens, $0.0000" in sweep_md
        assert "1 came from the cache" in sweep_md and "> It submitted the base model twice." in sweep_md
    finally:
        fake.stop()

    # Another model is another key; an upstream that keeps failing leaves every report intact, with a clear note.
    down = FakeUpstream(fail_first=100, fail_status=503).start()
    try:
        build_report(out, summarizer=summarizer(out, driver_override(down, "gpt-other"),
                                                "driver_proxy.max_attempts=2"))
    finally:
        down.stop()
    assert down.calls == 2  # retried as the driver proxy retries
    assert (cell_dir / "report.md").read_text() == run_report_md
    assert json.loads((cell_dir / "summary.json").read_text()) == kept  # the earlier summary is kept as it was
    first, failed = read_jsonl(cell_dir / "analysis_calls.jsonl")
    assert failed["status"] == 503 and failed["attempts"] == 2 and failed["input_tokens"] == 0
    sweep_md = (out / "report" / "report.md").read_text()
    assert "No new summary: the driver failed** (HTTP 503 after 2 attempt(s)" in sweep_md
    assert "## Held-out final score" in sweep_md and "## Cells" in sweep_md


def test_the_agents_trace_is_in_the_timeline_cut_at_both_ends(tmp_path):
    s = run_summary.Summarizer({"name": "d", "provider": "openai", "model": "m"}, None, 100, 1000, 400, 1, None)
    report = {"cell_id": "c", "attempt": 1, "trajectory": []}
    trace = [{"type": "session", "model": "m"}, {"type": "tool_call", "tool": "Bash", "input": {"command": "ls"}},
             {"type": "usage", "input_tokens": 5}] + [{"type": "message", "role": "assistant", "text": f"step {i}"}
                                                       for i in range(40)]
    events = [{"attempt": 1, "t": float(i), "kind": "agent_trace", "payload": p} for i, p in enumerate(trace)]
    events += [{"attempt": 1, "t": 2.5, "kind": "submission", "payload": {"submission_id": 1, "score": 12.0,
                                                                           "improvement": 2.0, "flags": []}},
               {"attempt": 0, "t": 0.0, "kind": "agent_trace", "payload": {"type": "message", "text": "retried"}}]
    lines = run_summary._timeline(report, events, tmp_path, s.max_trace_chars)
    text = "\n".join(lines)
    assert lines[0] == "t=0.0 session: model=m"
    assert lines[1] == 't=1.0 tool_call: tool=Bash, input={"command": "ls"}'
    assert lines[2] == "t=2.5 submission #1: score 12.000, improvement +2.000"
    assert "input_tokens" not in text and "retried" not in text  # usage counts and other attempts left out
    assert "events not shown" in text and "text=step 39" in text and "text=step 20" not in text
    assert "records no trace" not in text
