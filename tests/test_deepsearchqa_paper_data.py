"""DeepSearchQA on the paper's data, search and judge (issue 41): by default `task=deepsearchqa` reads
google/deepsearchqa (the Hugging Face cache; `prepare` fetches it from the hub's HTTP protocol, here on loopback) and
searches as the original's eval.py does: SerpAPI with $SERPAPI_KEY, else DuckDuckGo's instant-answer API. The search
is checked at the wire against loopback servers speaking both answer shapes, and against what the original's own
search functions returned for the same answers (tests/fixtures/parity/make_deepsearchqa_search.py). A paper cell on a
DSQA-full.csv in the hub's layout, searched at loopback and judged by an OpenAI-compatible loopback judge through the
driver proxy, runs end to end with no stand-in."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from contracts.task import load_task
from tests.conftest import ROOT
from tests.support.fake_upstream import FakeUpstream, Reply

FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "parity" / "deepsearchqa_search.json").read_text())
COLUMNS = ("problem", "problem_category", "answer", "answer_type")  # DSQA-full.csv's, in the hub's order
JUDGE_KEY_VAR, JUDGE_KEY = "DSQA_TEST_JUDGE_KEY", "sk-dsqa-judge"


class SearchUpstream:
    """SerpAPI (GET /search) and DuckDuckGo's instant-answer API (GET /) on one loopback server: each answers
    `answers[(engine, query)]` (status, content type, body: a JSON value or a str sent as is), else `default(engine,
    query)`, and records the path and query string that arrived."""

    def __init__(self, answers: dict | None = None, default=None):
        self.answers, self.default, self.arrived = dict(answers or {}), default, []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the handler's protocol
                upstream.arrived.append(self.path)
                parts = urlsplit(self.path)
                engine = "serpapi" if parts.path == "/search" else "duckduckgo"
                query = parse_qs(parts.query).get("q", [""])[0]
                status, ctype, body = upstream.answers.get((engine, query)) or upstream.default(engine, query)
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def search_config(self) -> dict:
        return {"serpapi_url": self.url + "/search", "duckduckgo_url": self.url + "/"}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def recorded():
    """The loopback hosts answering what the original's search functions were answered when the fixture was made."""
    answers = {(c["engine"], c["query"]): (c["status"], c["content_type"], c["body"]) for c in FIXTURE["cases"]}
    fallback = {"serpapi": answers["serpapi", "capital of Scotland"], "duckduckgo": answers["duckduckgo", "Edinburgh"]}
    upstream = SearchUpstream(answers, lambda engine, query: fallback[engine])
    yield upstream
    upstream.stop()


def shipped(file: str, **overrides) -> dict:
    return {**yaml.safe_load((ROOT / "conf" / "task" / f"{file}.yaml").read_text()), **overrides}


