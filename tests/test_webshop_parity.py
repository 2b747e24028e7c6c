"""WebShop under the paper's protocol equals the original: rewards equal WebShop's own ``get_reward`` on every purchase
of tests/fixtures/parity/webshop_rewards.json (made by running the original's goal.py on a catalogue generated here
and on hand-made corners, tests/fixtures/parity/make_webshop.py), to 1e-9, never above 1."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

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
