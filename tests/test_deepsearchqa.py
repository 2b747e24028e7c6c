"""The level-3 DeepSearchQA task: seeded worlds and questions, the expert, BM25 search, in-game answers to bad
actions, offline answer grading, the real-data loaders (on small files in the upstream layouts), the HTTP search
backend (against a loopback server speaking a search API's JSON), the rollout service (train world only, sessions
per run) and grading over HTTP."""
from __future__ import annotations

import csv
import json
import os
import pickle
import secrets
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from contracts.runs import RunRegistration
from contracts.task import load_task
from contracts.task_spec import TaskSpec
from envs.deepsearchqa import prompt
from envs.deepsearchqa.answers import answer_correct, normalize_answer
from envs.deepsearchqa.expert import plan
from evaluators.evaluate import evaluate_loaded
from tests.support.cells import cells_ended
from tests.support.runs import bare_run
from tests.support.scripted_backend import ScriptedBackend

WORLD = {"people": 24, "organisations": 8, "cities": 6, "countries": 3, "distractors": 2}
SMALL = {"name": "deepsearchqa_t", "cls": "deepsearchqa", "level": 3, "base_model": "tiny-deepsearchqa",
         "n_train": 6, "n_eval": 4, "final_size": 0, "seed": 0, "hops": [2, 3], "relations": None, "world": WORLD,
         "top_k": 3, "max_steps": 6, "eval_salt": None, "data_path": None, "search": None, "eval_workers": 0,
         "rollout": {"num_hosts": 1, "max_sessions_per_run": 2, "idle_timeout_s": 60},
         "grader": {"backend": "transformers", "batch_size": 8, "max_new_tokens": 24, "num_cpus": 1, "num_gpus": 0}}


@pytest.fixture(scope="module")
def task(cache_dir):
    return load_task(SMALL, cache_dir)


def expert(plans: dict[str, list[str]], wrap: str = "Thought: go on.\nAction: {}"):
    """A policy replying with the expert's next action for each chat (looked up by question and step)."""
    def reply(text: str) -> str:
        lines = text.splitlines()
        previous = lines[1].removeprefix("Previous actions: ")
        return wrap.format(plans[lines[0].removeprefix("Question: ")][0 if previous == "none" else
                                                                      len(previous.split("; "))])

    return reply


def test_worlds_and_questions_are_deterministic_per_seed(task, cache_dir, tmp_path):
    again = load_task(SMALL, cache_dir)
    questions = task.environment()._questions
    assert again.environment()._questions == questions and again.train_rows() == task.train_rows()
    other = load_task({**SMALL, "seed": 1}, cache_dir)
    assert [q.question for q in other.environment()._questions["train"].values()] != \
        [q.question for q in questions["train"].values()]
    # The eval world is salted: another cache (another secret) draws another one; a fixed salt reproduces it.
    assert [q.question for q in load_task(SMALL, tmp_path).environment()._questions["eval"].values()] != \
        [q.question for q in questions["eval"].values()]
    fixed = [load_task({**SMALL, "eval_salt": "x"}, d).environment()._questions["eval"] for d in (cache_dir, tmp_path)]
    assert fixed[0] == fixed[1]
    salt = cache_dir / "grading" / "deepsearchqa-eval-salt"
    assert (salt.stat().st_mode & 0o777) == 0o600


def test_the_expert_wins_every_train_question_through_the_environment(task):
    env = task.environment()
    instances = env.instances("train")
    assert len(instances) == 6 and {i.info["hops"] for i in instances} == {2, 3}
    for inst in instances:
        question = env.question(inst)
        episode = env.open(inst)
        step = episode.reset()
        assert episode.goal == question.question and step.observation == "No searches yet."
        for action in plan(question):
            step = episode.step(action)
        assert step.won and step.done and step.reward == 1.0 and episode.steps == len(question.hops) + 1
    rows = task.train_rows()
    assert len(rows) == sum(i.info["hops"] + 1 for i in instances)
    for row in rows:
        system, user = row["messages"]
        assert system == {"role": "system", "content": prompt.SYSTEM_PROMPT} and user["content"] == row["prompt"]
        assert prompt.parse(row["completion"]) == row["completion"] and row["completion"].startswith(("search[",
                                                                                                         "answer["))
    text = task.instructions()
    for needle in ("/env/reset", "/env/step_batch", "search[query]", "answer[text]", prompt.SYSTEM_PROMPT,
                   "100 x the fraction"):
        assert needle in text


