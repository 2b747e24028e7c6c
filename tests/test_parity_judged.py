"""Parity of the judged paper tasks with the original's own code (fixtures: tests/fixtures/parity/make_alpacaeval.py and
make_deepsearchqa.py, run on RD-Agent's evaluators; no judge model here, so parity is on the request a2rl sends and
on reading the judge's reply).

AlpacaEval: the chat-completion body a2rl's judge sends equals, as JSON, the one alpaca_eval's annotator sent under
RD-Agent's config; the preference read from each recorded reply (RD-Agent's 100 real gpt-5.2 replies and odd ones)
equals the original's; the LC win rate equals alpaca_eval's on the recorded tables to 1e-9.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.fake_upstream import FakeUpstream, Reply, ToolCall
from tests.support.scripted_backend import ScriptedBackend

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
            # the request of the first row (requests go out concurrently: the first to arrive is any row's)
            firsts = {r.last_user_text.index("reference answer") > r.last_user_text.index("model answer 0")
                      for r in fake.requests if re.search(r"model answer 0(?!\d)", r.last_user_text)}
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


# --------------------------------------------------------------------------- the paper protocol inside the grader

def write_paper_data(root: Path, n: int = 12) -> Path:
    """tatsu-lab/alpaca_eval's layout: alpaca_eval_gpt4_baseline.json and df_gamed.csv (a small one, in its layout)
    side by side; tatsu-lab/alpaca's data/*.parquet for the train rows."""
    from tests.test_judging import write_alpaca_data

    write_alpaca_data(root)
    rows = [{"instruction": f"Write a greeting for person {i}.", "output": f"Hello person {i}, welcome to the team!",
             "generator": "gpt4_1106_preview", "dataset": "helpful_base"} for i in range(n)]
    (root / "alpaca_eval" / "alpaca_eval_gpt4_baseline.json").write_text(json.dumps(rows))
    (root / "alpaca_eval" / "df_gamed.csv").write_text((FIXTURES / "alpacaeval_df_gamed.csv").read_text())
    return root


def paper_config(root: Path, judge: dict) -> dict:
    from orchestrator.sweep import check_task, load_named

    config = load_named("task", "alpacaeval", "test")
    assert config["protocol"] == "paper"
    return check_task({**config, "name": "alpacaeval_paper", "eval_data": str(root / "alpaca_eval"),
                       "train_data": str(root / "alpaca"), "n_train": 20, "judge": judge, "base_model": "tiny",
                       "grader": {"backend": "transformers", "batch_size": 12, "max_new_tokens": 1024,
                                  "num_cpus": 1, "num_gpus": 0}})


def test_alpacaeval_paper_task_decodes_and_loads_as_the_original(tmp_path):
    from contracts.decoding import Decoding
    from contracts.task import load_task

    write_paper_data(tmp_path)
    task = load_task(paper_config(tmp_path, {"name": "j", "provider": "openai", "model": "gpt-5",
                                             "base_url": "http://127.0.0.1:9/v1"}), tmp_path / "cache")
    assert task.protocol == "paper" and task.judge_driver()["model"] == "gpt-5.2"   # the paper's judge model
    assert task.decoding() == Decoding(max_new_tokens=512, repetition_penalty=1.0)
    rows = task.eval_rows()
    assert rows[3]["reference"] == "Hello person 3, welcome to the team!" and rows[3]["position"] == 3
    assert "512 new tokens" in task.instructions() and "length-controlled win rate" in task.instructions()
    assert task.missing_data() == []                             # df_gamed.csv lies beside the eval file
    (tmp_path / "alpaca_eval" / "df_gamed.csv").unlink()
    assert any("df_gamed.csv" in m for m in task.missing_data())
    from contracts.specs import ConfigError

    with pytest.raises(ConfigError, match="chat"):      # alpaca_eval's judge speaks OpenAI's chat completions
        load_task(paper_config(tmp_path, {"name": "c", "provider": "anthropic", "model": "claude",
                                          "base_url": "http://127.0.0.1:9"}), tmp_path / "cache")


PAPER_KEY_VAR = "A2RL_TEST_PAPER_JUDGE_KEY"


