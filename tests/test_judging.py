"""Level 2: pairwise judging, win rates, the alpacaeval task and its offline twin.

The LC win rate is checked against the alpaca_eval library on a fixed table; the LLM judge runs for real through
the driver proxy (a Serve deployment) to a scripted judge speaking the OpenAI protocol on loopback, inside the real
grading service over HTTP: metered as judge usage, cached, and an outage refunded rather than scored.
"""
from __future__ import annotations

import json
import re

import httpx
import numpy as np
import pandas as pd
import pytest

from contracts.specs import ConfigError
from contracts.task import load_task
from evaluators.judging.pairwise import DRAW, FIRST, SECOND, RubricJudge, judge_all, model_goes_first
from evaluators.judging.winrate import length_controlled_win_rate, win_rate
from evaluators.score_cache import ScoreCache
from orchestrator.sweep import check_task, load_named
from tests.support.cells import cells_ended
from tests.support.fake_upstream import FakeUpstream, Reply


def fixed_table(n=200, seed=0):
    """Preferences that depend on length (longer model outputs win more), as a verbose model's would."""
    rng = np.random.default_rng(seed)
    ref_len, mod_len = rng.integers(100, 2000, n), rng.integers(100, 3000, n)
    wins = rng.random(n) < 0.1 + 0.8 * (mod_len > ref_len)
    prefs = np.where(wins, 2.0, 1.0)
    prefs[:4] = 1.5
    return list(prefs), list(mod_len), list(ref_len), list(rng.normal(size=n))


@pytest.fixture
def alpaca_eval_glm(monkeypatch, tmp_path):
    """The library's GLM (alpaca_eval is installed with the setuptools that still has pkg_resources: no stub, which
    the package's cached modules would keep for later tests); it reads instruction difficulty from a hub file,
    written here in its layout."""
    glm = pytest.importorskip("alpaca_eval.metrics.glm_winrate")

    def use(difficulty):
        csv = tmp_path / "df_gamed.csv"
        pd.DataFrame({"index": range(len(difficulty)), "instruction_difficulty": difficulty, "preference": 1.5,
                      "not_gamed_baseline": False, "output_1": "a", "output_2": "b", "model": "m"}).to_csv(csv)
        monkeypatch.setattr(glm, "hf_hub_download", lambda **_: str(csv))
        return glm

    return use


@pytest.mark.parametrize("with_difficulty", [False, True])
def test_lc_win_rate_matches_alpaca_eval(alpaca_eval_glm, with_difficulty):
    prefs, mod_len, ref_len, difficulty = fixed_table()
    glm = alpaca_eval_glm(difficulty)
    annotations = pd.DataFrame({"preference": prefs, "output_1": ["r" * n for n in ref_len],
                                "output_2": ["m" * n for n in mod_len], "index": range(len(prefs)),
                                "generator_1": "reference", "generator_2": "model", "annotator": "judge"})
    name = "length_controlled_noreg" if with_difficulty else "length_controlled_minimal"
    theirs = glm.get_length_controlled_winrate(annotations, glm_name=name, save_weights_dir=None,
                                               is_warn_extreme_changes=False)
    ours = length_controlled_win_rate(prefs, mod_len, ref_len, difficulty if with_difficulty else None)
    assert ours == pytest.approx(theirs["length_controlled_winrate"], abs=1e-6)
    assert win_rate(prefs) == pytest.approx(theirs["win_rate"], abs=1e-9)
    assert ours < win_rate(prefs) - 1  # the length bias is taken out: a real correction, not a copy of the win rate


def test_lc_win_rate_edge_cases():
    assert length_controlled_win_rate([2.0] * 5, [10] * 5, [20] * 5) is None      # too few to fit
    assert length_controlled_win_rate([1.0] * 20, list(range(20)), [5] * 20) == 0  # all losses: nothing to fit
    assert win_rate([2.0, 1.0, 1.5, 2.0]) == pytest.approx(62.5)


