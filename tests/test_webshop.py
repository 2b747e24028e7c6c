"""The level-3 WebShop task: a seeded store and instructions, the original's reward on hand-made purchases, BM25
search, pages that answer every action, the expert, grading by lockstep episodes (in process and over HTTP through
the grading service), the rollout service on the train instructions only, and the upstream-data loaders on files
written here in the upstream layouts."""
from __future__ import annotations

import json
import secrets
import shutil
import socket
import time

import httpx
import pytest

from contracts.runs import RunRegistration
from contracts.task import load_task
from contracts.task_spec import TaskSpec
from envs.webshop import expert
from envs.webshop.catalogue import GeneratedShop, generate_catalogue, generate_goals
from envs.webshop.environment import WebShopEnvironment
from envs.webshop.reward import reward, token_set_ratio

from envs.webshop.search import SearchEngine
from evaluators.evaluate import evaluate_loaded
from tests.support.cells import cells_ended
from tests.support.runs import bare_run
from tests.support.scripted_backend import ScriptedBackend
from tests.support.upstream_layouts import write_webshop_data

SMALL = {"name": "webshop_t", "cls": "webshop", "level": 3, "base_model": "tiny-webshop", "n_products": 120,
         "n_train": 12, "n_eval": 6, "final_size": 3, "seed": 0, "product_types": None, "max_steps": 15,
         "expert_episodes": 2, "expert_noise": 0.3, "eval_salt": None, "data_path": None, "eval_workers": 0,
         "rollout": {"num_hosts": 2, "num_replicas": 1, "max_sessions_per_run": 3, "idle_timeout_s": 30},
         "grader": {"backend": "transformers", "batch_size": 8, "max_new_tokens": 8, "num_cpus": 1, "num_gpus": 0}}


@pytest.fixture(scope="module")
def task(cache_dir):
    return load_task(SMALL, cache_dir)


def store(n_products=120, n_train=12, n_eval=6, seed=0, salt="s", max_steps=15) -> WebShopEnvironment:
    return WebShopEnvironment(GeneratedShop(n_products, n_train, n_eval, seed, salt), max_steps=max_steps)


# ---------------------------------------------------------------------------------------------- store and goals

def test_catalogue_and_instructions_are_deterministic_per_seed():
    assert generate_catalogue(50, seed=3) == generate_catalogue(50, seed=3)
    assert generate_catalogue(50, seed=3) != generate_catalogue(50, seed=4)
    products = generate_catalogue(200, seed=1)
    assert len({p["asin"] for p in products}) == 200 and len({p["query"] for p in products}) == 30
    a, b = store(seed=1), store(seed=1)
    assert a.goals("train") == b.goals("train") and a.goals("eval") == b.goals("eval")
    assert store(seed=2).goals("train") != a.goals("train")
    goal = a.goals("train")[0]
    assert goal["instruction_text"].endswith(f", and price lower than {goal['price_upper']:.2f} dollars")
    phrasings = {g["instruction_text"].split(" a")[0][:8] for g in generate_goals(products, 60, "p")}
    assert len(phrasings) >= 4  # several phrasings


def test_eval_instructions_are_salted_and_disjoint_from_train(task, cache_dir):
    env = task.environment()
    train, evals = env.goals("train"), env.goals("eval")
    assert len(train) == 12 and len(evals) == 6
    assert not {g["asin"] for g in train} & {g["asin"] for g in evals}
    assert not {g["instruction_text"] for g in train} & {g["instruction_text"] for g in evals}
    salt = cache_dir / "grading" / "webshop-eval-salt"
    assert salt.stat().st_mode & 0o077 == 0
    # the public config and the generator without the secret give other eval instructions, the same train ones
    guessed = store(n_products=120, salt="")
    assert guessed.goals("train") == train and guessed.goals("eval") != evals
    rows = task.train_rows()
    texts = {g["instruction_text"] for g in evals}
    assert not any(r["task"] in texts for r in rows)
    assert {r["game"] for r in rows} == {i.name for i in env.instances("train")}


