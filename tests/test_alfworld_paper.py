"""ALFWorld's `paper` protocol: the original benchmark's prompts, byte for byte (tests/fixtures/parity/alfworld.json,
made by running the original's own grader on scripted episodes: make_alfworld.py), its decoding and reply handling,
and generated games played end to end by the tiny model under it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytest.importorskip("alfworld")

from contracts.decoding import Decoding  # noqa: E402
from contracts.environment import Episode, Step  # noqa: E402
from contracts.specs import ConfigError  # noqa: E402
from contracts.task import load_task, prompt_file  # noqa: E402
from contracts.task_spec import TaskSpec  # noqa: E402
from envs.alfworld import paper_prompt  # noqa: E402
from envs.alfworld.environment import AlfWorldPaperEnvironment  # noqa: E402
from evaluators import lockstep  # noqa: E402
from tests.test_rollout_service import SMALL_TASK  # noqa: E402

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "parity" / "alfworld.json"
PAPER_TASK = {**SMALL_TASK, "name": "alfworld_paper_t", "protocol": "paper"}


@pytest.fixture(scope="module")
def fixture() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture
def examples_file(fixture, tmp_path) -> Path:
    """A small file in the layout of ReAct's react_prompts.json (the fixture's, which the original loaded too)."""
    path = tmp_path / "react_prompts.json"
    path.write_text(json.dumps(fixture["react_prompts"]))
    return path


class ScriptedEpisode(Episode):
    """The engine's recorded answers to the fixture's replies, in order."""

    def __init__(self, episode: dict):
        self.episode = episode

    def reset(self) -> Step:
        self.answers = list(self.episode["answers"])
        return Step(observation=self.episode["first"], actions=("look",), reward=0.0, done=False)

    def step(self, action: str) -> Step:
        answer = self.answers.pop(0)
        return Step(observation=answer["observation"], actions=("look",), reward=float(answer["won"]),
                    done=answer["done"] or answer["won"], won=answer["won"])


class ScriptedGames(AlfWorldPaperEnvironment):
    """The paper environment (its render and parse) on the fixture's upstream-named games, answered as recorded."""

    def __init__(self, episodes: list[dict], examples: dict):
        paths = [Path(e["gamefile"]) for e in episodes]
        super().__init__({"eval": paths}, {p: "/".join(p.parent.parts[-2:]) for p in paths}, 50, examples,
                         types_from_names=True)
        self.by_name = {"/".join(Path(e["gamefile"]).parent.parts[-2:]): e for e in episodes}

    def open(self, instance):
        return ScriptedEpisode(self.by_name[instance.name])


def test_prompts_actions_and_score_equal_the_originals_on_scripted_episodes(fixture, examples_file):
    episodes = fixture["episodes"]
    env = ScriptedGames(episodes, paper_prompt.load_examples(examples_file))
    decoding = Decoding(max_new_tokens=100, stop=("\n",), repetition_penalty=1.0, chat_template=False)
    sent: dict[str, list[str]] = {}
    prompt_owner = {}
    for e in episodes:
        name = "/".join(Path(e["gamefile"]).parent.parts[-2:])
        prompt_owner[paper_prompt.first_observation(e["first"])] = name

    def generate(prompts):  # the scripted model: each game's next reply, cut at the stop as a backend cuts it
        replies = []
        for prompt in prompts:
            decoding.check_prompt(prompt)
            name = next(n for first, n in prompt_owner.items() if f"\nHere is the task.\n{first}\n>" in prompt)
            sent.setdefault(name, []).append(prompt)
            replies.append(decoding.cut(env.by_name[name]["replies"][len(sent[name]) - 1]))
        return replies

    result = lockstep.evaluate(env, [{"id": str(i), "instance": inst.name, "split": "eval"}
                                     for i, inst in enumerate(env.instances("eval"))], generate)
    equal = 0
    for e, item in zip(episodes, result["items"]):
        name = "/".join(Path(e["gamefile"]).parent.parts[-2:])
        ours = sent[name]
        assert len(ours) == len(e["prompts"]), name
        for prompt, (length, digest) in zip(ours, e["prompts"]):
            assert prompt == e["final_prompt"][:length], name
            assert hashlib.sha256(prompt.encode()).hexdigest() == digest
            equal += 1
        assert item["commands"] == e["actions"] and item["won"] == bool(e["answers"][len(e["actions"]) - 1]["won"])
    assert equal == sum(len(e["prompts"]) for e in episodes) == 96
    assert result["score"] == fixture["score"]