def test_search_ranks_the_fact_first_and_is_stable(task):
    env = task.environment()
    backend = env.backend("train")
    for inst in env.instances("train"):
        for hop in env.question(inst).hops:
            hits = backend.search(hop.query, 3)
            assert hop.object in hits[0].text and hop.subject in hits[0].text, (hop, hits)
            assert backend.search(hop.query, 3) == hits
            rebuilt = pickle.loads(pickle.dumps(backend))  # what a grader worker or a rollout host gets
            assert rebuilt._index is None and rebuilt.search(hop.query, 3) == hits
    assert backend.search("zzqx the of", 3) == []  # no query word in any document: no results


def test_a_batch_of_steps_answers_as_the_steps_one_by_one(task):
    """step_many (a rollout host's part of a batch: one search call for all queries) answers each episode exactly as
    its own step would: searches, a query matching nothing, invalid actions, answers, a finished episode, the limit."""
    env = task.environment()
    instances = env.instances("train")[:4]
    queries = [hop.query for inst in instances for hop in env.question(inst).hops]
    answer = env.question(instances[1]).answer
    rounds = [[f"search[{queries[0]}]", f"search[{queries[1]}]", "search[zzqx the of]", "dance"],
              [f"search[{queries[2]}]", f"answer[{answer}]", "answer[nobody]", f"search[{queries[3]}]"],
              [f"search[{queries[0]}]", "look", f"search[{queries[1]}]", "search[]"]]

    def episodes():
        out = [env.open(inst) for inst in instances]
        for e in out:
            e.reset()
        out[3].max_steps = 2  # runs out of actions in the second round
        return out

    alone, together = episodes(), episodes()
    answered = []
    for actions in rounds:
        expected = [e.step(a) for e, a in zip(alone, actions)]
        answered.append(env.step_many(together, actions))
        assert answered[-1] == expected
        assert [e.steps for e in together] == [e.steps for e in alone]
    assert answered[1][1].won and not answered[1][2].won and answered[0][2].observation.startswith("No results")
    assert answered[2][1].observation == "The episode is over." and answered[1][3].done  # answered; out of steps