def test_positions_are_seeded_balanced_and_mapped_back():
    ids = [f"item-{i}" for i in range(400)]
    first = [model_goes_first(0, i) for i in ids]
    assert first == [model_goes_first(0, i) for i in ids]                  # the same questions on a rerun
    assert 150 < sum(first) < 250                                          # both sides, about evenly
    assert first != [model_goes_first(1, i) for i in ids]                  # another seed, another draw

    class PrefersA(RubricJudge):  # a judge with pure position bias
        def compare(self, instruction, a, b, row):
            return FIRST

    rows = [{"id": i, "instruction": "say hi", "reference": "hi", "gold": "hi"} for i in ids[:50]]
    items = judge_all(PrefersA(), rows, ["hello"] * 50, seed=0)
    # a position-biased judge gives the model exactly the items it saw first: the bias averages out, not compounds
    assert [it["preference"] == 2.0 for it in items] == [it["model_first"] for it in items]


def test_judgements_are_cached_by_what_decides_them(tmp_path):
    calls = []

    class Counting(RubricJudge):
        def compare(self, instruction, a, b, row):
            calls.append(instruction)
            return super().compare(instruction, a, b, row)

    rows = [{"id": f"q{i}", "instruction": f"q{i}", "reference": "abc", "gold": "abcd"} for i in range(6)]
    cache = ScoreCache(tmp_path / "judgements")
    first = judge_all(Counting(), rows, ["abcd", "x", "abc", "abcd", "zz", "abcd"], seed=3, cache=cache)
    assert len(calls) == 6 and not any(it["cached"] for it in first)
    assert [it["score"] for it in first] == [1.0, 0.0, 0.5, 1.0, 0.0, 1.0]   # closer to gold wins; equal draws
    again = judge_all(Counting(), rows, ["abcd", "x", "abc", "abcd", "zz", "abcde"], seed=3, cache=cache)
    assert len(calls) == 7                                   # only the changed output asked the judge again
    assert [it["cached"] for it in again] == [True] * 5 + [False]
    assert [it["score"] for it in again[:5]] == [it["score"] for it in first[:5]]


def test_rubric_judge():
    judge = RubricJudge()
    row = {"gold": "APPLE"}
    assert judge.compare("", "APPLE", "Apple", row) == FIRST
    assert judge.compare("", "banana", "APPLE", row) == SECOND
    assert judge.compare("", "x", "x", row) == DRAW


def test_offline_twin_splits_are_disjoint_and_secret(tmp_path):
    config = load_named("task", "alpacaeval_offline", "test")
    task = load_task(config, tmp_path / "a")
    train, evals = task.train_rows(), task.eval_rows()
    assert len(train) == 2000 and len(evals) == 64
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in evals}
    assert all(r["completion"] == r["answer"] for r in train)
    assert all(r["reference"] != r["gold"] for r in evals)             # each reference has its mistake
    assert (tmp_path / "a" / "grading" / "eval-salt").exists()
    other = load_task(config, tmp_path / "b").eval_rows()              # another grading side, another secret
    assert [r["prompt"] for r in other] != [r["prompt"] for r in evals]
    assert "win rate" in task.instructions() and "gold" not in json.dumps(train[0])


def write_alpaca_data(root):
    """Small files in the upstream layouts: tatsu-lab/alpaca (data/*.parquet) and alpaca_eval.json."""
    (root / "alpaca" / "data").mkdir(parents=True)
    pd.DataFrame({"instruction": [f"Name a colour number {i}." for i in range(30)],
                  "input": ["" if i % 2 else f"context {i}" for i in range(30)],
                  "output": [f"Colour {i} is blue." for i in range(30)],
                  "text": ["..."] * 30}).to_parquet(root / "alpaca" / "data" / "train-00000-of-00001.parquet")
    rows = [{"instruction": f"Write a greeting for person {i}.", "output": f"Hello person {i}, welcome!",
             "generator": "gpt4_1106_preview", "dataset": "helpful_base"} for i in range(12)]
    (root / "alpaca_eval").mkdir()
    (root / "alpaca_eval" / "alpaca_eval.json").write_text(json.dumps(rows))


def alpacaeval_config(root, judge, **extra):
    """a2rl's own protocol (the paper's: tests/test_parity_judged.py)."""
    return {**load_named("task", "alpacaeval", "test"), "protocol": "a2rl", "eval_data": str(root / "alpaca_eval"),
            "train_data": str(root / "alpaca"), "n_train": 20, "judge": judge, "base_model": "tiny",
            "grader": {"backend": "transformers", "batch_size": 12, "max_new_tokens": 12, "num_cpus": 1,
                       "num_gpus": 0}, **extra}


