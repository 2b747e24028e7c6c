"""The Environment contract (contracts/environment.py), one test each, that every environment must pass: the counter
(tests/support/counter.py), ALFWorld, WebShop, DeepSearchQA and number guessing, each at its test size. A new
environment adds its config to ENVIRONMENTS; its own test file keeps only what is particular to it.

Each module-scoped task is the one its own test file builds (the same config and session cache: nothing is built
twice). The grader's loop, rendering and parsing are real; only the model is scripted (tests/support)."""
from __future__ import annotations

import shutil

import pytest

from agents.kinds import agent_kind
from contracts.rollout_api import ROUTES
from contracts.specs import AgentSpec
from contracts.task import load_task, prompt_file
from evaluators.evaluate import evaluate_loaded
from tests.conftest import load_script
from tests.support import counter  # noqa: F401  (registers the task "counter")
from tests.support.scripted_backend import ScriptedBackend

NUMBER_GUESS = {"name": "number_guess_t", "cls": "number_guess", "base_model": "tiny", "level": 3, "n_train": 4,
                "n_eval": 3, "final_size": 2, "high": 20, "max_steps": 5, "seed": 0, "eval_salt": None}


def environments() -> dict:
    from tests.test_deepsearchqa import SMALL as DEEPSEARCHQA
    from tests.test_environments import COUNTER
    from tests.test_webshop import SMALL as WEBSHOP

    configs = {"counter": COUNTER, "webshop": WEBSHOP, "deepsearchqa": DEEPSEARCHQA, "number_guess": NUMBER_GUESS}
    try:
        import alfworld  # noqa: F401
        import textworld  # noqa: F401

        from tests.test_rollout_service import SMALL_TASK as ALFWORLD
        configs["alfworld"] = ALFWORLD
    except ImportError:  # the ALFWorld stack is optional: its case is skipped where it is not installed
        pass
    return configs


ENVIRONMENTS = ["alfworld", "counter", "deepsearchqa", "number_guess", "webshop"]
NONSENSE = "I would like to fly."


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def task(request, cache_dir):
    config = environments().get(request.param)
    if config is None:
        pytest.skip(f"{request.param}: its packages are not installed")
    return load_task(config, cache_dir)


def test_train_rows_are_the_experts_steps_as_the_grader_sends_them(task):
    env = task.environment()
    rows = task.train_rows()
    assert rows and {r["game"] for r in rows} <= {i.name for i in env.instances("train")}
    for row in rows:
        assert task.messages(row) == row["messages"] and row["completion"] == row["answer"]
        last = row["messages"] if isinstance(row["messages"], str) else row["messages"][-1]["content"]
        assert row["prompt"] == last
        assert task.score(row["completion"], row) == 1.0  # the expert's action parses to itself
    rows[0]["prompt"] = "changed"
    assert task.train_rows()[0]["prompt"] != "changed"  # callers get copies


def test_an_episode_answers_anything_and_ends_after_max_steps(task):
    env = task.environment()
    episode = env.open(env.instances("train")[0])
    step = episode.reset()
    assert episode.goal and not step.done and episode.steps == 0
    for i in range(1, env.max_steps + 1):
        assert not step.done
        step = episode.step(env.parse(NONSENSE, step))
        assert episode.steps == i and isinstance(step.observation, str)
    assert step.done and not step.won and env.score(step) == 0.0
    after = episode.step(env.parse(NONSENSE, step))  # after the end nothing an action does changes it
    assert after.done and not after.won
    episode.close()


def test_agents_get_its_render_and_parse(task, tmp_path):
    """The render/parse module copied beside a built-in agent renders and parses as the grader does."""
    _, files = agent_kind("builtin").command(AgentSpec(name="sft_grpo", kind="builtin", script="sft_grpo"),
                                             prompt_file(task.spec))
    for name, source in files.items():
        shutil.copy(source, tmp_path / name)
    client = load_script(tmp_path / "sft_grpo.py").a2rl_client
    env = task.environment()
    episode = env.open(env.instances("train")[0])
    step = episode.reset()
    actions = list(step.actions or ())
    assert client.render(episode.goal, step.observation, actions, []) == env.render(episode.goal, step, [])
    for reply in (NONSENSE, task.train_rows()[0]["completion"], f"Action: {task.train_rows()[0]['completion']}"):
        assert client.parse(reply, actions) == env.parse(reply, step)
    row = task.train_rows()[0]
    assert client.chat(row) == row["messages"]


def test_the_grader_plays_every_eval_instance_in_lockstep(task):
    env = task.environment()
    rows = task.eval_rows()
    assert [r["instance"] for r in rows] == [i.name for i in env.instances("eval")]
    assert [r["id"] for r in rows] == [f"{task.name}-eval-{i}" for i in range(len(rows))]
    babbler = ScriptedBackend(NONSENSE)
    result = evaluate_loaded(task, babbler, "scripted", rows, 8)
    assert result["score"] == 0.0 and result["n"] == len(rows)
    assert all(item["steps"] == env.max_steps for item in result["items"])
    assert babbler.batches == [len(rows)] * env.max_steps  # one batched call per step over the episodes running


def test_the_instructions_name_every_route_served(task):
    text = task.instructions()
    assert all(f"/env{route.path}" in text for route in ROUTES)
    assert f"after {task.environment().max_steps} commands" in text and task.reward_text in text
    assert f"at most {task.decoding().max_new_tokens} new tokens" in text
    assert f"At most {task.rollout.max_sessions_per_run} open sessions per run" in text
