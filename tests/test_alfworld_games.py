"""ALFWorld game generator, engine wrapper, expert data and real-data discovery, against the real engine."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from envs.alfworld import game_sets  # noqa: E402
from envs.alfworld.engine import AlfWorldGame  # noqa: E402
from envs.alfworld.environment import AlfWorldEnvironment  # noqa: E402
from envs.alfworld.expert import demonstrations, expert_demonstrations, expert_steps  # noqa: E402
from envs.alfworld.generator import (  # noqa: E402
    EVAL_SEED_BASE,
    TASK_TYPES,
    build_splits,
    generate_game,
    generate_split,
    problem_fingerprint,
    split_fingerprints,
    write_game,
)
from envs.alfworld.prompt import SYSTEM_PROMPT, format_prompt, parse, render  # noqa: E402
from envs.alfworld.real_data import (  # noqa: E402
    draw_across_types,
    ensure_task_in_grammar,
    real_splits,
    resolve_data_root,
)
from evaluators.lockstep import play  # noqa: E402

SEEDS = {t: 7 + i for i, t in enumerate(TASK_TYPES)}


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("alfworld_games")
    return {t: write_game(generate_game(SEEDS[t], t), root / t) for t in TASK_TYPES}


def environment_of(*paths: Path, max_steps: int = 50) -> AlfWorldEnvironment:
    """The games as eval instances, named by their folder."""
    return AlfWorldEnvironment({"eval": list(paths)}, {p: p.parent.name for p in paths}, max_steps)


def _admissible_from_prompt(prompt: str) -> list[str]:
    lines = prompt.splitlines()
    start = lines.index("Admissible commands:") + 1
    end = lines.index("Reply with the next command.")
    return lines[start:end]


def test_each_task_type_loads_and_its_walkthrough_wins(games):
    for task_type, path in games.items():
        data = json.loads(path.read_text())
        assert data["solvable"] is True and data["walkthrough"]
        assert "UNKNOWN GOAL" not in data["grammar"]
        traj = json.loads((path.parent / "traj_data.json").read_text())
        assert traj["task_type"] == task_type
        with AlfWorldGame(path) as game:
            obs, info = game.reset()
            assert "Your task is to:" in obs and game.task
            assert not info["won"] and info["admissible_commands"]
            assert info["walkthrough"] == data["walkthrough"]
            for cmd in data["walkthrough"]:
                assert cmd in info["admissible_commands"], (task_type, cmd)
                obs, score, done, info = game.step(cmd)
            assert info["won"] and done and score == 1.0, task_type


def test_bad_command_gets_the_games_answer(games):
    with AlfWorldGame(games["pick_and_place_simple"], max_steps=3) as game:
        _, info = game.reset()
        before = info["admissible_commands"]
        for bad in ("fly to the moon", "", "go to cabinet 999"):
            obs, score, done, info = game.step(bad)
            assert obs == "Nothing happens." and score == 0.0 and not info["won"]
            assert info["admissible_commands"] == before
        assert done  # the step limit ends the episode
        obs, info = game.reset()
        assert game.steps == 0 and not info["won"]


def test_same_seed_same_game_and_different_seeds_differ(games):
    a = generate_game(SEEDS["pick_heat_then_place_in_recep"], "heat")
    b = json.loads(games["pick_heat_then_place_in_recep"].read_text())
    assert a["pddl_problem"] == b["pddl_problem"] and a["grammar"] == b["grammar"]
    assert a["walkthrough"] == b["walkthrough"]
    c = generate_game(SEEDS["pick_heat_then_place_in_recep"], "heat", salt="secret")
    assert problem_fingerprint(c) != problem_fingerprint(a)


def test_small_rooms_are_capped_and_stay_solvable(tmp_path):
    for seed, task_type in [(1, "pick"), (2, "heat"), (3, "look")]:
        small = generate_game(seed, task_type, max_per_type=1, max_receptacles=6)
        kinds = re.findall(r"^  \(receptacleType \S+ (\S+)\)", small["pddl_problem"], re.M)
        assert 0 < len(kinds) == len(set(kinds)) <= 6, kinds  # one of each type, six in all
        assert small["a2rl"]["n_receptacles"] == len(kinds) < generate_game(seed, task_type)["a2rl"]["n_receptacles"]
        path = write_game(small, tmp_path / f"{task_type}-{seed}")
        with AlfWorldGame(path) as game:
            _, info = game.reset()
            for cmd in small["walkthrough"]:
                _, _, done, info = game.step(cmd)
            assert info["won"], task_type
    with pytest.raises(ValueError, match="max_receptacles=0 must be >= 1"):
        generate_game(1, "pick", max_receptacles=0)


def test_train_and_eval_splits_are_disjoint(tmp_path):
    splits = build_splits(tmp_path, n_train=2, n_eval=2, seed=3, task_types=["pick", "cool"])
    assert [p.parent.parent.name for p in splits["train"]] == ["train", "train"]
    assert [p.parent.parent.name for p in splits["eval"]] == ["eval", "eval"]
    train_m = json.loads((tmp_path / "train" / "manifest.json").read_text())
    eval_m = json.loads((tmp_path / "eval" / "manifest.json").read_text())
    assert all(g["seed"] < EVAL_SEED_BASE for g in train_m["games"])
    assert all(g["seed"] >= EVAL_SEED_BASE for g in eval_m["games"])
    assert [g["task_type"] for g in eval_m["games"]] == ["pick_and_place_simple", "pick_cool_then_place_in_recep"]
    eval_fps = split_fingerprints(tmp_path / "eval")
    assert len(eval_fps) == 2 and not eval_fps & split_fingerprints(tmp_path / "train")
    # A game equal to an eval game is never written to another split: re-generating the eval seeds with the eval
    # set excluded skips both and moves on to new seeds.
    first = eval_m["games"][0]["seed"]
    other = generate_split(tmp_path / "other", 1, first, ["pick", "cool"], exclude=eval_fps)
    m = json.loads((tmp_path / "other" / "manifest.json").read_text())
    assert m["games"][0]["seed"] > first
    assert split_fingerprints(other[0].parent) & eval_fps == set()


def test_expert_demonstrations_win_and_round_trip_through_the_parser(games):
    episodes = [expert_steps(p) for p in games.values()]
    for ep in episodes:
        assert ep["expert"] == "search", ep["task_type"]  # the non-omniscient expert solves every type
        assert 0 < len(ep["steps"]) <= 50
        demos = demonstrations(ep)
        assert len(demos) == len(ep["steps"])
        env = environment_of(Path(ep["game"]))
        for d in demos:
            system, user = env.render(d.goal, d.step, d.history)
            assert system == {"role": "system", "content": SYSTEM_PROMPT}
            assert user["role"] == "user" and user["content"].startswith(f"Task: {ep['task'].rstrip('.')}.")
            admissible = _admissible_from_prompt(user["content"])
            assert parse(d.action, admissible) == d.action and d.action in admissible
        if ep["task_type"] not in ("pick_two_obj_and_place", "look_at_obj_in_light"):
            continue
        # The same actions replayed through the grader's loop win the game.
        commands = [d.action for d in demos]

        def replay(chats, commands=commands):
            prev = chats[0][1]["content"].splitlines()[1].removeprefix("Previous commands: ")
            return [commands[0 if prev == "none" else len(prev.split("; "))]]

        [result] = play(env, env.instances("eval"), replay)
        assert result["won"] and result["score"] == 1.0 and result["actions"] == commands
    planner = expert_demonstrations([games["pick_two_obj_and_place"]], mode="planner")
    assert [d.action for d in planner] == json.loads(games["pick_two_obj_and_place"].read_text())["walkthrough"]


def test_parse_is_lenient_and_never_fails():
    adm = ["go to cabinet 1", "go to cabinet 10", "take mug 1 from cabinet 1", "look"]
    assert parse("go to cabinet 10", adm) == "go to cabinet 10"
    assert parse("  Action: Go to Cabinet 1.\nthen more", adm) == "go to cabinet 1"
    assert parse("> take mug 1 from cabinet 1", adm) == "take mug 1 from cabinet 1"
    assert parse('"look"', adm) == "look"
    assert parse("go to cabinet 1 because it may hold a mug", adm) == "go to cabinet 1"
    assert parse("<think>hmm</think>look<|im_end|>", adm) == "look"
    assert parse("dance", adm) == "dance"
    assert parse("", adm) == ""
    prompt = format_prompt("put a mug in cabinet.", "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in a room.\n\n"
                           "Your task is to: put a mug in cabinet.", adm, ["look"])
    assert prompt.splitlines()[:3] == ["Task: put a mug in cabinet.", "Previous commands: look",
                                       "Observation: You are in a room."]
    assert _admissible_from_prompt(prompt) == adm
    assert render("t", "o", adm)[1]["content"].splitlines()[1] == "Previous commands: none"


def test_a_policy_that_says_nonsense_loses_without_errors(games):
    env = environment_of(games["look_at_obj_in_light"], max_steps=3)
    [result] = play(env, env.instances("eval"), lambda chats: ["I think I will dance."] * len(chats))
    assert result == {"instance": "look_at_obj_in_light", "won": False, "score": 0.0, "reward": 0.0, "steps": 3,
                      "goal": result["goal"], "actions": ["i think i will dance"] * 3,
                      "replies": ["I think I will dance."] * 3}


# valid_unseen's 134 games by task type (ALFWorld's paper, table 1: the unseen split)
UNSEEN_TYPES = {"look_at_obj_in_light": 18, "pick_and_place_simple": 24, "pick_clean_then_place_in_recep": 31,
                "pick_cool_then_place_in_recep": 21, "pick_heat_then_place_in_recep": 23, "pick_two_obj_and_place": 17}


def test_a_smaller_set_of_upstream_games_is_drawn_across_the_task_types():
    """16 of valid_unseen's 134: each task type in its share of the split (largest remainders), its games a seeded
    draw of the type's own, sorted; the sorted list's first 16 would all be look_at_obj_in_light."""
    split = sorted(Path(f"valid_unseen/{t}-Obj{i}-None-Recep-{i}/trial_T{i:04d}/game.tw-pddl")
                   for t, n in UNSEEN_TYPES.items() for i in range(n))
    assert len(split) == 134 and {p.parts[1].split("-")[0] for p in split[:16]} == {"look_at_obj_in_light"}
    drawn = draw_across_types(split, 16, seed=0)
    per_type = {t: sum(p.parts[1].startswith(t) for p in drawn) for t in UNSEEN_TYPES}
    assert per_type == {"look_at_obj_in_light": 2, "pick_and_place_simple": 3, "pick_clean_then_place_in_recep": 4,
                        "pick_cool_then_place_in_recep": 2, "pick_heat_then_place_in_recep": 3,
                        "pick_two_obj_and_place": 2}, per_type
    assert drawn == sorted(drawn) and len(set(drawn)) == 16 and set(drawn) <= set(split)
    assert draw_across_types(split, 16, seed=0) == drawn and draw_across_types(split, 16, seed=1) != drawn
    assert draw_across_types(split, 0, seed=0) == split == draw_across_types(split, 200, seed=0)
    one = draw_across_types(split, 1, seed=0)   # one game: from the type with the largest share
    assert len(one) == 1 and one[0].parts[1].startswith("pick_clean_then_place_in_recep")


def test_real_data_layout_is_discovered_with_the_unseen_split(games, tmp_path):
    root = tmp_path / "alfworld_data" / "json_2.1.1"

    def put(split, folder, game, drop=(), **change):
        dest = root / split / folder / "trial_T0001"
        dest.mkdir(parents=True)
        shutil.copy2(game.parent / "traj_data.json", dest / "traj_data.json")
        data = json.loads(game.read_text())
        data.update(change)
        for key in drop:  # upstream files carry none of our metadata
            data.pop(key)
        (dest / "game.tw-pddl").write_text(json.dumps(data))
        return dest / "game.tw-pddl"

    put("train", "pick_and_place_simple-Mug-None-Cabinet-1", games["pick_and_place_simple"])
    put("train", "pick_heat_then_place_in_recep-Egg-None-Fridge-2", games["pick_heat_then_place_in_recep"],
        drop=("a2rl", "walkthrough"))
    put("train", "pick_and_place_with_movable_recep-Mug-Bowl-Cabinet-3", games["pick_and_place_simple"])
    put("train", "pick_clean_then_place_in_recep-AppleSliced-None-Fridge-4", games["pick_clean_then_place_in_recep"])
    put("train", "pick_cool_then_place_in_recep-Pan-None-Shelf-5", games["pick_cool_then_place_in_recep"],
        solvable=False)
    seen = put("valid_seen", "pick_two_obj_and_place-CD-None-Bed-6", games["pick_two_obj_and_place"])
    put("valid_seen", "pick_and_place_simple-Mug-None-Cabinet-1", games["pick_and_place_simple"])  # a train game's name
    unseen = put("valid_unseen", "look_at_obj_in_light-Book-None-DeskLamp-7", games["look_at_obj_in_light"])
    placeholder = json.loads(games["pick_clean_then_place_in_recep"].read_text())
    placeholder["grammar"] = placeholder["grammar"].replace(placeholder["a2rl"]["task"], "UNKNOWN GOAL")
    put("valid_unseen", "pick_clean_then_place_in_recep-Cloth-None-Toilet-8", games["pick_clean_then_place_in_recep"],
        grammar=placeholder["grammar"])

    assert resolve_data_root(tmp_path / "alfworld_data") == root
    assert resolve_data_root(root / "valid_unseen") == root
    splits = real_splits(tmp_path / "alfworld_data")
    assert [p.parent.parent.name.split("-")[0] for p in splits["train"]] == [
        "pick_and_place_simple", "pick_heat_then_place_in_recep"]
    assert [p.parent.parent.name.split("-")[0] for p in splits["eval"]] == [
        "look_at_obj_in_light", "pick_clean_then_place_in_recep"]
    assert splits["eval"][0] == unseen
    # a capped split: drawn across its task types (seeded), here one of the two
    assert game_sets(tmp_path / "unused", 0, 1, data_path=root)["eval"] == draw_across_types(splits["eval"], 1, 0)
    assert len(draw_across_types(splits["eval"], 1, 0)) == 1 and game_sets(tmp_path / "unused", 0, 0,
                                                                              data_path=root)["eval"] == splits["eval"]
    # the held-out final split: valid_seen, less any game named like a train or eval one, then capped
    assert game_sets(tmp_path / "unused", 0, 0, data_path=root)["final"] == [seen]
    assert game_sets(tmp_path / "unused", 0, 0, data_path=root, n_final=1)["final"] == [seen]
    assert real_splits(root, task_types=["heat"])["train"][0].parent.parent.name.startswith("pick_heat")
    with pytest.raises(FileNotFoundError):
        game_sets(tmp_path / "unused", 1, 1, data_path=tmp_path / "nothing_here")

    # A game still holding the grammar's placeholder is played from a patched copy naming its task.
    patched = ensure_task_in_grammar(splits["eval"][1], tmp_path / "cache")
    assert patched != splits["eval"][1] and "UNKNOWN GOAL" in splits["eval"][1].read_text()
    assert ensure_task_in_grammar(unseen, tmp_path / "cache") == unseen
    with AlfWorldGame(patched) as game:
        obs, info = game.reset()
        assert game.task.startswith(("put a clean", "clean some"))
    ep = expert_steps(splits["train"][1])
    assert ep["expert"] == "search" and ep["task_type"] == "pick_heat_then_place_in_recep"
    # No stored walkthrough: the planner expert asks Fast Downward for one.
    ep = expert_steps(splits["train"][1], mode="planner")
    assert ep["expert"] == "planner"
    assert [s["command"] for s in ep["steps"]] == json.loads(
        games["pick_heat_then_place_in_recep"].read_text())["walkthrough"]