def test_search_keeps_jax_off_the_gpu_where_jax_is_installed(tmp_path):
    """bm25s runs a JAX top-k on import when JAX is installed, and JAX on a GPU then reserves 75% of its memory in
    every process that searches. A JAX that fails unless kept on the CPU (JAX_PLATFORMS=cpu) is put first on the
    path: both local searches (DeepSearchQA's world, WebShop's store) must answer, and rank with numpy."""
    import subprocess
    import sys

    fake = tmp_path / "jax"
    fake.mkdir()
    (fake / "__init__.py").write_text("from . import lax, numpy\n")
    (fake / "numpy.py").write_text("")
    (fake / "lax.py").write_text(
        "import os\n"
        "import numpy as np\n"
        "calls = 0\n"
        "def top_k(x, k):\n"
        "    global calls\n"
        "    calls += 1\n"
        "    if os.environ.get('JAX_PLATFORMS') != 'cpu':\n"
        "        raise RuntimeError('JAX on the GPU: it reserves 75% of its memory')\n"
        "    return np.sort(x)[::-1][:k], np.argsort(x)[::-1][:k]\n")
    script = ("from envs.deepsearchqa.search import LocalIndex\n"
              "from envs.deepsearchqa.world import Document\n"
              "from envs.webshop.search import SearchEngine\n"
              "import jax.lax\n"
              "docs = [Document('Ada', 'Ada Lovelace wrote the first program'), Document('Bob', 'Bob bakes bread')]\n"
              "print(LocalIndex(docs).search('who wrote the first program', 1)[0].title)\n"
              "shop = SearchEngine([{'asin': a, 'Title': t, 'Description': '', 'BulletPoints': [], 'options': {}}\n"
              "                     for a, t in (('A1', 'red shoes'), ('B2', 'blue hat'))])\n"
              "print(shop.search('blue hat', 1))\n"
              "print(jax.lax.calls)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parents[1])])}
    env.pop("JAX_PLATFORMS", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["Ada", "['B2']", "1"]  # bm25s's one probe on import, no JAX ranking


def test_bad_actions_are_answered_in_game(task):
    env = task.environment()
    inst = env.instances("train")[0]
    question = env.question(inst)
    episode = env.open(inst)
    episode.reset()
    for i, bad in enumerate(["tell me", "search[]", "", "lookup[x]"], start=1):
        step = episode.step(bad)
        assert step.observation.startswith("Invalid action") and not step.done and episode.steps == i
    assert episode.step("search[zzqx]").observation == 'No results for "zzqx".'
    step = episode.step(f"answer[{question.answer}]")  # the sixth action: still in time
    assert step.won and step.done
    assert episode.step("search[anything]").done  # after the end: nothing changes
    episode = env.open(inst)
    episode.reset()
    for _ in range(5):
        assert not episode.step("search[zzqx]").done
    last = episode.step("search[zzqx]")
    assert last.done and not last.won and "No actions left" in last.observation
    episode = env.open(inst)
    episode.reset()
    wrong = episode.step("answer[Nobody Atall]")
    assert wrong.done and not wrong.won and wrong.reward == 0.0 and env.score(wrong) == 0.0


def test_answer_correct_normalises_and_accepts_aliases():
    assert normalize_answer("  The Corvex-Labs, Inc. ") == "corvexlabs inc"
    assert answer_correct("the corvex labs.", "Corvex Labs")
    assert answer_correct("Corvex", "Corvex Labs", ["Corvex"])
    assert answer_correct("Republic of Vardonia", "Vardonia", ["Republic of Vardonia"])
    assert not answer_correct("Corvex Labs Ltd", "Corvex Labs")
    assert not answer_correct("", "Corvex Labs") and not answer_correct("the", "the")
    assert answer_correct("1987", "1987") and not answer_correct("1988", "1987")
    assert answer_correct("Spain; France and Italy", "France, Italy, Spain", answer_type="Set Answer")
    assert not answer_correct("France, Italy", "France, Italy, Spain", answer_type="Set Answer")
    assert not answer_correct("France and Italy", "France, Italy, Spain")  # a single answer is matched whole


def test_parse_is_lenient_and_stdlib_only():
    assert prompt.parse("Thought: I need the employer.\nAction: search[Alice Varen works for]") == \
        "search[Alice Varen works for]"
    assert prompt.parse("ANSWER[  Corvex   Labs ]<|im_end|>") == "answer[Corvex Labs]"
    assert prompt.parse("search[Alice Varen works") == "search[Alice Varen works]"  # cut by the token limit
    assert prompt.parse("Action: answer: Tamford") == "answer[Tamford]"
    assert prompt.parse("I do not know\nmore") == "I do not know"
    assert prompt.parse("research[x]") == "research[x]" and prompt.split_action("research[x]") is None
    source = Path(prompt.__file__).read_text()
    assert "import envs" not in source and "from envs" not in source and "from contracts" not in source


def test_lockstep_grading_of_eval_questions(task):
    env = task.environment()
    rows = task.eval_rows()
    assert [r["instance"] for r in rows] == [i.name for i in env.instances("eval")] and "answer" not in rows[0]
    plans = {env.question(i).question: plan(env.question(i)) for i in env.instances("eval")}
    backend = ScriptedBackend(expert(plans))
    result = evaluate_loaded(task, backend, "expert", rows, 24)
    assert result["score"] == 100.0 and result["n"] == 4
    assert backend.batches[0] == 4  # one batched call per step over the questions still open
    assert all(item["commands"][-1].startswith("answer[") for item in result["items"])
    guesses = {q: [p[-1]] + p for q, p in plans.items()}  # answering first ends each episode at once
    half = {q: (p if i % 2 else ["answer[Nobody Atall]"]) for i, (q, p) in enumerate(guesses.items())}
    result = evaluate_loaded(task, ScriptedBackend(expert(half)), "expert", rows, 24)
    assert result["score"] == 50.0 and all(item["steps"] == 1 for item in result["items"])


def test_eval_and_train_worlds_are_apart(task):
    env = task.environment()
    train, evals = env.backend("train"), env.backend("eval")
    for inst in env.instances("eval"):
        hop = env.question(inst).hops[0]
        # what the generator guarantees: the fact is among the results the model sees (not necessarily first:
        # the eval world is drawn from a secret that differs per cache, so BM25 ties fall either way)
        assert any(hop.object in hit.text for hit in evals.search(hop.query, task.top_k))
        assert all(hop.subject not in hit.text for hit in train.search(hop.query, 3))


def test_the_final_questions_are_a_world_of_their_own_and_graded(task, cache_dir):
    """final_size questions about a third salted world, none with a train or eval question's text; without them
    train and eval are as they were; the grader's final rows are played on them (an expert of theirs wins each)."""
    held = load_task({**SMALL, "final_size": 3}, cache_dir)  # the same secret: the same eval world
    env, before = held.environment(), task.environment()
    assert all(env._questions[split] == before._questions[split] for split in ("train", "eval"))
    texts = {split: {env.question(i).question for i in env.instances(split)} for split in ("train", "eval", "final")}
    assert len(texts["final"]) == 3 and not texts["final"] & (texts["train"] | texts["eval"])
    assert len({id(env.backend(split)) for split in ("train", "eval", "final")}) == 3  # an index per world
    assert task.final_rows() == [] and len(load_task({**SMALL, "final_size": None}, cache_dir).final_rows()) == 4
    rows = held.final_rows()
    assert [(r["id"], r["split"], r["instance"]) for r in rows] == [
        (f"deepsearchqa_t-final-{i}", "final", inst.name) for i, inst in enumerate(env.instances("final"))]
    plans = {env.question(i).question: plan(env.question(i)) for i in env.instances("final")}
    result = evaluate_loaded(held, ScriptedBackend(expert(plans)), "expert", rows, 24)
    assert result["score"] == 100.0 and result["n"] == 3


# ------------------------------------------------------------------------------------------------ real data

DSQA_COLUMNS = ["problem", "problem_category", "answer", "answer_type"]
PLACES = ["Lisbon", "Oslo", "Quito", "Hanoi", "Dakar", "Lima", "Perth", "Riga", "Tunis", "Malmo", "Cusco", "Bergen"]


def write_dsqa_csv(path: Path, n: int) -> list[dict]:
    """A small DSQA-full.csv in the upstream layout (answers with commas and quotes, as the real file has)."""
    rows = [{"problem": f"Which rivers flow through {PLACES[i]}?", "problem_category": "Geography",
             "answer": f'Item{i}, "quoted" {i}' if i % 2 else f"Answer {i}",
             "answer_type": "Set Answer" if i % 2 else "Single Answer"} for i in range(n)]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=DSQA_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return rows


def test_real_data_loaders_and_the_papers_split(tmp_path):
    import datasets
    import numpy as np

    from envs.deepsearchqa.real_data import load_rows, real_splits

    rows = write_dsqa_csv(tmp_path / "DSQA-full.csv", 12)
    assert load_rows(tmp_path / "DSQA-full.csv") == rows and load_rows(tmp_path) == rows  # file or snapshot folder
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))  # the paper's download step's layout
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_rows(tmp_path / "saved") == rows and load_rows(tmp_path / "rows.jsonl") == rows
    splits = real_splits(tmp_path, n_train=4, n_eval=6)
    order = np.random.default_rng(42).permutation(12)  # what datasets' shuffle(seed=42) draws
    assert [q.question for q in splits["train"]] == [rows[i]["problem"] for i in order[:4]]
    assert [q.question for q in splits["eval"]] == [rows[i]["problem"] for i in order[4:10]]
    assert splits["final"] == []  # none unless asked
    held = real_splits(tmp_path, n_train=4, n_eval=6, n_final=2)  # the next rows in the paper's order
    assert held["eval"] == splits["eval"] and [q.question for q in held["final"]] == [rows[i]["problem"]
                                                                                        for i in order[10:12]]
    with pytest.raises(ValueError, match="lower final_size"):
        real_splits(tmp_path, n_train=4, n_eval=6, n_final=3)
    first = splits["eval"][0]
    assert first.answer == rows[order[4]]["answer"] and first.answer_type == rows[order[4]]["answer_type"]
    assert first.info == {"answer_type": rows[order[4]]["answer_type"], "category": "Geography"}
    with pytest.raises(FileNotFoundError, match="neither"):
        load_rows(tmp_path / "missing")
    (tmp_path / "bad.csv").write_text("question,gold\nq,a\n")
    with pytest.raises(ValueError, match=r"columns \['problem', 'answer'\] are missing"):
        real_splits(tmp_path / "bad.csv")