def write_dsqa_csv(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def dsqa_rows(n: int) -> list[dict]:
    return [{"problem": f"Which city hosts landmark number {i}?", "problem_category": "Geography",
             "answer": f"City{i}", "answer_type": "Single Answer"} for i in range(n)]


# ------------------------------------------------------------------------------------------------ the configs

def test_the_paper_protocol_reads_the_papers_set_and_search_by_default(cache_dir):
    from envs.deepsearchqa.search import DUCKDUCKGO_URL, SERPAPI_URL, OriginalSearch

    task = load_task(shipped("deepsearchqa"), cache_dir)   # nothing is loaded or searched yet
    assert (task.protocol, task.data_path, task.search_backend) == ("paper", "google/deepsearchqa", "original")
    assert (task.search["serpapi_url"], task.search["duckduckgo_url"]) == (SERPAPI_URL, DUCKDUCKGO_URL)
    assert SERPAPI_URL == "https://serpapi.com/search" and DUCKDUCKGO_URL == "https://api.duckduckgo.com/"
    (key, says), = task.search_keys().items()
    assert key == "SERPAPI_KEY" and "DuckDuckGo" in says
    assert isinstance(task._backend(), OriginalSearch)
    # the one stand-in left by default is the judge (a sweep names its driver: conf/sweep/paper_grid.yaml)
    assert [n.split(":")[0] for n in task.approximations()] == ["judge"]
    judged = load_task(shipped("deepsearchqa", judge={"name": "gpt", "provider": "openai", "model": "gpt-5"}),
                       cache_dir)
    assert judged.approximations() == [] and judged.judge_driver()["model"] == "gpt-5.2"  # the paper's judge model
    assert load_task(shipped("deepsearchqa", data_path="paper"), cache_dir).data_path == "google/deepsearchqa"
    renamed = load_task(shipped("deepsearchqa", search={"key_env": "MY_SERPAPI"}), cache_dir)
    assert list(renamed.search_keys()) == ["MY_SERPAPI"] and renamed._backend().key_env == "MY_SERPAPI"


def test_the_generated_world_is_one_value_away_and_the_small_twin_keeps_it(cache_dir):
    from orchestrator.sweep import load_named

    generated = load_task(shipped("deepsearchqa", data_path=None, n_train=4, n_eval=2, final_size=0,
                                  eval_salt="fixed"), cache_dir)
    assert generated.search_backend is None and generated.search_keys() == {}
    assert [n.split(":")[0] for n in generated.approximations()] == ["questions", "judge", "eval"]
    assert generated.approximations()[2].startswith("eval: 2 of 200 questions, where the paper grades all 200")
    assert "generated world stands in" in generated.approximations()[0]
    small = load_named("task", "deepsearchqa_small", "test")   # composed as a sweep composes it
    assert (small["data_path"], small["protocol"]) == (None, "a2rl")
    assert load_task({**small, "n_train": 4, "n_eval": 2}, cache_dir).approximations() == []


def test_a_search_backend_is_named_once_and_checked_before_anything_runs(cache_dir, tmp_path):
    base = shipped("deepsearchqa", data_path=str(tmp_path / "DSQA-full.csv"))
    with pytest.raises(ValueError, match=r"need one search backend: search.backend=original"):
        load_task({**base, "protocol": "a2rl"}, cache_dir)   # a2rl's own protocol names its search
    a2rl = load_task({**base, "protocol": "a2rl", "search": {"backend": "original"}}, cache_dir)
    assert a2rl.search_backend == "original" and a2rl.approximations() == []
    for search, message in (({"backend": "bing"}, "search.backend='bing' is unknown"),
                            ({"backend": "original", "url": "http://x/s"}, "search.backend=original takes"),
                            ({"backend": "http"}, "search.backend=http takes search.url"),
                            ({"url": "http://x/s", "documents": "d.jsonl"}, "need one search backend")):
        with pytest.raises(ValueError, match=message):
            load_task({**base, "search": search}, cache_dir)
    with pytest.raises(ValueError, match="for real questions"):
        load_task(shipped("deepsearchqa", data_path=None, search={"backend": "original"}), cache_dir)
    http = load_task({**base, "search": {"url": "http://127.0.0.1:1/search", "key_env": "K"}}, cache_dir)
    assert http.search_backend == "http" and list(http.search_keys()) == ["K"]
    assert [n.split(":")[0] for n in http.approximations()] == ["search", "judge"]


# ------------------------------------------------------------------------------------------------ the search

@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"{c['engine']}-{c['query']}")
def test_the_original_search_answers_as_the_originals_code_did(case, recorded, monkeypatch):
    """The same server answer gives the same observation text, from the same query string on the wire."""
    from envs.deepsearchqa.search import OriginalSearch

    if case["engine"] == "serpapi":
        monkeypatch.setenv("SERPAPI_KEY", FIXTURE["key"])
    else:
        monkeypatch.delenv("SERPAPI_KEY", raising=False)
    search = OriginalSearch(**recorded.search_config())
    before = len(recorded.arrived)
    assert search.observation(case["query"]) == case["observation"]
    assert recorded.arrived[before:] == [case["arrived"]]
    assert case["called"]["timeout"] == search.timeout_s == 10


@pytest.mark.parametrize("state", FIXTURE["keys"], ids=lambda s: s["key"])
def test_the_key_decides_the_engine_as_in_the_original(state, recorded, monkeypatch):
    from envs.deepsearchqa.search import OriginalSearch

    monkeypatch.delenv("SERPAPI_KEY", raising=False)
    if state["key"] != "unset":
        monkeypatch.setenv("SERPAPI_KEY", FIXTURE["key"] if state["key"] == "set" else "")
    search = OriginalSearch(**recorded.search_config())
    before = len(recorded.arrived)
    assert (search.engine(), search.observation("capital of Scotland")) == (state["engine"], state["observation"])
    (arrived,) = recorded.arrived[before:]
    query = {k: v[0] for k, v in parse_qs(urlsplit(arrived).query).items()}
    assert query == {k: str(v) for k, v in state["called"]["params"].items()}  # the key only where it is set
    assert urlsplit(arrived).path == ("/search" if state["engine"] == "serpapi" else "/")


