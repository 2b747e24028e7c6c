"""Parity of the judged paper tasks with the original's own code (fixtures: tests/fixtures/parity/make_alpacaeval.py and
make_deepsearchqa.py, run on RD-Agent's evaluators; no judge model here, so parity is on the request a2rl sends and
on reading the judge's reply).

AlpacaEval: the chat-completion body a2rl's judge sends equals, as JSON, the one alpaca_eval's annotator sent under
RD-Agent's config; the preference read from each recorded reply (RD-Agent's 100 real gpt-5.2 replies and odd ones)
equals the original's; the LC win rate equals alpaca_eval's on the recorded tables to 1e-9.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_upstream import FakeUpstream, Reply, ToolCall

FIXTURES = Path(__file__).parent / "fixtures" / "parity"
KEY = "sk-judge-parity"
JUDGE = {"name": "paper-judge", "provider": "openai-compatible", "model": "gpt-5.2"}


@pytest.fixture(scope="module")
def alpaca_fixture():
    return json.loads((FIXTURES / "alpacaeval.json").read_text())


def scripted_judge(replies: dict[str, dict]):
    """A fake OpenAI judge: the reply of the longest marker found in the prompt (a tool call's arguments, sent as
    they are, or plain content); by default a ranking that prefers the first output."""

    def script(req):
        marker = max((m for m in replies if m in req.last_user_text), key=len, default=None)
        reply = replies.get(marker, {"arguments": '{"ordered_models":[{"model":"m","rank":1},{"model":"M","rank":2}]}'})
        if "arguments" in reply:
            return Reply(tool_calls=[ToolCall("make_partial_leaderboard", reply["arguments"])])
        return Reply(text=reply["content"])

    return FakeUpstream(script=script, expect_key=KEY).start()


def annotate_with(fake, rows, outputs):
    from evaluators.judging.alpaca_eval_annotator import annotate
    from evaluators.judging.pairwise import LLMJudge

    judge = LLMJudge(JUDGE, fake.url, KEY, concurrency=4)
    try:
        return annotate(judge, rows, outputs)
    finally:
        judge.close()


def test_alpacaeval_request_bodies_equal_the_originals(alpaca_fixture):
    cases = alpaca_fixture["requests"]
    fake = scripted_judge({})
    try:
        got = annotate_with(fake, [{"instruction": c["instruction"], "reference": c["reference"]} for c in cases],
                            [c["model"] for c in cases])
        bodies = [r.body for r in fake.requests]
    finally:
        fake.stop()
    expected = [c["body"] for c in cases if c["body"] is not None]
    assert len(bodies) == len(expected) == 11               # equal outputs are not sent: preference 1.5
    key = json.dumps
    assert sorted(map(key, bodies)) == sorted(map(key, expected))   # every body, as JSON, the original's
    equal = next(i for i, c in enumerate(cases) if c["body"] is None)
    assert got[equal]["preference"] == 1.5
    for case, annotation in zip(cases, got):                 # the hard cases' default reply: the first output wins
        if "preference" in case:
            assert annotation["preference"] == case["preference"], case["instruction"]


def test_alpacaeval_preferences_read_from_recorded_replies_equal_the_originals(alpaca_fixture):
    """RD-Agent's 100 recorded gpt-5.2 replies (two runs over 50 instructions) and 16 odd replies: the preference
    the original read, after its seeded swap, for each."""
    table, odd = alpaca_fixture["recorded_table"], alpaca_fixture["parsing"]
    agree = 0
    for run in ("a", "b"):
        rows = [r for r in table if r["run"] == run]
        # the swap depends on the instruction only; short outputs carry a marker the scripted judge answers by
        outputs = [f"model answer {i}" for i in range(len(rows))]
        fake = scripted_judge({out: {"arguments": r["raw_completion"]} for out, r in zip(outputs, rows)})
        try:
            got = annotate_with(fake, [{"instruction": r["instruction"], "reference": "reference answer"}
                                       for r in rows], outputs)
            firsts = {r.last_user_text.index("reference answer") > r.last_user_text.index("model answer")
                      for r in fake.requests[:1]}
        finally:
            fake.stop()
        assert [g["preference"] for g in got] == [r["preference"] for r in rows] == \
            [r["recorded_preference"] for r in rows]
        assert [g["raw_completion"] for g in got] == [r["raw_completion"] for r in rows]
        assert firsts == {rows[0]["model_shown_first"]}
        agree += len(rows)
    assert agree == 100

    fake = scripted_judge({c["instruction"]: c["reply"] for c in odd})
    try:
        got = annotate_with(fake, [{"instruction": c["instruction"], "reference": c["reference"]} for c in odd],
                            [c["model"] for c in odd])
    finally:
        fake.stop()
    assert [g["preference"] for g in got] == [c["preference"] for c in odd]
    assert sum(c["preference"] is None for c in odd) == 8     # unreadable: dropped from the win rate, as the package


@pytest.mark.parametrize("run", ["a", "b"])
def test_alpacaeval_lc_win_rate_equals_the_originals(alpaca_fixture, tmp_path, run):
    from evaluators.judging.alpaca_eval_annotator import length_controlled

    (tmp_path / "df_gamed.csv").write_text((FIXTURES / "alpacaeval_df_gamed.csv").read_text())
    rows = [r for r in alpaca_fixture["recorded_table"] if r["run"] == run]
    # the GLM reads lengths only: outputs of the recorded lengths
    ours = length_controlled([r["preference"] for r in rows], ["r" * r["output_1_len"] for r in rows],
                             ["m" * r["output_2_len"] for r in rows], [r["index"] for r in rows], tmp_path)
    theirs = alpaca_fixture["lc"][run]
    assert ours["length_controlled_winrate"] == pytest.approx(theirs["length_controlled_winrate"], abs=1e-9)
    assert ours["lc_standard_error"] == pytest.approx(theirs["lc_standard_error"], abs=1e-9)
    assert ours["win_rate"] == pytest.approx(theirs["win_rate"], abs=1e-9)
    if run == "b":  # the instruction difficulty matters here: a table in another order gives another number
        shuffled = length_controlled([r["preference"] for r in rows], ["r" * r["output_1_len"] for r in rows],
                                     ["m" * r["output_2_len"] for r in rows], [r["index"] for r in rows][::-1],
                                     tmp_path)
        assert abs(shuffled["length_controlled_winrate"] - ours["length_controlled_winrate"]) > 0.1
