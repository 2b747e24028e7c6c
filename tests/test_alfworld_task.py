"""The level-3 ALFWorld task: hidden salted splits, expert train rows, batched ReAct grading (in process and through the
grading service), and a short online-RL run of the sft_grpo agent's GRPO against the real rollout service."""
from __future__ import annotations

import json
import secrets
import shutil
import stat
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from contracts.runs import RunRegistration
from contracts.task import load_task  # noqa: E402
from contracts.task_spec import TaskSpec  # noqa: E402
from evaluators.base_models import resolve_base_model  # noqa: E402
from evaluators.evaluate import evaluate_loaded  # noqa: E402
from tests.conftest import load_script  # noqa: E402
from tests.support.scripted_backend import ScriptedBackend  # noqa: E402
from tests.test_rollout_service import SMALL_TASK, Client, service  # noqa: E402,F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def task(cache_dir):
    return load_task(SMALL_TASK, cache_dir)


@pytest.fixture(scope="module")
def base(cache_dir) -> Path:
    return resolve_base_model("tiny-alfworld", cache_dir / "models")


def walkthrough(plans: dict[str, list[str]]):
    """A policy replying with each game's walkthrough command (found from the prompt's task line and history)."""
    def reply(text: str) -> str:
        lines = text.splitlines()
        task = lines[0].removeprefix("Task: ")
        prev = lines[1].removeprefix("Previous commands: ")
        return f"Action: {plans[task][0 if prev == 'none' else len(prev.split('; '))]}."

    return reply


def plans_of(games: list[Path]) -> dict[str, list[str]]:
    out = {}
    for game in games:
        data = json.loads(game.read_text())
        out[data["a2rl"]["task"].strip().rstrip(".") + "."] = data["walkthrough"]
    return out


def test_splits_are_salted_hidden_and_disjoint(task, cache_dir):
    from envs.alfworld.generator import split_fingerprints

    train, evals = task.train_games(), task.eval_games()
    assert len(train) == 3 and len(evals) == 2
    grading = (cache_dir / "grading").resolve()
    assert all(grading in p.resolve().parents for p in train + evals)  # the sandbox hides CACHE_DIR/grading
    salt = grading / "alfworld-eval-salt"
    assert stat.S_IMODE(salt.stat().st_mode) == 0o600 and len(salt.read_text().strip()) == 32
    manifest = json.loads((evals[0].parent.parent / "manifest.json").read_text())
    assert manifest["salted"] is True
    assert not split_fingerprints(train[0].parent.parent) & split_fingerprints(evals[0].parent.parent)
    again = load_task(SMALL_TASK, cache_dir)
    assert again.eval_games() == evals  # built once, found again


def test_the_final_games_are_held_out_from_train_and_eval_and_graded(task, cache_dir):
    """final_size games, salted, hidden, none equal to a train or eval game, built beside them without touching them;
    the grader's final rows are played on them (their walkthroughs win each)."""
    from envs.alfworld.generator import split_fingerprints

    held = load_task({**SMALL_TASK, "final_size": 2}, cache_dir)  # the same secret: the same train and eval games
    assert held.train_games() == task.train_games() and held.eval_games() == task.eval_games()
    final = held.final_games()
    assert len(final) == 2 and task.final_games() == [] and task.final_rows() == []
    grading = (cache_dir / "grading").resolve()
    assert all(grading in p.resolve().parents for p in final)  # the sandbox hides CACHE_DIR/grading
    assert json.loads((final[0].parent.parent / "manifest.json").read_text())["salted"] is True
    fps = {split: split_fingerprints(games[0].parent.parent) for split, games in
           (("train", held.train_games()), ("eval", held.eval_games()), ("final", final))}
    assert len(fps["final"]) == 2 and not fps["final"] & (fps["train"] | fps["eval"])
    names = {split: {i.name for i in held.environment().instances(split)} for split in ("train", "eval", "final")}
    assert not names["final"] & (names["train"] | names["eval"])
    assert load_task({**SMALL_TASK, "final_size": 2}, cache_dir).final_games() == final  # built once, found again
    rows = held.final_rows()
    assert [(r["id"], r["split"], r["instance"]) for r in rows] == [
        (f"alfworld_t-final-{i}", "final", p.parent.name) for i, p in enumerate(final)]
    result = evaluate_loaded(held, ScriptedBackend(walkthrough(plans_of(final))), "scripted", rows, 12)
    assert result["score"] == 100.0 and result["n"] == 2