def test_the_same_engines_as_hits_for_a2rls_chat_and_failures_as_observations(recorded, monkeypatch, cache_dir,
                                                                              tmp_path):
    from envs.deepsearchqa.search import OriginalSearch, SearchError

    search = OriginalSearch(**recorded.search_config())
    monkeypatch.setenv("SERPAPI_KEY", FIXTURE["key"])
    hits = search.search("capital of Scotland", 2)
    assert [(h.title, h.text) for h in hits] == [("Result 1", "Edinburgh is the capital city of Scotland."),
                                                 ("Result 2", "Scotland's capital: Edinburgh, since 1437.")]
    assert recorded.arrived[-1].endswith("&num=2")
    monkeypatch.delenv("SERPAPI_KEY")
    assert [(h.title, h.text[:9]) for h in search.search("Edinburgh", 3)] == [
        ("Edinburgh", "Edinburgh"), ("", "Edinburgh"), ("", "Old Town")]
    assert [h.text for h in search.search("Apple", 3)] == ["Apple - a fruit", "Apple Records"]  # no group
    with pytest.raises(SearchError, match="JSONDecodeError"):
        search.search("rate limited", 3)
    # nothing listening: the original's observation names requests' own error, an episode's step says it failed
    closed = OriginalSearch("http://127.0.0.1:9/search", "http://127.0.0.1:9/")
    assert closed.observation("x").startswith("Search error: HTTPConnectionPool(host='127.0.0.1', port=9)")
    rows = dsqa_rows(4)
    task = load_task(shipped("deepsearchqa", protocol="a2rl", n_train=2, n_eval=2, final_size=0,
                             data_path=str(write_dsqa_csv(tmp_path / "DSQA-full.csv", rows)),
                             search={"backend": "original", "serpapi_url": "http://127.0.0.1:9/search",
                                     "duckduckgo_url": "http://127.0.0.1:9/"}), cache_dir)
    env = task.environment()
    episode = env.open(env.instances("eval")[0])
    episode.reset()
    step = episode.step("search[anything]")
    assert step.observation.startswith("Search failed: ConnectionError") and not step.done


# ------------------------------------------------------------------------------------------------ the cache

HUB_README = b"""---
configs:
- config_name: default
  data_files:
  - split: eval
    path: DSQA-full.csv
---
"""


def test_prepare_fetches_the_set_into_the_hugging_face_cache_once(tmp_path):
    """`prepare` of a sweep with the shipped deepsearchqa fetches google/deepsearchqa (a hub on loopback, the set's
    files in its layout); a second run fetches nothing; the dry run before names the set and the search key."""
    import numpy as np
    from safetensors.numpy import save

    from tests.support.hub_server import HubServer

    model = {"config.json": json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}).encode(),
             "model.safetensors": save({"w": np.zeros((2, 2), np.float32)})}
    table = write_dsqa_csv(tmp_path / "upload" / "DSQA-full.csv", dsqa_rows(8)).read_bytes()
    hub = HubServer().start()
    try:
        hub.add_repo("dataset", "google/deepsearchqa", {"README.md": HUB_README, "DSQA-full.csv": table})
        hub.add_repo("model", "a2rl-test/tiny-dsqa", model)
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
               "HF_DATASETS_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1", "RAY_AUTH_MODE": "disabled",
               "NO_PROXY": "*", "PYTHONPATH": str(ROOT)}
        env.pop("SERPAPI_KEY", None)
        args = ["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]",
                "sweep.tasks=[{name:deepsearchqa,base_model:'a2rl-test/tiny-dsqa'}]", f"cache_dir={tmp_path}/cache",
                f"output_dir={tmp_path}/out", "logger=none"]

        def orchestrator(*extra):
            return subprocess.run([sys.executable, "-m", "orchestrator", *extra], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=300)

        dry = orchestrator(*args, "dry_run=true")
        assert dry.returncode == 0, dry.stderr
        assert "the DeepSearchQA set google/deepsearchqa is not in the Hugging Face cache" in dry.stdout, dry.stdout
        assert "$SERPAPI_KEY (search)" in dry.stdout, dry.stdout
        first = orchestrator("prepare", *args)
        assert first.returncode == 0, first.stdout + first.stderr
        (row,) = [line for line in first.stdout.splitlines() if line.startswith("data of task deepsearchqa")]
        assert row.split()[-1] == "fetched", first.stdout
        assert ("GET", "/datasets/google/deepsearchqa/resolve/" + hub.repos["datasets", "google/deepsearchqa"][
            "sha"] + "/DSQA-full.csv", None) in hub.requests
        hub.requests.clear()
        second = orchestrator("prepare", *args)
        assert second.returncode == 0 and "nothing fetched" in second.stdout, second.stdout + second.stderr
        assert hub.requests == []
    finally:
        hub.stop()