@pytest.fixture(scope="module")
def paper_grader(ray_cluster, cache_dir, grading_port, tmp_path_factory):
    """alpacaeval under protocol paper, its judge a scripted OpenAI server (tool calls: the longer output ranks
    first) behind the real driver proxy."""
    import re

    from ray import serve

    from agents.proxy import deployment
    from contracts.task_spec import TaskSpec
    from evaluators.base_models import resolve_base_model
    from evaluators.service import app_name, deploy

    slot = re.compile(r'"model": "(m|M)",\n        "output": """(.*?)"""\n    }', re.S)

    def script(req):
        outputs = dict(slot.findall(req.last_user_text))
        first = "m" if len(outputs["m"]) >= len(outputs["M"]) else "M"
        other = "M" if first == "m" else "m"
        return Reply(tool_calls=[ToolCall("make_partial_leaderboard", {"ordered_models": [
            {"model": first, "rank": 1}, {"model": other, "rank": 2}]})])

    fake = FakeUpstream(script=script, expect_key=KEY).start()
    root = write_paper_data(tmp_path_factory.mktemp("alpaca-paper"))
    judge = {"name": "scripted-judge", "provider": "openai-compatible", "model": "judge-1",
             "base_url": fake.url + "/v1", "api_key_env": PAPER_KEY_VAR, "price_input_per_mtok": 1.0,
             "price_output_per_mtok": 2.0, "price_cached_input_per_mtok": 0.5}
    task = paper_config(root, judge)
    proxy_url = f"http://127.0.0.1:{grading_port}" + deployment.deploy({PAPER_KEY_VAR: KEY},
                                                                        {"max_attempts": 2, "base_s": 0.05})
    deploy(TaskSpec.from_config(task), str(cache_dir), emulated_gpus=True, driver_url=proxy_url)
    yield {"url": f"http://127.0.0.1:{grading_port}/alpacaeval_paper", "fake": fake,
           "handle": serve.get_app_handle(app_name("alpacaeval_paper")),
           "base": resolve_base_model("tiny", cache_dir / "models")}
    fake.stop()


def test_paper_judge_through_the_proxy_scores_the_lc_win_rate(paper_grader, tmp_path):
    from tests.test_grading import Run
    from tests.test_judging import perturbed_model

    run = Run(paper_grader, tmp_path)
    fake = paper_grader["fake"]
    n_baseline = fake.calls
    assert n_baseline >= 12                                   # the baseline, judged at registration
    baseline_body = fake.requests[0].body
    assert baseline_body["model"] == "gpt-5.2" and baseline_body["max_tokens"] == 100
    assert baseline_body["temperature"] == 0 and baseline_body["top_p"] == 1.0
    assert baseline_body["tool_choice"] == {"type": "function", "function": {"name": "make_partial_leaderboard"}}
    assert [m["role"] for m in baseline_body["messages"]] == ["system", "user"]
    perturbed_model(paper_grader["base"], run.workspace / "output" / "m1", seed=1)
    rec = run.submit("output/m1").json()
    assert rec["error"] is None, rec
    metrics = rec["metrics"]
    assert rec["score"] == metrics["lc_win_rate"] and 0 <= rec["score"] <= 100
    assert metrics["unparsed"] == 0 and rec["judge_usage"]["calls"] == fake.calls - n_baseline > 0
    # the same weights again: the score cache answers, the judge is not asked
    perturbed_model(paper_grader["base"], run.workspace / "output" / "m1b", seed=1)
    again = run.submit("output/m1b").json()
    assert again["score"] == rec["score"] and again["judge_usage"]["calls"] == 0


# --------------------------------------------------------------------------- DeepSearchQA (RD-Agent's eval.py)

@pytest.fixture(scope="module")
def dsqa_fixture():
    return json.loads((FIXTURES / "deepsearchqa.json").read_text())