def test_final_instructions_are_held_out_from_train_and_eval_and_graded(task, cache_dir):
    """final_size instructions for products and with texts of neither other split; without them train and eval are
    as they were; the grader's final rows are played on them (an expert of the final instructions wins each)."""
    env = task.environment()
    train, evals, final = env.goals("train"), env.goals("eval"), env.goals("final")
    assert len(final) == 3
    for other in (train, evals):
        assert not {g["asin"] for g in final} & {g["asin"] for g in other}
        assert not {g["instruction_text"] for g in final} & {g["instruction_text"] for g in other}
    names = {split: {i.name for i in env.instances(split)} for split in ("train", "eval", "final")}
    assert len(names["final"]) == 3 and not names["final"] & (names["train"] | names["eval"])
    without = load_task({**SMALL, "final_size": 0}, cache_dir)  # the same secret: the same eval instructions
    assert without.environment().goals("eval") == evals and without.environment().goals("train") == train
    assert without.final_rows() == [] and len(load_task({**SMALL, "final_size": None}, cache_dir).final_rows()) == 6
    rows = task.final_rows()
    assert [(r["id"], r["split"], r["instance"]) for r in rows] == [
        (f"webshop_t-final-{i}", "final", inst.name) for i, inst in enumerate(env.instances("final"))]
    perfect = evaluate_loaded(task, ScriptedBackend(expert_of(env, "final")), "scripted", rows, 8)
    assert perfect["score"] == pytest.approx(best_score(env, "final")) and perfect["n"] == 3
    with pytest.raises(ValueError, match="n_products=120 must be at least n_train \\+ n_eval \\+ final_size"):
        load_task({**SMALL, "final_size": 103}, cache_dir)


# ---------------------------------------------------------------------------------------------- reward

PRODUCT = {"asin": "B000000001", "Title": "Lunaro Sulfate Free Shampoo", "Description": "A gentle shampoo.",
           "BulletPoints": ["Paraben Free: made without parabens"], "Attributes": ["sulfate free", "paraben free"],
           "options": {"size": ["8 fl oz", "16 fl oz"], "scent": ["lavender", "citrus"]}, "price": 12.99,
           "query": "shampoo", "product_category": "Beauty › Hair Care › Shampoos", "nouns": ["lunaro", "shampoo"]}
GOAL = {"asin": "B000000001", "query": "shampoo", "name": PRODUCT["Title"], "nouns": ["lunaro", "shampoo"],
        "product_category": PRODUCT["product_category"], "attributes": ["sulfate free", "paraben free"],
        "goal_options": {"size": "16 fl oz", "scent": "lavender"}, "price_upper": 20.0}


def test_the_reward_formula_on_hand_made_purchases():
    perfect, _ = reward(PRODUCT, GOAL, 12.99, {"size": "16 fl oz", "scent": "lavender"})
    assert perfect == 1.0
    # wrong size: "8 fl oz" is no fuzzy match of the goal's ("size", "16 fl oz"), read as "size 16 fl oz"
    wrong_option, info = reward(PRODUCT, GOAL, 12.99, {"size": "8 fl oz", "scent": "lavender"})
    assert wrong_option == pytest.approx(4 / 5) and info["r_option"] == 0.5
    assert token_set_ratio("16 fl oz", "12 fl oz") == 88 and token_set_ratio("8 fl oz", ("size", "16 fl oz")) == 83
    assert token_set_ratio("sea salt", "Salt!") == 100 and token_set_ratio("lavender", "citrus") < 50
    over_budget, info = reward(PRODUCT, GOAL, 25.0, {"size": "16 fl oz", "scent": "lavender"})
    assert over_budget == pytest.approx(4 / 5) and info["r_price"] is False
    no_options, _ = reward(PRODUCT, GOAL, 12.99, {})
    assert no_options == pytest.approx(3 / 5)
    # each goal option counts once, however many chosen options hit it: never above 1
    many, info = reward(PRODUCT, GOAL, 12.99, {"a": "16 fl oz", "b": "16 fl oz", "scent": "lavender"})
    assert many == 1.0 and info["n_option"] == 2
    # an attribute found only in the features counts (the original looks in title, features, description)
    assert reward({**PRODUCT, "Attributes": ["sulfate free"]}, GOAL, 12.99, {})[0] == pytest.approx(3 / 5)
    other_kind = {**PRODUCT, "query": "lipstick", "product_category": "Beauty › Makeup › Lipstick",
                  "Title": "Kestrel Lipstick"}
    assert reward(other_kind, GOAL, 12.99, {"size": "16 fl oz", "scent": "lavender"})[0] == 0.0
    same_kind_other_brand = {**PRODUCT, "Title": "Kestrel Sulfate Free Shampoo"}
    assert reward(same_kind_other_brand, GOAL, 12.99, {"size": "16 fl oz", "scent": "lavender"})[0] == 1.0


