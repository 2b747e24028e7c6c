"""Text that looks like ALFWorld prompts, for training a small model's tokenizer (no engine, no game files).

``tokenizer_texts()`` renders :func:`envs.alfworld.prompt.format_prompt` over synthetic rooms built from the
generator's tables (receptacles and objects of each room type, the goal library's task sentences) with the engine's
observation phrasings, so a byte-level BPE learns "countertop", "take ... from ..." and the prompt's fixed lines as
single tokens. Deterministic for a given seed. Registered as the tokenizer corpus "alfworld": the base model
"tiny-alfworld" (evaluators.base_models) is the tiny model whose tokenizer also learned it.
"""

from __future__ import annotations

import random

from contracts.registry import register

from .generator import SCENE_OBJECTS, SCENES, TASK_TYPES
from .prompt import SYSTEM_PROMPT, format_prompt

_APPLIANCE_VERB = {"SinkBasin": "clean", "Microwave": "heat", "Fridge": "cool"}
_OPENABLE = {"cabinet", "drawer", "fridge", "microwave", "safe"}


def _listing(names: list[str]) -> str:
    if not names:
        return "nothing"
    items = [f"a {n}" for n in names]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


def _room(rng: random.Random) -> tuple[str, list[str], list[str]]:
    scene = rng.choice(sorted(SCENES))
    receptacles = []
    for rtype, (lo, hi) in sorted(SCENES[scene].items()):
        receptacles += [f"{rtype.lower()} {i + 1}" for i in range(rng.randint(max(lo, 1), hi))]
    objects = [f"{o.lower()} {rng.randint(1, 3)}" for o in rng.sample(SCENE_OBJECTS[scene], 6)]
    return scene, receptacles, objects


def _task(rng: random.Random, objects: list[str], receptacles: list[str]) -> str:
    from alfworld.gen import goal_library

    task_type = rng.choice(TASK_TYPES)
    template = rng.choice(goal_library.gdict[task_type]["templates"])
    return template.format(obj=objects[0].split()[0], recep=rng.choice(receptacles).split()[0], toggle="desklamp",
                           mrecep="")


def _observation(rng: random.Random, here: str, objects: list[str], receptacles: list[str]) -> str:
    seen = _listing(rng.sample(objects, rng.randint(0, 3)))
    kind = rng.randrange(8)
    if kind == 0:
        return ("You are in the middle of a room. Looking quickly around you, you see "
                f"{_listing(list(reversed(receptacles)))}.")
    if kind == 1:
        return f"You arrive at {here}. The {here} is closed."
    if kind == 2:
        return f"You open the {here}. The {here} is open. In it, you see {seen}."
    if kind == 3:
        return f"You arrive at {here}. On the {here}, you see {seen}."
    if kind == 4:
        return f"You pick up the {objects[0]} from the {here}."
    if kind == 5:
        verb = rng.choice(["clean", "heat", "cool"])
        return f"You {verb} the {objects[0]} using the {here}."
    if kind == 6:
        return f"You move the {objects[0]} to the {here}."
    return rng.choice(["Nothing happens.", "You turn on the desklamp 1.", f"You close the {here}.",
                       f"You are carrying: a {objects[0]}."])


def _admissible(rng: random.Random, here: str, objects: list[str], receptacles: list[str]) -> list[str]:
    cmds = [f"go to {r}" for r in receptacles if r != here]
    if here.split()[0] in _OPENABLE:
        cmds.append(rng.choice([f"open {here}", f"close {here}"]))
    held = objects[0]
    for o in objects[1:3]:
        cmds.append(f"take {o} from {here}")
    cmds.append(f"move {held} to {here}")
    for appliance, verb in _APPLIANCE_VERB.items():
        if here.startswith(appliance.lower()):
            cmds.append(f"{verb} {held} with {here}")
    cmds += [f"examine {here}", f"examine {held}", "use desklamp 1", "help", "inventory", "look"]
    return sorted(cmds)


@register("tokenizer_corpus", "alfworld")
def tokenizer_texts(n: int = 1500, seed: int = 0) -> list[str]:
    """``n`` synthetic step prompts with their replies, plus the system prompt."""
    rng = random.Random(f"a2rl-alfworld-corpus:{seed}")
    texts = [SYSTEM_PROMPT] * 20
    for _ in range(n):
        _, receptacles, objects = _room(rng)
        here = rng.choice(receptacles)
        admissible = _admissible(rng, here, objects, receptacles)
        history = [rng.choice(admissible) for _ in range(rng.randint(0, 12))]
        prompt = format_prompt(_task(rng, objects, receptacles), _observation(rng, here, objects, receptacles),
                               admissible, history)
        texts += [prompt, rng.choice(admissible)]
    return texts