def test_deepsearchqa_react_prompts_decoding_and_answers_equal_the_originals(dsqa_fixture):
    """Each scripted episode: every prompt byte-equal to the one RD-Agent's loop hands vLLM, with its decoding (256
    tokens and the three stops; 128 tokens and `]` for a forced answer), the same searches, the same answer."""
    from envs.deepsearchqa import react

    assert react.REACT_SYSTEM_PROMPT == dsqa_fixture["react_system_prompt"]
    assert list(react.TURN.stop) == dsqa_fixture["turn_params"]["stop"]
    prompts = 0
    for ep in dsqa_fixture["episodes"]:
        calls, searched = iter(ep["calls"]), []

        def generate(batch, decoding, calls=calls):
            (prompt,) = batch
            call = next(calls)
            assert prompt == call["prompt"]
            assert (decoding.max_new_tokens, list(decoding.stop)) == (call["params"]["max_tokens"],
                                                                     call["params"]["stop"])
            assert decoding.repetition_penalty == 1.0 and decoding.chat_template is False
            reply = decoding.cut(call["continuation"])       # the backend cuts at the stop strings, as vLLM
            assert reply == call["generated"]
            return [reply]

        def search(query, results=ep["search"], searched=searched):
            searched.append(query)
            return results[query]

        episode = react.ReactEpisode(react.first_prompt(ep["question"], ep["answer_type"]))
        react.play([episode], generate, [search])
        assert episode.answer == ep["answer"], ep["name"]
        assert searched == ep["searched"] == episode.searches
        assert next(calls, None) is None                       # no prompt more, none fewer
        prompts += len(ep["calls"])
    assert prompts == 29


def test_deepsearchqa_react_batches_episodes_as_if_played_alone(dsqa_fixture):
    """All scripted episodes at once, batched by decoding: each gets the prompts it got alone."""
    from envs.deepsearchqa import react

    eps = dsqa_fixture["episodes"]
    queues = {e["question"]: list(e["calls"]) for e in eps}

    def generate(batch, decoding):
        out = []
        for prompt in batch:
            question = prompt.split("Question: ")[1].split("\n")[0]
            call = queues[question].pop(0)
            assert prompt == call["prompt"]
            out.append(decoding.cut(call["continuation"]))
        return out

    episodes = [react.ReactEpisode(react.first_prompt(e["question"], e["answer_type"])) for e in eps]
    react.play(episodes, generate, [lambda q, r=e["search"]: r[q] for e in eps])
    assert [ep.answer for ep in episodes] == [e["answer"] for e in eps]
    assert all(not q for q in queues.values())


def test_deepsearchqa_judge_requests_and_verdicts_equal_the_originals(dsqa_fixture):
    from envs.deepsearchqa import react

    for case in dsqa_fixture["judge"]:
        assert case["system"] == react.JUDGE_SYSTEM
        assert react.judge_prompt(case["predicted"], case["gold"], case["answer_type"]) == case["user"]
        reply = case["reply"]
        try:
            if isinstance(reply, dict):
                raise RuntimeError(reply["error"])
            verdict = react.judge_verdict(reply)
        except (RuntimeError, IndexError):
            verdict = react.substring_match(case["predicted"], case["gold"], case["answer_type"])
        assert verdict == case["correct"], case
    assert len(dsqa_fixture["judge"]) == 19


def test_deepsearchqa_cells_reach_the_prompt_and_the_judge_as_the_original_passes_them(dsqa_fixture, cache_dir,
                                                                                     tmp_path):
    """The original's run_eval on a DSQA-full.csv whose cells have spaces around them, a newline, an empty answer
    type (make_deepsearchqa.py's cell_rows): the paper grader on the same file, its model answering at once as the
    fixture's did, hands its model the same first prompts and its judge the same texts: the cells as they are,
    unstripped, an empty answer type as `None`, as the original's `sample.get("answer_type", ...)` formats it."""
    import importlib.util

    import yaml

    from contracts.task import load_task
    from envs.deepsearchqa import react
    from evaluators.evaluate import evaluate_loaded

    spec = importlib.util.spec_from_file_location("make_deepsearchqa", FIXTURES / "make_deepsearchqa.py")
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    data = maker.write_cells_csv(tmp_path / "DSQA-full.csv")
    shipped = yaml.safe_load((Path(__file__).parents[1] / "conf" / "task" / "deepsearchqa.yaml").read_text())
    task = load_task({**shipped, "name": "deepsearchqa_cells", "data_path": str(data), "n_train": 100,
                      "n_eval": 200, "final_size": 0}, cache_dir)
    backend = ScriptedBackend(" I know it. Action: answer[Paris]")
    judge = ScriptedJudge(lambda user: "correct")
    result = evaluate_loaded(task, backend, "model", task.eval_rows(), judge=judge)
    cells = dsqa_fixture["cells"]
    assert result["score"] == cells["score"] == 100.0
    assert backend.prompts == cells["first_prompts"]   # the same questions, in the same order
    assert sorted(user for system, user, *_ in judge.asked if system == react.JUDGE_SYSTEM) == \
        sorted(cells["judge_users"])
    assert any(p.count("Question:   Which") for p in backend.prompts)   # the fixture holds such cells
    assert any("Answer type: None" in p for p in backend.prompts) and any("?\n\nAnswer type" in p
                                                                           for p in backend.prompts)