# ---------------------------------------------------------------------------------------------- pages and search

def test_search_results_are_stable_and_relevant():
    products = generate_catalogue(300, seed=5)
    one, two = SearchEngine(products), SearchEngine(list(products))
    goals = generate_goals(products, 20, "s")
    for goal in goals:
        results = one.search(goal["search"])
        assert results == one.search(goal["search"]) == two.search(goal["search"])
        assert 0 < len(results) <= 50 and len(set(results)) == len(results)
    assert sum(g["asin"] in one.search(g["search"]) for g in goals) >= 15
    by_asin = {p["asin"]: p for p in products}
    top = one.search("sulfate free shampoo")[:5]
    assert all(by_asin[a]["query"] == "shampoo" for a in top)
    assert one.search("") == [] and one.search("qwxyz") == []


def test_every_action_is_answered_by_the_page():
    env = store(n_products=600, max_steps=50)
    episode = env.open(env.instances("train")[0])
    first = episode.reset()
    assert first.actions == ("search[<query>]",) and first.observation.startswith("WebShop [SEP] Instruction:")
    for junk in ("click[buy now]", "click[search]", "buy it", "search[]", "click[]", "", "click[b0nonexist]"):
        step = episode.step(junk)
        assert (step.observation, step.reward, step.done, step.won) == (first.observation, 0.0, False, False), junk
    results = episode.step("search[black]")
    assert "Page 1 (Total results:" in results.observation and "click[next >]" in results.actions
    asin = next(a for a in results.actions if a.startswith("click[b0"))
    item = episode.step(f"click[{asin[6:-1].upper()}]")  # the original lower-cases the argument
    assert "click[buy now]" in item.actions and "click[description]" in item.actions
    assert episode.step("click[description]").actions == ("click[back to search]", "click[< prev]")
    assert episode.step("click[< prev]").observation == item.observation
    assert episode.step("click[< prev]").observation == results.observation
    page_two = episode.step("click[next >]")
    assert "Page 2" in page_two.observation and "click[< prev]" in page_two.actions
    assert episode.step(asin).observation == page_two.observation  # a page-1 product is not on page 2
    assert episode.step("click[< prev]").observation == results.observation
    episode.step(asin)
    bought = episode.step("click[buy now]")
    assert bought.done and 0.0 <= bought.reward <= 1.0 and "Your score" in bought.observation
    assert bought.actions == () and episode.step("search[more]").observation == bought.observation


def test_the_expert_wins_every_train_instance():
    env = store(n_products=300, n_train=60, max_steps=50)
    perfect = 0
    for inst in env.instances("train"):
        for episode in (0, 1):
            demos = list(expert.play(env, inst, episode, noise=0.3))
            ep = env.open(inst)
            ep.reset()
            history = list(demos[-1].history) + [demos[-1].action]
            for action in history:
                last = ep.step(action)
            # the target with the instruction's options: the best purchase there is (1.0 but where the original's
            # colour normalisation reads an option as another word: "dark wash" as "ash")
            goal = env.goal(inst)
            target = env.shop.products[goal["asin"]]
            best = reward(target, goal, target["price"], expert.choices(goal, target))[0]
            assert last.done and last.won and last.reward == best, (inst.name, history)
            assert demos[-1].action == "click[buy now]" and demos[0].action.startswith("search[")
            perfect += best == 1.0
    assert perfect >= 0.8 * 2 * len(env.instances("train"))