# ------------------------------------------------------------------------------------------------ paper cells

def judge_upstream(golds: set[str]) -> FakeUpstream:
    """An OpenAI-compatible judge that knows the gold answers: `correct` when the prediction names its gold."""

    def script(req):
        gold = req.last_user_text.split("Gold answer: ")[1].split("\n")[0]
        predicted = req.last_user_text.split("Predicted answer: ")[1].split("\n")[0]
        return Reply(text="correct" if gold in golds and gold.lower() in predicted.lower() else "incorrect")

    return FakeUpstream(script=script, expect_key=JUDGE_KEY).start()


def test_a_paper_grading_searches_and_judges_as_the_original_on_real_layout_data(tmp_path, cache_dir, monkeypatch):
    """The grader's ReAct loop (a scripted model that searches, then answers) on the shipped config with a
    DSQA-full.csv: each search is the original's (SerpAPI with the key, DuckDuckGo without) and its text is the
    observation the model reads; every answer is judged over OpenAI's wire with the paper's prompt and model; no
    stand-in is left but the count: 3 of the paper's 200 questions, named and flagged."""
    from envs.deepsearchqa import react
    from evaluators.evaluate import evaluate_loaded
    from evaluators.judging.pairwise import LLMJudge
    from tests.support.scripted_backend import ScriptedBackend

    rows = dsqa_rows(6)
    golds = {r["problem"]: r["answer"] for r in rows}
    upstream = SearchUpstream(default=lambda engine, query: (200, "application/json", {
        "organic_results": [{"title": "t", "snippet": f"{golds[query]} hosts it."}, {"title": "u"}]}
        if engine == "serpapi" else {"AbstractText": f"The landmark is in {golds[query]}.", "RelatedTopics": []}))
    judge_server = judge_upstream(set(golds.values()))
    driver = {"name": "fake-judge", "provider": "openai-compatible", "model": "judge-1",
              "base_url": judge_server.url + "/v1"}
    try:
        task = load_task(shipped("deepsearchqa", name="deepsearchqa_paper_t", n_train=2, n_eval=3, final_size=0,
                                 data_path=str(write_dsqa_csv(tmp_path / "DSQA-full.csv", rows)),
                                 search=upstream.search_config(), judge=driver), cache_dir)
        env = task.environment()
        questions = [env.question(inst).question for inst in env.instances("eval")]

        def reply(prompt, decoding):  # searches the question, then answers what the observation names
            question = prompt.split("\n\nQuestion: ")[1].split("\n")[0]
            if "\nObservation: " not in prompt:
                return f" I should look it up. Action: search[{question}]\nObservation: made up"
            return f" Found it. Action: answer[{golds[question]}]"

        results = {}
        for key in ("k3y", None):
            if key:
                monkeypatch.setenv("SERPAPI_KEY", key)
            else:
                monkeypatch.delenv("SERPAPI_KEY", raising=False)
            upstream.arrived.clear()
            backend = ScriptedBackend(reply, whole=True, cut=True)
            judge = LLMJudge(task.judge_driver(), judge_server.url, JUDGE_KEY, concurrency=2)
            try:
                results[key] = evaluate_loaded(task, backend, "model", task.eval_rows(), judge=judge)
            finally:
                judge.close()
            arrived = [parse_qs(urlsplit(p).query) for p in upstream.arrived]
            assert sorted(a["q"][0] for a in arrived) == sorted(questions)
            assert all(a.get("api_key") == (["k3y"] if key else None) for a in arrived)
            seen = [p for p in backend.prompts if "\nObservation: " in p]
            expected = [f"\nObservation: {golds[q]} hosts it. | \nThought:" if key else
                        f"\nObservation: The landmark is in {golds[q]}.\nThought:" for q in questions]
            assert sorted(p[p.index("\nObservation: "):] for p in seen) == sorted(expected)
        assert "k3y" not in task.instructions()
    finally:
        upstream.stop()
        judge_server.stop()
    for result in results.values():
        assert result["score"] == 100.0 and result["flags"] == ["approximate"], result["flags"]
        assert result["approximations"] == [
            "eval: 3 of 200 questions, where the paper grades all 200 (task.n_eval=3; task.n_eval=200 grades the "
            "paper's)"]
        assert all(item["judged_by"] == "llm" for item in result["items"])
    judged = [r for r in judge_server.requests if r.system == react.JUDGE_SYSTEM]
    assert len(judged) == 2 * 3 and {r.model for r in judged} == {"gpt-5.2"}  # the paper's judge model