def react_expert(plans: dict[str, list[str]], own_line: bool = False) -> ScriptedBackend:
    """The paper's loop's model: on a generated world, the expert's plan written as ReAct turns (`Thought ...
    Action: search[...]` on one line, the answer the same way), cut at the decoding's stops as a backend cuts."""
    def reply(prompt, decoding) -> str:
        assert isinstance(prompt, str)                           # raw text, no chat template
        question = prompt.split("\n\nQuestion: ")[1].split("\n")[0]
        if decoding.stop == ("]",):                              # a forced answer
            return plans[question][-1].removeprefix("answer[") + "] trailing"
        n = prompt.count("\nObservation: ")
        return f" Step {n}.{chr(10) if own_line else ' '}Action: {plans[question][n]}\nObservation: made up"

    return ScriptedBackend(reply, whole=True, cut=True)


def paper_dsqa(cache_dir, judge=None, **extra):
    from contracts.task import load_task
    from tests.test_deepsearchqa import SMALL

    return load_task({**SMALL, "name": "deepsearchqa_paper", "protocol": "paper", "judge": judge, **extra}, cache_dir)


def expert_plans(task):
    from envs.deepsearchqa.expert import plan

    env = task.environment()
    return {env.question(inst).question: plan(env.question(inst)) for inst in env.instances("eval")}


class ScriptedJudge:
    """The judge's interface as the grader opens it (LLMJudge.ask; its wire: test_judge_request_without_a_limit)."""

    concurrency = 2

    def __init__(self, reply):
        self.reply, self.asked = reply, []

    def ask(self, system, user, temperature=0, max_tokens=-1):
        self.asked.append((system, user, temperature, max_tokens))
        return self.reply(user)


def test_deepsearchqa_paper_grader_plays_react_and_judges_every_answer(cache_dir):
    from contracts.decoding import Decoding
    from envs.deepsearchqa import react
    from evaluators.evaluate import evaluate_loaded

    task = paper_dsqa(cache_dir)
    assert task.decoding() == react.TURN and task.decoding().chat_template is False
    gpt = {"name": "gpt", "provider": "openai", "model": "gpt-5"}
    assert paper_dsqa(cache_dir, gpt).judge_driver()["model"] == "gpt-5"
    assert paper_dsqa(cache_dir, gpt, judge_model="gpt-5.2").judge_driver()["model"] == "gpt-5.2"  # the paper's
    rows = task.eval_rows()
    plans = expert_plans(task)
    env = task.environment()
    golds = {env.question(inst).question: env.question(inst).answer for inst in env.instances("eval")}

    def verdict(user):  # a judge that knows the gold answers
        gold = user.split("Gold answer: ")[1].split("\n")[0]
        predicted = user.split("Predicted answer: ")[1].split("\n")[0]
        return "Correct." if predicted == gold else "incorrect\nbecause"

    judge = ScriptedJudge(verdict)
    backend = react_expert(plans)
    result = evaluate_loaded(task, backend, "model", rows, judge=judge)
    assert result["score"] == 100.0 and result["metrics"]["judge_fallbacks"] == 0 and "flags" in result
    # a generated world stands in for the paper's questions (flagged); the task's config names no judge (this test
    # hands the grader one directly), which is what a run's record would say; and it has fewer than the paper's 200
    assert result["flags"] == ["approximate"], result["flags"]
    assert [n.split(":")[0] for n in result["approximations"]] == ["questions", "judge", "eval"], \
        result["approximations"]
    assert {d for d in backend.decodings} == {react.TURN}
    assert backend.prompts[0] == react.first_prompt(env.question(env.instances("eval")[0]).question,
                                                    "Single Answer")
    assert all(i["judged_by"] == "llm" and i["completion"] == golds[i["task"]] for i in result["items"])
    assert len(judge.asked) == len(rows)                        # every answer is judged
    system, user, temperature, max_tokens = judge.asked[0]
    assert system == "You are a strict answer evaluator." and (temperature, max_tokens) == (0.5, None)

    # actions on their own line: cut by the stop, then forced answers (128 tokens, stopped at "]")
    own = react_expert(plans, own_line=True)
    forced = evaluate_loaded(task, own, "model", rows, judge=ScriptedJudge(lambda user: ""))
    assert Decoding(max_new_tokens=128, stop=("]",), repetition_penalty=1.0, chat_template=False) in own.decodings
    assert all(i["steps"] == 1 for i in forced["items"])       # the forced answer ends the episode
    # an empty judge reply is a failed judgement: the substring fallback decides, recorded per item
    assert forced["metrics"]["judge_fallbacks"] == len(rows)
    assert all(i["judged_by"].startswith("substring: IndexError") for i in forced["items"])
    assert forced["score"] == 100.0                            # the gold answer contains itself