# ---------------------------------------------------------------------------------------------- grading

def first_product_then_buy(prompt: str) -> str:
    lines = prompt.splitlines()
    actions = lines[lines.index("Available actions:") + 1:-1]
    instruction = lines[0].removeprefix("Instruction: ").split(" with ")[0].split(", and price")[0]
    if actions == ["search[<query>]"]:
        return f"Action: search[{instruction}]"
    if "click[buy now]" in actions:
        return "click[Buy Now]."
    return next((a for a in actions if a.startswith("click[b0")), "click[back to search]")


def best_score(env: WebShopEnvironment, split: str) -> float:
    """100 x the mean reward of buying each instruction's target with its options: 100 but where the original's
    colour normalisation reads an option as another word ("dark wash" as "ash")."""
    best = [reward(p, g, p["price"], expert.choices(g, p))[0]
            for g in env.goals(split) for p in [env.shop.products[g["asin"]]]]
    return 100 * sum(best) / len(best)


def expert_of(env: WebShopEnvironment, split: str):
    """An expert that reads the target off the instruction, for the split's instructions only (tests only)."""
    from envs.webshop.shop import ShopSession

    by_text = {g["instruction_text"]: g for g in env.goals(split)}

    def the_expert(prompt: str) -> str:
        lines = prompt.splitlines()
        goal = by_text[lines[0].removeprefix("Instruction: ")]
        session = ShopSession(env.shop, goal)
        prev = lines[1].removeprefix("Previous actions: ")
        for action in ([] if prev == "none" else prev.split("; ")):
            session.step(action)
        return expert.expert_action(session)

    return the_expert


def test_grading_plays_every_eval_instruction_in_lockstep(task):
    rows = task.eval_rows()
    env = task.environment()
    perfect = evaluate_loaded(task, ScriptedBackend(expert_of(env, "eval")), "scripted", rows, 8)
    assert perfect["score"] == pytest.approx(best_score(env, "eval"))
    assert perfect["metrics"]["success_rate"] == 100.0 and perfect["n"] == 6
    assert all(item["won"] and item["commands"][-1] == "click[buy now]" for item in perfect["items"])
    naive = evaluate_loaded(task, ScriptedBackend(first_product_then_buy), "scripted", rows, 8)
    assert all(item["steps"] == 3 for item in naive["items"])  # search, open, buy: every episode ends bought
    assert 0.0 < naive["score"] < 100.0  # dense: a partly matching purchase earns part of the reward
    assert naive["score"] == pytest.approx(100 * sum(i["score"] for i in naive["items"]) / 6)
    assert naive["metrics"]["success_rate"] == pytest.approx(100 * sum(i["score"] >= 0.5 for i in naive["items"]) / 6)


def test_the_prompt_forgives_the_case_of_a_click():
    from envs.webshop import prompt

    assert prompt.parse("Action: CLICK[Buy Now]", ["click[buy now]"]) == "click[buy now]"