def test_a_paper_cell_on_real_layout_data_runs_end_to_end_with_the_papers_search_and_judge(run_sweep, tmp_path,
                                                                                          monkeypatch):
    """One cell through the orchestrator: the shipped `deepsearchqa` with a DSQA-full.csv in the hub's layout, the
    original's search at loopback (no SerpAPI key: DuckDuckGo answers, as in the original), the judge an
    OpenAI-compatible loopback server reached through the driver proxy and metered; no stand-in is named or flagged
    but the count (2 of the paper's 200 questions)."""
    from orchestrator.ledger import Ledger

    rows = dsqa_rows(6)
    golds = {r["problem"]: r["answer"] for r in rows}
    upstream = SearchUpstream(default=lambda engine, query: (200, "application/x-javascript", {
        "AbstractText": f"The landmark is in {golds.get(query, 'nowhere')}.", "RelatedTopics": []}))
    judge_server = judge_upstream(set(golds.values()))
    monkeypatch.setenv(JUDGE_KEY_VAR, JUDGE_KEY)
    monkeypatch.delenv("SERPAPI_KEY", raising=False)
    data = write_dsqa_csv(tmp_path / "hub" / "DSQA-full.csv", rows)
    judge = (f"{{name:fake-judge,provider:openai-compatible,model:judge-1,base_url:'{judge_server.url}/v1',"
             f"api_key_env:{JUDGE_KEY_VAR},price_input_per_mtok:1.0,price_output_per_mtok:2.0}}")
    try:
        _, said, out = run_sweep(["sweep=demo", "sweep.agents=[copy_base]", "sweep.seeds=[0]", "task=deepsearchqa",
                                  "task.name=deepsearchqa_paper_data", f"task.data_path={data.parent}",
                                  "task.n_train=2", "task.n_eval=2", "task.final_size=0",
                                  f"task.search.serpapi_url={upstream.url}/search",
                                  f"task.search.duckduckgo_url={upstream.url}/", f"task.judge={judge}",
                                  "task.grader.batch_size=4", "sweep.budget.wall_time_s=600"])
    finally:
        upstream.stop()
        judge_server.stop()
    (told,) = [line for line in said.splitlines() if "graded on stand-ins" in line]
    assert told.endswith("its scores flagged approximate: eval: 2 of 200 questions, where the paper grades all 200 "
                         "(task.n_eval=2; task.n_eval=200 grades the paper's)"), said
    ledger = Ledger(out / "ledger.sqlite")
    (cell,) = ledger.cells().values()
    assert cell["status"] == "completed", cell
    (submission,) = [e["payload"] for e in ledger.events(kind="submission")]
    assert submission["score"] is not None and submission["error"] is None, submission
    assert "approximate" in submission["flags"] and [n.split(":")[0] for n in submission["approximations"]] == [
        "eval"], submission
    judged = [r for r in judge_server.requests if r.system == "You are a strict answer evaluator."]
    assert len(judged) >= 2 and {r.model for r in judged} == {"gpt-5.2"}  # every eval answer, the paper's model
    # the agent's train rows: the expert searched each train question with the original's search (DuckDuckGo)
    searched = [parse_qs(urlsplit(p).query) for p in upstream.arrived]
    assert searched and all(s["format"] == ["json"] and s["no_html"] == ["1"] and "api_key" not in s
                            for s in searched)