def test_alpacaeval_loads_the_upstream_layouts(tmp_path):
    write_alpaca_data(tmp_path)
    task = load_task(alpacaeval_config(tmp_path, {"name": "j", "provider": "openai", "base_url": "http://x/v1"}),
                     tmp_path / "cache")
    train, evals = task.train_rows(), task.eval_rows()
    assert len(train) == 20 and train[0]["prompt"] == "Name a colour number 0.\n\ncontext 0"
    assert train[1]["prompt"] == "Name a colour number 1." and train[1]["completion"] == "Colour 1 is blue."
    assert len(evals) == 12 and evals[3]["reference"] == "Hello person 3, welcome!"
    # final_size: a seeded held-out final split out of the eval set; n_eval then caps the feedback split
    assert task.final_rows() == []
    held = load_task(alpacaeval_config(tmp_path, task.judge, final_size=4), tmp_path / "cache")
    feedback, final = held.eval_rows(), held.final_rows()
    assert len(feedback) == 8 and [r["id"] for r in final] == [f"alpacaeval-final-{i}" for i in range(4)]
    assert sorted(r["instruction"] for r in feedback + final) == sorted(r["instruction"] for r in evals)
    capped = load_task(alpacaeval_config(tmp_path, task.judge, final_size=4, n_eval=3), tmp_path / "cache")
    assert capped.eval_rows() == feedback[:3] and capped.final_rows() == final
    assert task.judge_driver()["name"] == "j"
    assert task.hidden_paths() == [(tmp_path / "alpaca_eval").resolve()]   # the references: never in a sandbox
    with pytest.raises(ConfigError, match="alpacaeval_offline"):       # no judge: says what to do
        load_task(alpacaeval_config(tmp_path, None), tmp_path / "cache")
    with pytest.raises(ConfigError, match="alpacaeval_offline"):       # no data here: says what to do
        load_task(alpacaeval_config(tmp_path, {"name": "j", "provider": "openai", "base_url": "http://x/v1"},
                                    eval_data="tatsu-lab/alpaca_eval"), tmp_path / "cache").eval_rows()


def test_a_judge_named_by_its_driver_file_is_resolved():
    task = check_task(load_named("task", "alpacaeval", "test"))
    assert task["judge"]["provider"] == "openai" and task["judge"]["model"] == "gpt-5"
    with pytest.raises(ConfigError, match="unknown driver"):
        check_task({**load_named("task", "alpacaeval", "test"), "judge": "nope"})


# --------------------------------------------------------------------------- the LLM judge inside the grader

JUDGE_KEY_VAR, JUDGE_KEY = "A2RL_TEST_JUDGE_KEY", "sk-judge-real"
OUTPUT = re.compile(r"## Output \(a\)\n(.*)\n\n## Output \(b\)\n(.*)\n\nAnswer with", re.S)


@pytest.fixture(scope="module")
def judged_grader(ray_cluster, cache_dir, grading_port, tmp_path_factory):
    """alpacaeval on small upstream-layout files, its judge a scripted OpenAI-protocol server behind the real
    driver proxy. The scripted judge prefers the longer output (a verbose judge), and can be taken down."""
    from ray import serve

    from agents.proxy import deployment
    from contracts.task_spec import TaskSpec
    from evaluators.base_models import resolve_base_model
    from evaluators.service import app_name, deploy

    state = {"down": False}

    def script(req):
        if state["down"]:
            return Reply(status=500, error="judge overloaded")
        a, b = OUTPUT.search(req.last_user_text).groups()
        return Reply(text="Output (a)" if len(a) >= len(b) else "Output (b)")

    fake = FakeUpstream(script=script, expect_key=JUDGE_KEY).start()
    root = tmp_path_factory.mktemp("alpaca")
    write_alpaca_data(root)
    judge = {"name": "scripted-judge", "provider": "openai-compatible", "model": "judge-1",
             "base_url": fake.url + "/v1", "api_key_env": JUDGE_KEY_VAR, "price_input_per_mtok": 1.0,
             "price_output_per_mtok": 2.0, "price_cached_input_per_mtok": 0.5}
    task = check_task({**alpacaeval_config(root, judge), "name": "alpacaeval_judged"})
    proxy_url = f"http://127.0.0.1:{grading_port}" + deployment.deploy({JUDGE_KEY_VAR: JUDGE_KEY},
                                                                        {"max_attempts": 2, "base_s": 0.05})
    deploy(TaskSpec.from_config(task), str(cache_dir), emulated_gpus=True, driver_url=proxy_url)
    yield {"url": f"http://127.0.0.1:{grading_port}/alpacaeval_judged", "fake": fake, "state": state,
           "handle": serve.get_app_handle(app_name("alpacaeval_judged")),
           "base": resolve_base_model("tiny", cache_dir / "models")}
    fake.stop()