def test_expert_rows_built_in_processes_are_the_same(task, tmp_path):
    parallel = load_task({**SMALL_TASK, "build_workers": 2}, tmp_path)
    assert parallel.train_rows() == task.train_rows()


def test_train_rows_are_expert_steps_in_the_graders_format(task):
    from envs.alfworld.prompt import SYSTEM_PROMPT, parse

    rows = task.train_rows()
    games = {p.parent.name for p in task.train_games()}
    assert {r["game"] for r in rows} == games
    for row in rows:
        system, user = row["messages"]
        assert system == {"role": "system", "content": SYSTEM_PROMPT} and user["content"] == row["prompt"]
        admissible = row["prompt"].split("Admissible commands:\n")[1].split("\nReply with")[0].splitlines()
        assert row["completion"] in admissible and parse(row["completion"], admissible) == row["completion"]
        assert task.messages(row) == row["messages"]
    text = task.instructions()
    for needle in ("/env/reset", "/env/step", "/env/step_batch", "/env/reset_batch", "Admissible commands:",
                   SYSTEM_PROMPT, "100 x the fraction"):
        assert needle in text


def test_grading_plays_every_eval_game_in_lockstep(task):
    rows = task.eval_rows()
    expert = ScriptedBackend(walkthrough(plans_of(task.eval_games())))
    result = evaluate_loaded(task, expert, "scripted", rows, 12)
    assert result["score"] == 100.0 and result["n"] == 2
    assert [item["score"] for item in result["items"]] == [1.0, 1.0]
    assert expert.batches[0] == 2  # one batched call per step over the active games
    from evaluators.lockstep import play  # the same games stepped by two worker processes

    env = task.environment()
    generate = lambda chats: expert.generate("scripted", chats, task.decoding())  # noqa: E731
    assert play(env, env.instances("eval"), generate, workers=2) == play(env, env.instances("eval"), generate)