def test_the_base_model_through_the_grading_service(ray_cluster, cache_dir, grading_port, task, tmp_path):
    """The unchanged grader serves the task over HTTP: the tiny model shops for the eval instructions; a copy of it
    is flagged; the success rate travels with the score."""
    from ray import serve

    from evaluators.base_models import resolve_base_model
    from evaluators.service import app_name, deploy

    deploy(TaskSpec.from_config(SMALL), str(cache_dir), emulated_gpus=True)
    handle = serve.get_app_handle(app_name(SMALL["name"]))
    workspace = tmp_path / "ws"
    (workspace / "output").mkdir(parents=True)
    (workspace / "code").mkdir()
    token = secrets.token_urlsafe(16)
    registered = handle.register_run.remote(token, RunRegistration(
        cell_id="ws", workspace=str(workspace), records_dir=str(tmp_path), code_repo=str(tmp_path / "g"),
        started_at=time.time(), deadline=time.time() + 600, max_submissions=2)).result()
    assert registered["n_eval"] == 6 and 0.0 <= registered["baseline_score"] <= 100.0
    assert registered["n_final"] == 3 and 0.0 <= registered["final_baseline_score"] <= 100.0
    shutil.copytree(resolve_base_model("tiny-webshop", cache_dir / "models"), workspace / "output" / "copy")
    r = httpx.post(f"http://127.0.0.1:{grading_port}/{SMALL['name']}/submit", json={"model_path": "output/copy"},
                   headers={"Authorization": f"Bearer {token}"}, timeout=600)
    assert r.status_code == 200, r.text
    record = r.json()
    assert record["score"] == registered["baseline_score"] and "copy_of_base" in record["flags"]
    assert 0.0 <= record["metrics"]["success_rate"] <= 100.0
    graded = cache_dir / "grading" / SMALL["name"]
    items = json.loads(next(graded.glob("*/*.items.json")).read_text())["items"]
    assert len(items) == 6 and all(0 < item["steps"] <= 15 for item in items)
    # when the run ends, its submission is scored on the held-out final instructions, whose episodes were played
    final = handle.close_run.remote(token).result()["final"]
    assert final["submission_id"] == 1 and final["n"] == 3 and final["error"] is None
    assert final["score"] == registered["final_baseline_score"] and final["improvement"] == 0  # a copy of the base
    items = json.loads(next(graded.glob("*/final/*.items.json")).read_text())["items"]
    assert [item["id"] for item in items] == [f"webshop_t-final-{i}" for i in range(3)]
    assert all(0 < item["steps"] <= 15 for item in items)
    assert json.loads((tmp_path / "final.json").read_text()) == final


# ---------------------------------------------------------------------------------------------- rollout service

@pytest.fixture(scope="module")
def service(ray_cluster, cache_dir, grading_port, task):
    from contracts.runs import registry
    from envs import rollout_service

    route = rollout_service.deploy(TaskSpec.from_config(SMALL), str(cache_dir))
    return {"url": f"http://127.0.0.1:{grading_port}{route}", "registry": registry()}


def client(service):
    import ray

    token = secrets.token_urlsafe(16)
    ray.get(service["registry"].register.remote(token, bare_run()))
    headers = {"Authorization": f"Bearer {token}"}

    def post(path, body):
        return httpx.post(service["url"] + path, json=body, headers=headers, timeout=60)

    return token, headers, post


def test_the_rollout_service_serves_train_instructions_only(service, task):
    _, headers, post = client(service)
    games = httpx.get(service["url"] + "/games", headers=headers, timeout=30).json()
    names = [g["name"] for g in games["games"]]
    assert names == [i.name for i in task.environment().instances("train")] and games["max_steps"] == 15
    for hidden in ("eval-0000", 12, -1, "../eval-0000"):
        r = post("/reset", {"game": hidden})
        assert r.status_code == 422 and r.json()["code"] == "unknown_game", (hidden, r.text)
    train_texts = {g["instruction_text"] for g in task.environment().goals("train")}
    start = post("/reset", {"game": "train-0003"}).json()
    assert start["task"] in train_texts and start["admissible_commands"] == ["search[<query>]"]
    assert "/env/step_batch" in task.instructions() and "/env/reset_batch" in task.instructions()