def perturbed_model(base, out_dir, seed):
    """The base model with every weight shaken: other outputs, so the judge is asked again."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 3 * (p.std() if p.numel() > 1 else 1.0))
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(base).save_pretrained(out_dir)


def test_llm_judge_is_metered_per_submission_and_cached(judged_grader, tmp_path):
    from contracts.records import read_jsonl
    from tests.test_grading import Run

    run = Run(judged_grader, tmp_path)
    n_baseline = judged_grader["fake"].calls                     # the baseline was judged at registration
    assert n_baseline >= 12
    perturbed_model(judged_grader["base"], run.workspace / "output" / "m1", seed=1)
    rec = run.submit("output/m1").json()
    assert rec["error"] is None and 0 <= rec["score"] <= 100
    usage = rec["judge_usage"]
    assert usage["calls"] == judged_grader["fake"].calls - n_baseline > 0
    assert usage["input_tokens"] > 0 and usage["cost_usd"] > 0
    assert set(rec["metrics"]) >= {"win_rate", "lc_win_rate", "draws"}
    assert rec["score"] == rec["metrics"]["lc_win_rate"]
    calls = read_jsonl(run.records / "judge_calls.jsonl")       # every judge call, beside the cell's records
    assert len(calls) == usage["calls"] and {c["driver"] for c in calls} == {"scripted-judge"}
    # where the model's output was shown first, the judge saw it as Output (a)
    seen = [r.last_user_text for r in judged_grader["fake"].requests[-usage["calls"]:]]
    assert any(s.index("## Output (a)") < s.index("Hello person") for s in seen)
    assert any(s.index("## Output (b)") < s.index("Hello person") for s in seen)

    # the same weights again: the score cache answers, the judge is not asked
    perturbed_model(judged_grader["base"], run.workspace / "output" / "m1b", seed=1)
    again = run.submit("output/m1b").json()
    assert again["score"] == rec["score"] and "cached" in again["flags"]
    assert again["judge_usage"]["calls"] == 0
    # /status is not charged for the judge: the agent's driver budget is another key
    assert "tokens_used" not in run.status().json()


def test_judge_outage_is_an_infra_error_and_refunded(judged_grader, tmp_path):
    from tests.test_grading import Run

    run = Run(judged_grader, tmp_path)
    perturbed_model(judged_grader["base"], run.workspace / "output" / "m2", seed=2)
    before = run.status().json()["remaining_submissions"]
    judged_grader["state"]["down"] = True
    try:
        rec = run.submit("output/m2").json()
    finally:
        judged_grader["state"]["down"] = False
    assert rec["score"] is None and rec["refunded"] is True
    assert "judge_unavailable" in rec["flags"] and "judge unavailable" in rec["error"]
    assert run.status().json()["remaining_submissions"] == before   # the outage cost the agent nothing
    retry = run.submit("output/m2").json()                          # back up: the same model is scored
    assert retry["score"] is not None and retry["submission_id"] == rec["submission_id"] + 1




def test_health_of_a_judged_grader(judged_grader):
    assert httpx.get(f"{judged_grader['url']}/health", timeout=10).json()["task"] == "alpacaeval_judged"


@pytest.mark.slow  # the sweep path is the demo's, the judge's the graders' above
def test_offline_twin_sweep_end_to_end(run_sweep):
    """The level-2 twin through the whole stack: cells, workspaces, the grader's rubric judge, records, ledger."""
    from orchestrator.ledger import Ledger

    _, text, out = run_sweep(["sweep=judged_small", "sweep.seeds=[0]", "sweep.budget.wall_time_s=60"])
    ledger = Ledger(out / "ledger.sqlite")
    rows = list(ledger.cells().values())
    assert len(rows) == 2, rows
    cells_ended(rows)
    subs = [e["payload"] for e in ledger.events(kind="submission")]
    assert subs and all(set(s["metrics"]) >= {"win_rate", "lc_win_rate"} for s in subs)
    assert all(s["score"] == s["metrics"]["win_rate"] and 0 <= s["score"] <= 100 for s in subs)
    copy = next(r for r in rows if r["agent"] == "copy_base")
    assert copy["improvement"] == 0
    assert "alpacaeval_offline" in text


