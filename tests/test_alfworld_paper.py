"""ALFWorld's `paper` protocol: the original benchmark's prompts, byte for byte, as it builds them and as it sends them
to vLLM once cut to fit its context (tests/fixtures/parity/alfworld.json, made by running the released original's
own grader, rdagent 1.0.0's eval.py, on scripted episodes: make_alfworld.py), its decoding and reply handling, and
generated games played end to end by the tiny model under it."""
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
from evaluators.backends.transformers_backend import prompt_ids  # noqa: E402
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


@pytest.fixture(scope="module")
def tokenizer(fixture, tmp_path_factory):
    """The fixture's tokenizer (a small byte-level BPE that adds a BOS), loaded as a backend loads a submission's."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("alfworld-tokenizer")
    for name, text in fixture["tokenizer"].items():
        (folder / name).write_text(text)
    return AutoTokenizer.from_pretrained(folder)


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


def digest(text: str) -> list:
    return [len(text), hashlib.sha256(text.encode()).hexdigest()]


def test_prompts_cuts_actions_and_score_equal_the_originals_on_scripted_episodes(fixture, examples_file, tokenizer,
                                                                                  cache_dir):
    """a2rl's grader loop (lockstep, render, parse) builds the original's prompts; the task's decoding cuts them as
    1.0.0's eval.py does before vLLM sees them, with the same tokenizer; the backends' prompt_ids feeds the model the
    cut text tokenised again, as vLLM tokenises the text it is given."""
    assert fixture["made_from"]["wheel_sha256"] == "8b92797b282910e14831fff8f48f3b67032c4d9aca349e3e90f82ccbfebc0e52"
    assert fixture["llm_kwargs"]["max_model_len"] == paper_prompt.MAX_MODEL_LEN
    episodes = fixture["episodes"]
    env = ScriptedGames(episodes, paper_prompt.load_examples(examples_file))
    decoding = load_task(PAPER_TASK, cache_dir).decoding()
    assert decoding.fit is paper_prompt.fit
    built: dict[str, list[str]] = {}
    sent: dict[str, list[str]] = {}
    prompt_owner = {}
    for e in episodes:
        name = "/".join(Path(e["gamefile"]).parent.parts[-2:])
        prompt_owner[paper_prompt.first_observation(e["first"])] = name

    def generate(prompts):  # the scripted model: each game's next reply, cut at the stop as a backend cuts it
        replies = []
        for prompt in prompts:
            ids = prompt_ids(tokenizer, prompt, decoding)  # what either backend feeds the model
            text = decoding.fit(prompt, tokenizer)
            assert ids == tokenizer.encode(text)  # what vLLM feeds the model for the text eval.py gives it
            name = next(n for first, n in prompt_owner.items() if f"\nHere is the task.\n{first}\n>" in prompt)
            built.setdefault(name, []).append(prompt)
            sent.setdefault(name, []).append(text)
            replies.append(decoding.cut(env.by_name[name]["replies"][len(built[name]) - 1]))
        return replies

    result = lockstep.evaluate(env, [{"id": str(i), "instance": inst.name, "split": "eval"}
                                     for i, inst in enumerate(env.instances("eval"))], generate)
    equal = cut = 0
    for e, item in zip(episodes, result["items"]):
        name = "/".join(Path(e["gamefile"]).parent.parts[-2:])
        assert len(built[name]) == len(e["prompts"]) == len(e["sent"]), name
        for k, (prompt, text) in enumerate(zip(built[name], sent[name])):
            length, _ = e["prompts"][k]
            assert prompt == e["final_prompt"][:length], name
            assert digest(prompt) == e["prompts"][k]
            assert len(tokenizer.encode(prompt)) == e["tokens"][k]
            assert digest(text) == e["sent"][k], (name, k, text[:60], e["cut"].get(str(k)))
            if text != prompt:
                assert text.startswith(e["cut"][str(k)]), (name, k)
                cut += 1
            equal += 1
        assert item["commands"] == e["actions"] and item["won"] == bool(e["answers"][len(e["actions"]) - 1]["won"])
    assert equal == sum(len(e["prompts"]) for e in episodes) == 202
    # the original cut 29 prompts, 6 of them inside a character (its bytes decode to U+FFFD); a2rl the same ones
    heads = [h for e in episodes for h in e["cut"].values()]
    assert cut == len(heads) == 29 and sum(h.startswith("\ufffd") for h in heads) == 6
    assert result["score"] == fixture["score"]


def test_a_prompt_is_cut_only_when_it_leaves_no_room_for_the_reply(tokenizer):
    """fit counts as the original does (encode, with the BOS), keeps the prompt itself while prompt + 100 tokens fit
    in 4,096, and otherwise keeps the text of the last 3,995 tokens."""
    room = paper_prompt.MAX_MODEL_LEN - paper_prompt.MAX_NEW_TOKENS
    step = " go to drawer 1\nThe drawer 1 is closed.\n>"
    prompt = paper_prompt.HEADER
    while len(tokenizer.encode(prompt + step)) <= room:
        prompt += step
    while len(tokenizer.encode(prompt)) < room:
        prompt += "|"  # one token each (the tokenizer learned no merge of it): the prompt reaches room exactly
    assert len(tokenizer.encode(prompt)) == room
    assert paper_prompt.fit(prompt, tokenizer) is prompt  # the longest that fits: sent as it is
    for longer in (prompt + "|", prompt + step):  # one token more (the BOS counts), and a step more
        text = paper_prompt.fit(longer, tokenizer)
        assert text == tokenizer.decode(tokenizer.encode(longer)[-(room - 1):])
        assert longer.endswith(text) and not text.startswith(paper_prompt.HEADER)  # the header went first
    assert tokenizer.encode(text)[0] == tokenizer.bos_token_id  # tokenised again, the BOS is back
    with pytest.raises(ValueError, match="raw text"):
        Decoding(max_new_tokens=100, fit=paper_prompt.fit)


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


def test_generated_games_play_end_to_end_with_the_tiny_model(cache_dir, examples_file):
    """The grader's path on CPU: rows rendered in the paper prompt, the tiny model decoding raw text by the
    protocol's Decoding, replies sent to the real engine as they are. The examples are the fixture's small file."""
    from evaluators.backends.transformers_backend import TransformersBackend
    from evaluators.base_models import resolve_base_model
    from evaluators.evaluate import evaluate_loaded

    task = load_task({**PAPER_TASK, "react_prompts": str(examples_file)}, cache_dir)
    assert task.decoding() == Decoding(max_new_tokens=100, stop=("\n",), repetition_penalty=1.0, chat_template=False,
                                       fit=paper_prompt.fit)
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
    assert seen[0][1] == Decoding(max_new_tokens=8, stop=("\n",), repetition_penalty=1.0, chat_template=False,
                                  fit=paper_prompt.fit)
    item = result["items"][0]
    assert item["steps"] == len(item["commands"]) and item["steps"] <= 50
    # every reply went to the game as it was: no matching to admissible commands, never a newline
    assert all("\n" not in c and c == c.strip() for i in result["items"] for c in i["commands"])
    instance = env.instances("eval")[0]
    assert seen[0][0][0] == paper_prompt.prefix(task.examples, instance.info["task_type"]) + \
        paper_prompt.first_observation(env.open(instance).reset().observation) + "\n>"