def test_an_expert_episode_through_the_service_and_sessions_isolated(service, task):
    _, _, post = client(service)
    _, _, other = client(service)
    env = task.environment()
    inst = env.instances("train")[1]
    demos = list(expert.play(env, inst))
    actions = list(demos[-1].history) + [demos[-1].action]
    a = post("/reset", {"game": inst.name}).json()
    b = post("/reset", {"game": inst.name, "actions": actions[:1]}).json()  # same instruction, its own page
    assert b["steps"] == 1 and "Page 1" in b["observation"] and a["observation"] != b["observation"]
    junk = post("/step", {"session_id": a["session_id"], "command": "click[nothing here]"}).json()
    assert (junk["observation"], junk["reward"], junk["done"]) == (a["observation"], 0.0, False)
    assert other("/step", {"session_id": a["session_id"], "command": actions[0]}).status_code == 404
    for action in actions:
        last = post("/step", {"session_id": a["session_id"], "command": action}).json()
    assert last["done"] and last["won"] and last["reward"] == 1.0
    again = post("/step", {"session_id": b["session_id"], "command": actions[1]}).json()
    assert not again["done"] and "click[buy now]" in again["admissible_commands"]  # b was not moved by a


# ---------------------------------------------------------------------------------------------- upstream data

def test_upstream_products_instructions_and_human_trajectories(tmp_path):
    from envs.webshop.real_data import UpstreamShop, instruction_key

    write_webshop_data(tmp_path)
    env = WebShopEnvironment(UpstreamShop(str(tmp_path), n_train=20, n_eval=10), max_steps=15)
    shop = env.shop
    assert len(shop.products) == 40 and "nan" not in shop.products
    product = next(iter(shop.products.values()))
    assert product["options"] and all(v == v.lower() for vs in product["options"].values() for v in vs)
    train, evals = env.goals("train"), env.goals("eval")
    assert len(evals) == 10 and len(train) == 20 and not {g["asin"] for g in train} & {g["asin"] for g in evals}
    assert env.goals("eval") == WebShopEnvironment(UpstreamShop(str(tmp_path), 20, 10), 15).goals("eval")
    # the held-out final instructions: the sessions after the eval ones (train, in a set this small, after them)
    held = WebShopEnvironment(UpstreamShop(str(tmp_path), 20, 10, n_final=5), 15)
    final, later = held.goals("final"), held.goals("train")
    assert held.goals("eval") == evals and len(final) == 5 and len(later) == 20
    texts = {g["instruction_text"] for g in final}
    assert len(texts) == 5 and not texts & {g["instruction_text"] for g in evals + later}
    assert all(g in train for g in final)  # sessions from 10 on, where train began without a final split
    with pytest.raises(ValueError, match="lower final_size"):
        WebShopEnvironment(UpstreamShop(str(tmp_path), 20, 10, n_final=31), 15).goals("final")
    # a purchase of the instruction's product with its options earns the full reward on upstream data too
    episode = env.open(env.instances("eval")[0])
    episode.reset()
    goal = evals[0]
    for action in ([f"search[{instruction_key(goal['instruction_text'])}]"] + [f"click[{goal['asin'].lower()}]"]
                   + [f"click[{v}]" for v in goal["goal_options"]] + ["click[buy now]"]):
        last = episode.step(action)
    if last.done:  # the target was on the first results page
        assert last.reward == 1.0

    # human trajectories (rich text states): train instructions' become rows, eval instructions' never do
    def trajectory(goal):
        state = f"WebShop\nInstruction:\n{goal['instruction_text']}\n[button] Search [button_]"
        page = f"Instruction:\n{goal['instruction_text']}\n[button] Back to Search [button_]\nPage 1 (Total results: 1)"
        page += f"\n[button] {goal['asin']} [button_]\n{goal['name']}"
        return {"states": [state, page], "available_actions": [[], ["back to search", goal["asin"].lower()]],
                "actions": [f"search[{goal['query']}]", f"click[{goal['asin'].lower()}]"], "action_idxs": [-1, 1]}

    lines = [trajectory(train[0]), trajectory(train[0]), trajectory(evals[0])]
    (tmp_path / "il_trajs_finalized_images.jsonl").write_text("".join(json.dumps(t) + "\n" for t in lines))
    task = load_task({**SMALL, "name": "webshop_upstream_t", "data_path": str(tmp_path), "n_train": 20,
                      "n_eval": 10, "final_size": 0}, tmp_path / "cache")  # train as above: from session 10
    rows = task.train_rows()
    assert len(rows) == 4 and {r["episode"] for r in rows} == {0, 1} and {r["expert"] for r in rows} == {"human"}
    assert all(r["task"] == train[0]["instruction_text"] for r in rows)
    assert rows[0]["completion"] == f"search[{train[0]['query']}]"
    assert "Observation: Back to Search [SEP] Page 1 (Total results: 1)" in rows[1]["prompt"]
    assert f"click[{train[0]['asin'].lower()}]" in rows[1]["prompt"].splitlines()