def test_deepsearchqa_answers_regraded_by_a_judge(tmp_path):
    """A configured judge decides answers instead of the exact/alias match: a paraphrase of the gold answer counts,
    a wrong answer does not, and an episode that never answered is not sent to the judge."""
    from envs.deepsearchqa.answers import normalize_answer

    config = {**load_named("task", "deepsearchqa_small", "test"), "n_train": 3, "n_eval": 3,
              "judge": "local-vllm", "eval_salt": "fixed"}  # fixed hidden worlds: the same questions every run
    task = load_task(check_task(config), tmp_path)
    assert task.judge_driver()["name"] == "local-vllm"
    env = task.environment()
    rows = task.eval_rows()
    questions = [env.question(inst) for inst in env.instances("eval")]
    asked = []

    class Scripted:  # the judge's interface as the grader opens it (LLMJudge.ask); its wire path is tested above
        concurrency = 2

        def ask(self, system, user):
            asked.append(user)
            gold = normalize_answer(user.split("Correct answer: ")[1].splitlines()[0])
            response = normalize_answer(user.split("Response: ")[1].splitlines()[0])
            return "CORRECT" if gold in response else "INCORRECT"

    items = [{"id": rows[0]["id"], "score": 0.0, "won": False, "steps": 2,
              "commands": ["search[x]", f"answer[It is {questions[0].answer}, I believe]"]},
             {"id": rows[1]["id"], "score": 0.0, "won": False, "steps": 1, "commands": ["answer[Nobody]"]},
             {"id": rows[2]["id"], "score": 0.0, "won": False, "steps": 6, "commands": ["search[y]"] * 6}]
    judged = task.judge_episodes({"score": 0.0, "n": 3, "items": items, "metrics": {}}, rows, Scripted())
    assert [i["score"] for i in judged["items"]] == [1.0, 0.0, 0.0]
    assert len(asked) == 2                                     # the unanswered episode asked nothing
    assert judged["score"] == pytest.approx(100 / 3) and judged["metrics"]["exact_match"] == 0.0
    # a held-out final row is judged against its own question (final_size null: as many as n_eval), not the eval
    # question of the same name
    (row,) = task.final_rows()[:1]
    gold = env.question(env.instances("final")[0]).answer
    assert row["instance"] == rows[0]["instance"] and gold != questions[0].answer
    item = {"id": row["id"], "score": 0.0, "won": False, "steps": 1, "commands": [f"answer[{gold}]"]}
    judged = task.judge_episodes({"score": 0.0, "n": 1, "items": [item], "metrics": {}}, [row], Scripted())
    assert judged["score"] == 100.0


def test_repeat_agreement_says_how_often_a_judge_gives_the_same_reply_twice():
    from evaluators.judging.pairwise import LLMJudge

    calls = {"n": 0}

    def flipping(req):  # a judge that changes its mind on every call
        calls["n"] += 1
        return Reply(text="Output (a)" if calls["n"] % 2 else "Output (b)")

    for script, expected in ((flipping, 0.0), (lambda req: Reply(text="Output (a)"), 1.0)):
        fake = FakeUpstream(script=script, expect_key=JUDGE_KEY).start()
        try:
            judge = LLMJudge({"name": "j", "provider": "openai-compatible", "model": "m"}, fake.url, JUDGE_KEY)
            judge.sample = 6
            for i in range(9):
                judge.ask("system", f"question {i}")
            assert judge.repeat_agreement() == {"n": 6, "agreement": expected}
            assert fake.calls == 9 + 6
        finally:
            fake.stop()


def test_a_judged_graders_baseline_measures_its_judges_repeat_agreement(judged_grader):
    info = judged_grader["handle"].ensure_baseline.remote().result()
    assert info["judge_agreement"]["n"] > 0 and info["judge_agreement"]["agreement"] == 1.0  # the scripted judge