def test_the_base_model_through_the_grading_service(ray_cluster, cache_dir, grading_port, task, base, tmp_path):
    """The unchanged grader serves the level-3 task: the real tiny model plays the eval games; copy flagged."""
    from ray import serve

    from evaluators.service import app_name, deploy

    deploy(TaskSpec.from_config(SMALL_TASK), str(cache_dir), emulated_gpus=True)
    handle = serve.get_app_handle(app_name(SMALL_TASK["name"]))
    workspace = tmp_path / "ws"
    (workspace / "output").mkdir(parents=True)
    (workspace / "code").mkdir()
    token = secrets.token_urlsafe(16)
    registered = handle.register_run.remote(token, RunRegistration(
        cell_id="alf", workspace=str(workspace), records_dir=str(tmp_path), code_repo=str(tmp_path / "g"),
        started_at=time.time(), deadline=time.time() + 600, max_submissions=2)).result()
    assert registered["baseline_score"] == 0.0 and registered["n_eval"] == 2
    shutil.copytree(base, workspace / "output" / "copy")
    r = httpx.post(f"http://127.0.0.1:{grading_port}/{SMALL_TASK['name']}/submit", json={"model_path": "output/copy"},
                   headers={"Authorization": f"Bearer {token}"}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["score"] == 0.0 and "copy_of_base" in r.json()["flags"]
    items = json.loads(next((cache_dir / "grading" / SMALL_TASK["name"]).rglob("*.items.json")).read_text())["items"]
    assert len(items) == 2 and all(0 < item["steps"] <= 50 for item in items)


def load_agent(tmp_path: Path):
    """sft_grpo as a cell gives it to the agent: in code/ beside the client and ALFWorld's render/parse."""
    from agents.kinds import agent_kind
    from contracts.specs import AgentSpec
    from contracts.task import prompt_file

    _, files = agent_kind("builtin").command(AgentSpec(name="sft_grpo", kind="builtin", script="sft_grpo"),
                                             prompt_file(TaskSpec.from_config(SMALL_TASK)))
    (tmp_path / "code").mkdir()
    for name, source in files.items():
        shutil.copy(source, tmp_path / "code" / name)
    return load_script(tmp_path / "code" / "sft_grpo.py")


def win_probability(model, tokenizer, states: list[dict]) -> float:
    """Mean probability that the policy's reply is the winning command: its expected reward at these states."""
    import torch

    total = 0.0
    for s in states:
        prompt = tokenizer.apply_chat_template(s["messages"], tokenize=False, add_generation_prompt=True)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tokenizer(s["win"] + "<|im_end|>", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([p_ids + c_ids])).logits[0, len(p_ids) - 1:-1]
        total += float(logits.log_softmax(-1).gather(1, torch.tensor(c_ids)[:, None]).sum().exp())
    return total / len(states)


@pytest.mark.slow  # GRPO through the rollout service also runs in the level-3 sweep test; this adds the reward moving
def test_online_grpo_through_the_rollout_service_moves_the_reward(service, task, base, tmp_path):  # noqa: F811
    """A short online-RL run of the sft_grpo agent's own code against the real rollout service: a brief SFT, then
    GRPO on each train game's state one command before the win, every sampled command rewarded by the real game
    (the service replays the prefix, then plays the command). Its expected reward (the policy's probability of the
    winning command) must rise."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    from envs.alfworld.engine import AlfWorldGame
    from envs.alfworld.prompt import render

    agent = load_agent(tmp_path)
    torch.set_num_threads(1)
    set_seed(0)
    states = []
    for path in task.train_games():
        plan = json.loads(path.read_text())["walkthrough"]
        with AlfWorldGame(path) as game:
            obs, info = game.reset()
            for cmd in plan[:-1]:
                obs, _, _, info = game.step(cmd)
            states.append({"messages": render(game.task, obs, info["admissible_commands"], plan[:-1]),
                           "game": path.parent.name, "prefix": plan[:-1], "win": plan[-1],
                           "admissible": info["admissible_commands"]})
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    args = {**agent.DEFAULTS, **RL_TEST_ARGS}
    all_states, states = states, states[::2]  # RL on the pick and look games: two states keep each step cheap
    agent.run_sft(model, tokenizer, [{"messages": s["messages"], "completion": s["win"]} for s in all_states],
                  args, 0, float("inf"), tmp_path)
    before = win_probability(model, tokenizer, states)

    client = Client(service)
    env = agent.a2rl_client.Env({"rollout_url": service["url"], "grading_url": "unused", "run_token": client.token})
    reward = agent.EnvReward(env, agent.Policy(model, tokenizer, 12), horizon=0)
    # Every step sees both states (a batch is the whole dataset): on a model this small, a batch without one of them
    # pulls that state's command away through shared weights.
    stats = agent.grpo_round(model, tokenizer, states, reward, args, 0, tmp_path, int(args["grpo_steps_per_round"]))
    after = win_probability(model, tokenizer, states)
    print(f"P(winning command) {before:.3f} -> {after:.3f}; sampled reward by step {stats['reward_by_step']}")
    assert 0 < before < 0.9  # the warm-up left room to learn
    assert after > before + 0.04
    curve = stats["reward_by_step"]
    third = len(curve) // 3
    assert sum(curve[-third:]) > sum(curve[:third])  # sampled commands win more often by the end
    service["handle"].close_run.remote(client.token).result()


# Adam's first steps move every weight by about the learning rate whatever the gradient's size: with a noisy policy
# gradient, 1e-3 wrecks a model this small (measured), 3e-4 improves it steadily.
RL_TEST_ARGS = {"sft_steps": 30, "sft_batch_size": 3, "sft_learning_rate": 2e-3, "sft_warmup_steps": 2,
                "grpo_steps_per_round": 15, "grpo_learning_rate": 3e-4, "num_generations": 6, "states_per_step": 2,
                "max_new_tokens": 12, "temperature": 1.0}