# ---------------------------------------------------------------------------------------------- a running server

@pytest.fixture
def upstream_server(tmp_path):
    """Upstream files, the store they make in process, and a stand-in for the original server over them."""
    from envs.webshop.real_data import UpstreamShop, human_goals
    from tests.support.webshop_server import WebShopServer

    write_webshop_data(tmp_path)
    local = WebShopEnvironment(UpstreamShop(str(tmp_path), n_train=20, n_eval=10, n_final=5), max_steps=15)
    server = WebShopServer(local.shop, human_goals(tmp_path, list(local.shop.products.values()))).start()
    yield tmp_path, local, server
    server.stop()


def without_next(items):
    """The original's results page always shows `Next >`; the store in process only when there is a next page."""
    return [x for x in items if x not in ("Next >", "click[next >]")]


def test_a_running_original_server_plays_as_the_store_in_process(upstream_server):
    from envs.webshop.remote import RemoteWebShopEnvironment

    root, local, server = upstream_server
    remote = RemoteWebShopEnvironment(local.data, 15, server.url)
    played = 0
    for split in ("eval", "final", "train"):
        for inst in local.instances(split)[:4]:
            # the expert's noisy episode: detours to sub-pages, other pages and products, back to search
            demos = list(expert.play(local, inst, episode=1, noise=0.5, seed=3))
            actions = [*demos[-1].history, demos[-1].action] + ["click[not a button]", "gibberish"]
            mine, theirs = local.open(inst), remote.open(inst)
            a, b = mine.reset(), theirs.reset()
            assert theirs.goal == mine.goal and b.observation == a.observation and b.actions == a.actions
            earned = 0.0
            for action in actions:
                a, b = mine.step(action), theirs.step(action)
                assert (b.reward, b.done, b.won) == (a.reward, a.done, a.won), action
                earned += b.reward
                if not a.done:   # the same page, in the same text mode
                    assert without_next(b.observation.split(" [SEP] ")) == without_next(a.observation.split(" [SEP] "))
                    assert without_next(b.actions) == without_next(a.actions)
            assert b.done and earned > 0.0   # bought, once
            played += 1
            # the done page's hidden block (the target's asin, options) never reaches the observation
            assert "Target" not in b.observation and "Reward Details" not in b.observation
            assert "Your score (min 0.0, max 1.0)" in b.observation
    assert played == 12
    sessions = {r.split()[1].split("/")[1] for r in server.requests if r.count("/") == 1}
    assert any(s.endswith(f"_fixed_{local.goal(local.instances('eval')[0])['session']}") for s in sessions)
    assert any(r.startswith("POST /done/") for r in server.requests)   # Buy Now posted its form
    assert any("/item_sub_page/" in r for r in server.requests)         # the detours went through the server too


