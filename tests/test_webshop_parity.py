"""WebShop under the paper's protocol equals the original: rewards equal WebShop's own ``get_reward`` on every purchase
of tests/fixtures/parity/webshop_rewards.json (made by running the original's goal.py on a catalogue generated here
and on hand-made corners, tests/fixtures/parity/make_webshop.py), to 1e-9, never above 1."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.webshop import paper_prompt
from envs.webshop.reward import reward, spacy_model_note
from tests.support.scripted_backend import ScriptedBackend

FIXTURES = Path(__file__).parent / "fixtures" / "parity"


@pytest.fixture(scope="module")
def reward_fixture() -> dict:
    return json.loads((FIXTURES / "webshop_rewards.json").read_text())


def test_rewards_equal_the_originals_get_reward_on_every_fixture_purchase(reward_fixture):
    fixture = reward_fixture
    note = spacy_model_note()
    assert note["spacy_model"] == fixture["upstream"]["spacy_model_loaded"]  # the fixtures' tagger is ours
    assert note["spacy_model_version"] == fixture["upstream"]["spacy_model_version"]
    products = {p["asin"]: p for p in fixture["products"]}
    fields = fixture["case_fields"]
    assert len(fixture["cases"]) >= 3000
    wrong = []
    for row in fixture["cases"]:
        case = dict(zip(fields, row))
        got, info = reward(products[case["asin"]], fixture["goals"][case["goal"]], case["price"], case["options"])
        parts = (info["r_type"], info["title_score"], info["query_match"], info["category_match"], info["n_attr"],
                 info["n_option"])
        want = (case["r_type"], case["title_score"], case["query_match"], case["category_match"], case["n_attr"],
                case["n_option"])
        assert 0.0 <= got <= 1.0
        if abs(got - case["reward"]) > 1e-9 or parts != want:
            wrong.append((case, got, parts))
    assert not wrong, f"{len(wrong)} of {len(fixture['cases'])} differ, e.g. {wrong[:3]}"
    # the corners are there: partial rewards, options, a type factor of 0.5 and 0.1, prices over the bound
    rewards = [dict(zip(fields, r)) for r in fixture["cases"]]
    assert {0.0, 0.1, 0.5, 1.0} <= {c["r_type"] for c in rewards}
    assert any(0 < c["reward"] < 1 for c in rewards) and any(c["reward"] == 1.0 for c in rewards)


# ---------------------------------------------------------------------------------------------- prompts and replies

def test_prompts_and_actions_equal_rd_agents_loop_on_scripted_episodes():
    """Every prompt a2rl's paper protocol renders is byte-equal to the one RD-Agent's webshop_run built on the same
    episode (fixture: its own code run on the pages a2rl's store showed), every reply becomes the same action, the
    original's parse_action reads it alike, and the episodes end with the same rewards."""
    from envs.webshop.catalogue import GeneratedShop
    from envs.webshop.environment import WebShopPaperEnvironment
    from envs.webshop.shop import parse_action
    from evaluators.lockstep import play

    fixture = json.loads((FIXTURES / "webshop_prompts.json").read_text())
    store = fixture["store"]
    env = WebShopPaperEnvironment(GeneratedShop(store["n_products"], store["n_train"], store["n_eval"],
                                                store["seed"], store["eval_salt"]), store["max_steps"])
    by_instruction = {e["instruction"]: {**e, "next": 0, "seen": []} for e in fixture["episodes"]}

    def generate(prompts):
        replies = []
        for chat in prompts:
            assert [m["role"] for m in chat] == ["system", "user"] and chat[0]["content"] == fixture["system"]
            user = chat[1]["content"]
            episode = by_instruction[user.split("\n\nInstruction: ", 1)[1].split("\n\n", 1)[0]]
            episode["seen"].append(user)
            replies.append(episode["replies"][episode["next"]])
            episode["next"] += 1
        return replies

    instances = {(i.split, i.name): i for split in ("train", "eval") for i in env.instances(split)}
    episodes = [by_instruction[e["instruction"]] for e in fixture["episodes"]]
    played = play(env, [instances[e["split"], e["instance"]] for e in episodes], generate)
    n_prompts = n_equal = 0
    for episode, result in zip(episodes, played):
        n_prompts += len(episode["user_prompts"])
        n_equal += sum(a == b for a, b in zip(episode["seen"], episode["user_prompts"]))
        assert episode["seen"] == episode["user_prompts"], episode["instance"]
        assert result["actions"] == episode["actions"]
        assert [paper_prompt.parse(r) for r in episode["replies"]] == episode["actions"]
        assert [[n, a.lower() if a is not None else None] for n, a in map(parse_action, episode["actions"])] == \
            episode["parsed"]
        assert result["reward"] == pytest.approx(episode["reward"], abs=1e-9)
        assert result["won"] == episode["success"] and result["steps"] == episode["steps"]
    assert n_prompts == n_equal >= 70


# ---------------------------------------------------------------------------------------------- the task

def test_the_paper_protocol_grades_success_rate_with_the_originals_decoding(cache_dir):
    from contracts.decoding import Decoding
    from contracts.task import load_task
    from envs.webshop import expert
    from evaluators.evaluate import evaluate_loaded
    from tests.test_webshop import SMALL

    paper = load_task({**SMALL, "name": "webshop_paper_t", "protocol": "paper"}, cache_dir)
    own = load_task(SMALL, cache_dir)
    assert paper.protocol == "paper" and own.protocol == "a2rl" and paper.rows_dir != own.rows_dir
    assert paper.decoding() == Decoding(100, ("\n",), repetition_penalty=1.0, chat_template=True)
    assert own.decoding().repetition_penalty is None
    # train rows are the paper's prompt: the expert's steps rendered as RD-Agent's loop renders them
    row = paper.train_rows()[1]
    assert row["messages"][0]["content"] == paper_prompt.SYSTEM_PROMPT
    assert row["prompt"].startswith(paper_prompt.HEADER) and row["prompt"].endswith("Action 2:")
    assert "\nObservation 1: " in row["prompt"] and "\nInstruction: Instruction: " in row["prompt"]
    env = paper.environment()
    goals = {f"Instruction: {g['instruction_text']}": g for g in env.goals("eval")}

    def the_expert(chat):  # replays the episode's actions (read off the prompt's history) on a session of its own
        from envs.webshop.shop import ShopSession

        user = chat  # the scripted policy gets the last message
        goal = goals[user.split("\n\nInstruction: ", 1)[1].split("\n\n", 1)[0]]
        session = ShopSession(env.shop, goal)
        for line in user.splitlines():
            if line.startswith("Action ") and ": " in line:
                session.step(line.split(": ", 1)[1])
        return "Action: " + expert.expert_action(session)

    rows = paper.eval_rows()
    graded = evaluate_loaded(paper, ScriptedBackend(the_expert), "scripted", rows)
    items = graded["items"]
    assert graded["score"] == pytest.approx(100 * sum(i["reward"] >= 0.5 for i in items) / len(items))
    assert graded["metrics"]["mean_reward"] == pytest.approx(100 * sum(i["reward"] for i in items) / len(items))
    assert graded["score"] == 100.0 and all(i["commands"][-1] == "click[buy now]" for i in items)
    # the generated store stands in for WebShop's synthetic goals: the record says so, the score is approximate
    assert "approximate" in graded["flags"] and any("generated store" in n for n in graded["approximations"])
    own_graded = evaluate_loaded(own, ScriptedBackend(lambda prompt: "click[nothing]"), "scripted", own.eval_rows())
    assert own_graded["score"] == 0.0 and "flags" not in own_graded


def test_the_paper_protocol_plays_webshops_synthetic_goals_with_data(tmp_path):
    """With data_path, the paper's goals: one per option combination of each product with an instruction, shuffled
    with seed 233, the eval split being sessions 0..n_eval-1, over the first 1,000 products of items_shuffle_1000."""
    import itertools
    import random

    from envs.webshop.environment import WebShopEnvironment, WebShopPaperEnvironment
    from envs.webshop.real_data import UpstreamShop, synthetic_goals
    from tests.support.upstream_layouts import write_webshop_data

    write_webshop_data(tmp_path)
    attrs = json.loads((tmp_path / "items_ins_v2_1000.json").read_text())
    for i, a in enumerate(attrs.values()):
        if i % 4:  # a quarter of the products carry no instruction: they give no goal
            a.update(instruction=f"i need a product number {i}", instruction_attributes=a["attributes"][:1])
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(attrs))
    env = WebShopPaperEnvironment(UpstreamShop(str(tmp_path), n_train=5, n_eval=10, paper=True), 20)
    products = env.shop.products
    with_instruction = [p for p in products.values() if p.get("instruction_text")]
    n_goals = sum(len(list(itertools.product(*p["options"].values()))) for p in with_instruction)
    evals = env.goals("eval")
    assert len(evals) == 10 and [g["session"] for g in evals] == list(range(10))
    everything = [g for split in ("eval", "train") for g in env.goals(split)]
    assert len({g["instruction_text"] for g in everything}) == len(everything) <= n_goals
    goal = evals[0]
    product = products[goal["asin"]]
    assert goal["instruction_text"].startswith(product["instruction_text"] + " with ")
    assert list(goal["goal_options"]) == sorted(product["options"]) and goal["name"] == product["Title"]
    # the order is the original's: its unshuffled list (products in file order, option combinations in
    # itertools.product order over the sorted option names) shuffled by random.seed(233); random.shuffle
    unshuffled = [(p["asin"], dict(zip(sorted(p["options"]), combo))) for p in with_instruction
                  for combo in itertools.product(*(p["options"][n] for n in sorted(p["options"])))]
    random.seed(233)
    random.shuffle(unshuffled)
    assert [(g["asin"], g["goal_options"]) for g in synthetic_goals(list(products.values()))] == unshuffled
    assert [(g["asin"], g["goal_options"]) for g in evals] == unshuffled[:10]
    (tmp_path / "nothing").mkdir()
    with pytest.raises(FileNotFoundError, match="items_shuffle_1000.json"):
        WebShopEnvironment(UpstreamShop(str(tmp_path / "nothing"), 5, 10, paper=True), 20).build()