def react_prompt_in(text: str) -> bool:
    from envs.deepsearchqa import react

    return react.REACT_SYSTEM_PROMPT in text and "Answer type: <Single Answer or Set Answer>" in text


def test_deepsearchqa_paper_without_a_judge_is_approximate_and_a2rl_is_unchanged(cache_dir):
    from evaluators.evaluate import evaluate_loaded
    from tests.test_deepsearchqa import SMALL, expert

    task = paper_dsqa(cache_dir)
    plans = expert_plans(task)
    result = evaluate_loaded(task, react_expert(plans), "model", task.eval_rows())
    assert result["flags"] == ["approximate"] and result["score"] == 100.0
    assert all(i["judged_by"] == "substring: no judge" for i in result["items"])
    text = task.instructions()                                  # the agent reads the protocol it is graded by
    assert react_prompt_in(text) and "marked approximate" in text
    from contracts.task import load_task

    a2rl = load_task(SMALL, cache_dir)                          # a2rl's protocol: the lockstep chat loop
    assert a2rl.protocol == "a2rl" and a2rl.play(a2rl.eval_rows(), None) is None
    graded = evaluate_loaded(a2rl, ScriptedBackend(expert(expert_plans(a2rl))), "model", a2rl.eval_rows())
    assert graded["score"] == 100.0


def test_judge_request_without_a_limit_at_the_papers_temperature():
    from evaluators.judging.pairwise import LLMJudge

    fake = FakeUpstream(script=lambda req: Reply(text="correct"), expect_key=KEY).start()
    try:
        judge = LLMJudge({"name": "j", "provider": "openai-compatible", "model": "gpt-5.2"}, fake.url, KEY)
        assert judge.ask("You are a strict answer evaluator.", "u", temperature=0.5, max_tokens=None) == "correct"
        body = fake.requests[-1].body
        assert body == {"model": "gpt-5.2", "temperature": 0.5, "messages": [
            {"role": "system", "content": "You are a strict answer evaluator."}, {"role": "user", "content": "u"}]}
        judge.ask("s", "u")                                     # a2rl's own: greedy, with its limit
        assert fake.requests[-1].body["temperature"] == 0 and fake.requests[-1].body["max_completion_tokens"] == 16
        judge.close()
    finally:
        fake.stop()


def test_alpacaeval_paper_judge_outage_is_judge_unavailable():
    """A judge error alpaca_eval does not retry (not a rate limit) stops the evaluation as an infra error (the grader
    refunds it), never a score."""
    from evaluators.judging.client import JudgeUnavailable

    fake = FakeUpstream(script=lambda req: Reply(status=500, error="judge overloaded"), expect_key=KEY).start()
    try:
        with pytest.raises(JudgeUnavailable, match="InternalServerError"):
            annotate_with(fake, [{"instruction": "Say hi.", "reference": "Hi."}], ["Hello."])
    finally:
        fake.stop()
