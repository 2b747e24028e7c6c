"""WebShop under the paper's protocol equals the original: rewards equal WebShop's own ``get_reward`` on every purchase
of tests/fixtures/parity/webshop_rewards.json (made by running the original's goal.py on a catalogue generated here
and on hand-made corners, tests/fixtures/parity/make_webshop.py), to 1e-9, never above 1."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.webshop import paper_prompt
from envs.webshop.reward import reward, spacy_model_note

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
    from envs.webshop.environment import WebShopEnvironment
    from envs.webshop.shop import parse_action
    from evaluators.lockstep import play

    fixture = json.loads((FIXTURES / "webshop_prompts.json").read_text())
    store = fixture["store"]
    env = WebShopEnvironment(GeneratedShop(store["n_products"], store["n_train"], store["n_eval"], store["seed"],
                                           store["eval_salt"]), store["max_steps"], protocol="paper")
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