def test_real_questions_over_a_local_document_collection(tmp_path, cache_dir):
    rows = write_dsqa_csv(tmp_path / "DSQA-full.csv", 10)
    docs = [{"title": f"{PLACES[i]} rivers", "text": f"The rivers of {PLACES[i]}: {r['answer']}."}
            for i, r in enumerate(rows)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    config = {**SMALL, "name": "deepsearchqa_real_t", "data_path": str(tmp_path / "DSQA-full.csv"), "n_train": 3,
              "n_eval": 5, "search": {"documents": str(tmp_path / "docs.jsonl")}}
    task = load_task(config, cache_dir)
    env = task.environment()
    assert len(env.instances("train")) == 3 and len(env.instances("eval")) == 5
    rows_out = task.train_rows()
    assert [r["completion"].split("[")[0] for r in rows_out] == ["search", "answer"] * 3
    inst = env.instances("eval")[0]
    question = env.question(inst)
    episode = env.open(inst)
    episode.reset()
    step = episode.step(f"search[{question.question}]")
    assert question.answer.split(",")[0] in step.observation  # its page ranks among the results
    items = [x.strip().strip('"') for x in question.answer.split(",")]
    if question.answer_type == "Set Answer":
        assert episode.step(f"answer[{' and '.join(reversed(question.answer.split(', ')))}]").won
    else:
        assert episode.step(f"answer[{items[0]}]").won
    for bad in ({"url": "http://127.0.0.1:1/search", "documents": str(tmp_path / "docs.jsonl")}, {}):
        with pytest.raises(ValueError, match="need one search backend"):
            load_task({**config, "search": bad}, cache_dir)
    with pytest.raises(ValueError, match="for real questions"):
        load_task({**SMALL, "search": {"url": "http://127.0.0.1:1/search"}}, cache_dir)


class SearchApi(BaseHTTPRequestHandler):
    """A loopback search API answering as SerpAPI does (GET ?q=...&api_key=...&engine=... -> organic_results)."""

    calls: list[dict] = []

    def do_GET(self):  # noqa: N802 - the handler's protocol
        query = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
        SearchApi.calls.append(query)
        if query.get("api_key") != "k3y":
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b'{"error": "Invalid API key"}')
            return
        body = {"organic_results": [{"position": i, "title": f"{query['q']} page {i}", "link": "http://x",
                                     "snippet": f"snippet {i} about {query['q']}"} for i in range(1, 6)]}
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args):
        pass