def test_grading_on_a_running_server_matches_the_store_in_process(upstream_server):
    root, local, server = upstream_server
    conf = {**SMALL, "name": "webshop_server_t", "data_path": str(root), "n_train": 20, "n_eval": 10,
            "final_size": 5}
    in_process = load_task(conf, root / "cache")
    on_server = load_task({**conf, "server_url": server.url}, root / "cache")
    rows = on_server.eval_rows()
    assert rows == in_process.eval_rows()
    theirs = evaluate_loaded(on_server, ScriptedBackend(first_product_then_buy), "scripted", rows, 8)
    mine = evaluate_loaded(in_process, ScriptedBackend(first_product_then_buy), "scripted", rows, 8)
    assert [i["score"] for i in theirs["items"]] == [i["score"] for i in mine["items"]]
    assert theirs["score"] == mine["score"] > 0.0
    # no human trajectories in this data: the expert played it in process (upstream goals list bare option values)
    rows = in_process.train_rows()
    assert rows and {r["expert"] for r in rows} == {"planner"} and on_server.train_rows() == rows
    # as the rollout hosts and the grader's workers get it: the recipe travels, the connection pool does not
    import pickle

    env = pickle.loads(pickle.dumps(on_server.environment()))
    assert env.server_url == server.url + "/" and env.open(env.instances("train")[0]).reset().actions == (
        "search[<query>]",)
    with pytest.raises(ValueError, match="needs data_path"):
        load_task({**SMALL, "name": "webshop_server_t2", "server_url": server.url}, root / "cache")


def test_a_server_with_other_data_or_none_is_a_clear_error(upstream_server):
    from envs.webshop.real_data import human_goals
    from envs.webshop.remote import Page, RemoteWebShopEnvironment, ServerError
    from tests.support.webshop_server import WebShopServer

    root, local, _ = upstream_server
    other = WebShopServer(local.shop, human_goals(root, list(local.shop.products.values()))[1:]).start()
    try:
        episode = RemoteWebShopEnvironment(local.data, 15, other.url).open(local.instances("eval")[0])
        with pytest.raises(ServerError, match="point task.data_path at the data/ folder that server loads"):
            episode.reset()
    finally:
        other.stop()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    episode = RemoteWebShopEnvironment(local.data, 15, f"http://127.0.0.1:{port}").open(local.instances("eval")[0])
    with pytest.raises(ServerError, match="is it running"):
        episode.reset()
    with pytest.raises(ServerError, match="reward is 'n/a', not a number"):  # a done page unlike the original's
        Page('<div id="reward"><pre>n/a</pre></div>')


# ---------------------------------------------------------------------------------------------- a sweep

@pytest.mark.slow  # as the alfworld sweep test (also slow), with this env
def test_webshop_sweep_runs_sft_grpo_in_its_sandbox(run_sweep):
    """Through the orchestrator: sft_grpo, sandboxed, warms up on the expert's steps, shops for train instructions
    through the rollout service for GRPO, and each submission is graded by lockstep episodes on the hidden eval
    instructions. Asserts what happened, not how much fitted in the time."""
    from orchestrator.ledger import Ledger

    small_task = ["task=webshop_small", "task.n_products=120", "task.n_train=12", "task.n_eval=4",
                  "task.max_steps=8", "task.rollout.num_hosts=1", "task.rollout.max_sessions_per_run=8",
                  "task.grader.batch_size=8", "task.grader.max_new_tokens=12"]
    quick_agent = ["agent=sft_grpo_webshop", "agent.args.sft_steps=10", "+agent.args.grpo_rounds=1",
                   "agent.args.grpo_steps_per_round=2", "agent.args.episodes_per_round=1", "agent.args.horizon=3",
                   "agent.args.submit_every=1", "agent.args.grading_estimate_s=20", "agent.args.margin_s=5",
                   "agent.args.max_new_tokens=12"]
    _, _, out = run_sweep(["sweep=webshop_small", "sweep.budget.wall_time_s=150", *small_task, *quick_agent])
    ledger = Ledger(out / "ledger.sqlite")
    (cell,) = ledger.cells().values()
    assert cell["agent"] == "sft_grpo_webshop", cell
    cells_ended([cell])
    subs = [e["payload"] for e in ledger.events(kind="submission")]
    assert subs and subs[0]["model_path"] == "output/sft", subs
    for sub in subs:
        assert sub["error"] is None and 0.0 <= sub["score"] <= 100.0, sub
        assert 0.0 <= sub["metrics"]["success_rate"] <= 100.0
    (outcome,) = [e["payload"] for e in ledger.events(kind="outcome")]
    assert outcome["env_usage"]["resets"] > 0 and outcome["env_usage"]["steps"] > 0, outcome