def test_the_examples_follow_the_task_type_as_the_original_picks_them(fixture, examples_file):
    examples = paper_prompt.load_examples(examples_file)
    for task_type, key in [("pick_and_place_simple", "put"), ("pick_clean_then_place_in_recep", "clean"),
                           ("pick_heat_then_place_in_recep", "heat"), ("pick_cool_then_place_in_recep", "cool"),
                           ("look_at_obj_in_light", "examine"), ("pick_two_obj_and_place", "puttwo"),
                           ("pick_two_obj_and_place-CD-None-Safe-323/trial_T1", "puttwo")]:
        assert paper_prompt.prefix(examples, task_type) == (
            paper_prompt.HEADER + examples[f"react_{key}_1"] + examples[f"react_{key}_0"] + "\nHere is the task.\n")
    with pytest.raises(ValueError, match="none of ALFWorld's six"):
        paper_prompt.example_key("slice_and_serve")
    assert paper_prompt.parse("  go to desk 1 \nthink: more") == "go to desk 1"
    assert paper_prompt.parse("think: where is it?") == "think: where is it?"  # sent to the game as it is
    assert paper_prompt.shown_observation("think: x", "Nothing happens.") == "OK."
    assert paper_prompt.shown_observation("go to desk 1", "You arrive at loc 7. On the desk") == "On the desk"


def test_the_prompt_module_is_stdlib_only_and_copied_under_the_paper_protocol():
    import ast

    tree = ast.parse(Path(paper_prompt.__file__).read_text())
    imported = {(n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in (n.names if isinstance(n, ast.Import) else [n])}
    assert imported <= {"__future__", "json", "collections", "pathlib"}, imported
    assert prompt_file(TaskSpec.from_config(PAPER_TASK)) == Path(paper_prompt.__file__)
    assert prompt_file(TaskSpec.from_config(SMALL_TASK)).name == "prompt.py"


def test_bad_examples_and_settings_are_one_clear_error(cache_dir, tmp_path):
    task = load_task({**PAPER_TASK, "react_prompts": str(tmp_path / "missing.json")}, cache_dir)
    with pytest.raises(ConfigError, match="task.react_prompts=<path> to RD-Agent's"):
        task.environment()
    (tmp_path / "bad.json").write_text(json.dumps({"react_put_0": "x"}))
    with pytest.raises(ConfigError, match="lacks react_put_1"):
        load_task({**PAPER_TASK, "react_prompts": str(tmp_path / "bad.json")}, cache_dir).environment()
    with pytest.raises(ValueError, match="plays 50 steps"):
        load_task({**PAPER_TASK, "max_steps": 30}, cache_dir)


def test_generated_games_play_end_to_end_with_the_tiny_model(cache_dir, fixture):
    """The grader's path on CPU: rows rendered in the paper prompt, the tiny model decoding raw text by the
    protocol's Decoding, replies sent to the real engine as they are. The examples come from the cache."""
    from evaluators.backends.transformers_backend import TransformersBackend
    from evaluators.base_models import resolve_base_model
    from evaluators.evaluate import evaluate_loaded

    cached = cache_dir / "alfworld" / paper_prompt.FILE_NAME
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(fixture["react_prompts"]))
    task = load_task(PAPER_TASK, cache_dir)
    assert task.decoding() == Decoding(max_new_tokens=100, stop=("\n",), repetition_penalty=1.0, chat_template=False)
    env = task.environment()
    rows = task.train_rows()
    assert rows and all(isinstance(r["messages"], str) and r["prompt"] == r["messages"] for r in rows)
    first = next(r for r in rows if r["step"] == 0)
    assert first["messages"].startswith(paper_prompt.prefix(task.examples, first["task_type"]))
    assert first["messages"].endswith("\n>") and "Admissible" not in first["messages"]
    later = next(r for r in rows if r["step"] == 2 and r["episode"] == 0)
    assert later["messages"].startswith(first["messages"])
    assert later["messages"].split(paper_prompt.TASK_HEADER)[1].count("\n>") == 3  # the first and two steps

    backend = TransformersBackend(batch_size=8, device="cpu", torch_threads=1)
    seen = []
    real = backend.generate
    backend.generate = lambda loaded, prompts, decoding: seen.append((prompts, decoding)) or real(
        loaded, prompts, decoding)
    loaded = backend.load(resolve_base_model("tiny-alfworld", cache_dir / "models"))
    try:
        result = evaluate_loaded(task, backend, loaded, max_new_tokens=8)  # 8 tokens: the same path, shorter
    finally:
        backend.unload(loaded)
    assert result["n"] == 2 and 0.0 <= result["score"] <= 100.0
    assert all(isinstance(p, str) for prompts, _ in seen for p in prompts)
    assert seen[0][1] == Decoding(max_new_tokens=8, stop=("\n",), repetition_penalty=1.0, chat_template=False)
    item = result["items"][0]
    assert item["steps"] == len(item["commands"]) and item["steps"] <= 50
    # every reply went to the game as it was: no matching to admissible commands, never a newline
    assert all("\n" not in c and c == c.strip() for i in result["items"] for c in i["commands"])
    instance = env.instances("eval")[0]
    assert seen[0][0][0] == paper_prompt.prefix(task.examples, instance.info["task_type"]) + \
        paper_prompt.first_observation(env.open(instance).reset().observation) + "\n>"