def test_http_search_backend(tmp_path, cache_dir, monkeypatch):
    from envs.deepsearchqa.search import HttpSearch, SearchError

    server = ThreadingHTTPServer(("127.0.0.1", 0), SearchApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/search"
    try:
        write_dsqa_csv(tmp_path / "DSQA-full.csv", 6)
        config = {**SMALL, "name": "deepsearchqa_api_t", "data_path": str(tmp_path), "n_train": 2, "n_eval": 3,
                  "search": {"url": url, "key_env": "DSQA_TEST_KEY", "params": {"engine": "google"}}}
        monkeypatch.setenv("DSQA_TEST_KEY", "k3y")
        env = load_task(config, cache_dir).environment()
        episode = env.open(env.instances("eval")[0])
        episode.reset()
        step = episode.step("search[who won]")
        assert step.observation.splitlines() == ['Results for "who won":',
                                                 "[1] who won page 1 - snippet 1 about who won",
                                                 "[2] who won page 2 - snippet 2 about who won",
                                                 "[3] who won page 3 - snippet 3 about who won"]
        assert SearchApi.calls[-1] == {"q": "who won", "engine": "google", "api_key": "k3y"}
        monkeypatch.setenv("DSQA_TEST_KEY", "wrong")
        failed = episode.step("search[who won]")  # the API refuses: the agent sees it, nothing raises
        assert failed.observation.startswith("Search failed: HTTPError") and not failed.done
        monkeypatch.delenv("DSQA_TEST_KEY")
        with pytest.raises(SearchError, match="DSQA_TEST_KEY is not set"):
            HttpSearch(url, key_env="DSQA_TEST_KEY").search("x", 3)
    finally:
        server.shutdown()


# ------------------------------------------------------------------------------------------------ services

@pytest.fixture(scope="module")
def service(ray_cluster, cache_dir, grading_port, task):
    from ray import serve

    from contracts.runs import registry
    from envs import rollout_service

    route = rollout_service.deploy(TaskSpec.from_config(SMALL), str(cache_dir))
    return {"url": f"http://127.0.0.1:{grading_port}{route}", "registry": registry(),
            "handle": serve.get_app_handle(rollout_service.app_name(SMALL["name"]))}


def run_token(service) -> str:
    import ray

    token = secrets.token_urlsafe(16)
    ray.get(service["registry"].register.remote(token, bare_run()))
    return token


def test_rollout_service_serves_the_train_world_only(service, task):
    token = run_token(service)
    headers = {"Authorization": f"Bearer {token}"}
    env = task.environment()
    games = httpx.get(service["url"] + "/games", headers=headers, timeout=30).json()
    assert [g["name"] for g in games["games"]] == [i.name for i in env.instances("train")]
    assert games["max_steps"] == 6 and all("answer" not in g for g in games["games"])
    inst = env.instances("train")[1]
    question = env.question(inst)
    actions = plan(question)
    start = httpx.post(service["url"] + "/reset", json={"game": inst.name, "actions": actions[:-1]},
                       headers=headers, timeout=30).json()
    assert start["task"] == question.question and start["steps"] == len(actions) - 1
    assert question.answer in start["observation"]  # the last search's results name it
    won = httpx.post(service["url"] + "/step", json={"session_id": start["session_id"], "command": actions[-1]},
                     headers=headers, timeout=30).json()
    assert (won["won"], won["done"], won["reward"]) == (True, True, 1.0)
    # An eval question's first search, asked in a train session, finds nothing of the eval world.
    eval_hop = env.question(env.instances("eval")[0]).hops[0]
    other = httpx.post(service["url"] + "/reset", json={"game": 0, "actions": [f"search[{eval_hop.query}]"]},
                       headers=headers, timeout=30).json()
    hits = "\n".join(other["observation"].splitlines()[1:])  # the results, without the echoed query
    assert hits and eval_hop.object not in hits and eval_hop.subject not in hits
    # Another run cannot touch this run's session.
    intruder = {"Authorization": f"Bearer {run_token(service)}"}
    r = httpx.post(service["url"] + "/step", json={"session_id": other["session_id"], "command": "search[x]"},
                   headers=intruder, timeout=30)
    assert r.status_code == 404 and r.json()["code"] == "unknown_session"
    usage = service["handle"].close_run.remote(token).result()
    assert usage == {"closed": 2, "resets": 2, "steps": len(actions) + 1, "wins": 1}


def test_grading_over_http(ray_cluster, cache_dir, grading_port, task, tmp_path):
    """The unchanged grading service plays the eval questions with the real tiny model; a copy is flagged."""
    from ray import serve

    from evaluators.base_models import resolve_base_model
    from evaluators.service import app_name, deploy

    base = resolve_base_model("tiny-deepsearchqa", cache_dir / "models")
    deploy(TaskSpec.from_config(SMALL), str(cache_dir), emulated_gpus=True)
    handle = serve.get_app_handle(app_name(SMALL["name"]))
    workspace = tmp_path / "ws"
    (workspace / "output").mkdir(parents=True)
    token = secrets.token_urlsafe(16)
    registered = handle.register_run.remote(token, RunRegistration(
        cell_id="dsqa", workspace=str(workspace), records_dir=str(tmp_path), code_repo=str(tmp_path / "g"),
        started_at=time.time(), deadline=time.time() + 600, max_submissions=2)).result()
    assert registered["baseline_score"] == 0.0 and registered["n_eval"] == 4
    shutil.copytree(base, workspace / "output" / "copy")
    r = httpx.post(f"http://127.0.0.1:{grading_port}/{SMALL['name']}/submit", json={"model_path": "output/copy"},
                   headers={"Authorization": f"Bearer {token}"}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["score"] == 0.0 and "copy_of_base" in r.json()["flags"]
    items = json.loads(next((cache_dir / "grading" / SMALL["name"]).rglob("*.items.json")).read_text())["items"]
    assert len(items) == 4 and all(1 <= item["steps"] <= 6 for item in items)


@pytest.mark.slow  # as the alfworld sweep test (also slow), with this env
def test_deepsearchqa_sweep_runs_sft_grpo_in_its_sandbox(run_sweep):
    """Level 3 through the orchestrator: sft_grpo, sandboxed, warms up on the expert's steps, plays train questions
    through the rollout service for GRPO, and each submission is graded by ReAct episodes on the hidden eval
    questions. Asserts what happened, not how much of it fitted in the time."""
    from orchestrator.ledger import Ledger

    small_task = ["task=deepsearchqa_small", "task.n_train=8", "task.n_eval=4", "task.hops=[2]",
                  "task.world={people: 24, organisations: 8, cities: 6, countries: 3, distractors: 2}",
                  "task.rollout.num_hosts=1", "task.rollout.max_sessions_per_run=8", "task.grader.batch_size=8"]
    quick_agent = ["agent=sft_grpo_deepsearchqa", "agent.args.sft_steps=10", "+agent.args.grpo_rounds=1",
                   "agent.args.grpo_steps_per_round=2", "agent.args.episodes_per_round=1", "agent.args.horizon=3",
                   "agent.args.submit_every=1", "agent.args.grading_estimate_s=20", "agent.args.margin_s=5",
                   "agent.args.sft_batch_size=8"]
    _, _, out = run_sweep(["sweep=deepsearchqa_small", "sweep.budget.wall_time_s=180", *small_task, *quick_agent])
    ledger = Ledger(out / "ledger.sqlite")
    (cell,) = ledger.cells().values()
    assert cell["agent"] == "sft_grpo_deepsearchqa", cell
    cells_ended([cell])
    subs = [e["payload"] for e in ledger.events(kind="submission")]
    paths = [s["model_path"] for s in subs]
    assert paths[0] == "output/sft" and any(p.startswith("output/grpo-") for p in paths[1:]), paths
    assert all(s["score"] is not None and s["error"] is None for s in subs), subs
    (outcome,) = [e["payload"] for e in ledger.events(kind="outcome")]
    env = outcome["env_usage"]
    assert env["resets"] > 0 and env["steps"] > 0, env
    stdout = (out / "cells" / cell["cell_id"] / "attempt-1" / "agent.stdout").read_text()
    assert '"onpolicy_success"' in stdout
