"""Seeded generator of ALFWorld text games (single agent, the packaged ``alfred.pddl`` / ``alfred.twl2``).

A game is the JSON content of a ``game.tw-pddl`` file, the format the upstream ALFWorld games use and that
``textworld``'s PDDL engine loads: ``pddl_domain`` (the packaged domain, verbatim), ``grammar`` (the packaged twl2 with
its ``UNKNOWN GOAL`` placeholder replaced by the task sentence), ``pddl_problem`` (objects, initial facts, goal),
``solvable`` and ``walkthrough`` (the packaged Fast Downward planner's plan, in the command names the engine displays).

Each game is a room (kitchen, living room, bedroom or bathroom) with receptacles (some to open: cabinets, drawers,
fridge, microwave, safe), the task's target objects and distractor objects placed where the package's tables say they
can be, and one of the six upstream task types. ``generate_game`` verifies every game in the real engine: it loads it,
asks the planner for a plan, replays the plan and checks that the game is won (and not won at reset); a candidate that
fails is replaced by the next candidate of the same seed, so a seed always gives the same, solvable game.

Splits: :func:`build_splits` makes the eval set from one seed range and the train set from a disjoint one, and drops
any train game whose problem equals an eval game's. The eval set can be salted (``salt``): without the salt, knowing
the seeds does not rebuild it. :func:`build_final_split` makes the held-out final set from the upper half of the eval
range, salted the same way, dropping any game equal to a train or eval one.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

GENERATOR_VERSION = "a2rl-alfworld-gen-1"

# The six upstream task types (``traj_data.json`` ``task_type`` values).
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
TASK_ALIASES: dict[str, str] = {
    "pick": "pick_and_place_simple",
    "pick_and_place": "pick_and_place_simple",
    "look": "look_at_obj_in_light",
    "examine": "look_at_obj_in_light",
    "examine_in_light": "look_at_obj_in_light",
    "clean": "pick_clean_then_place_in_recep",
    "heat": "pick_heat_then_place_in_recep",
    "cool": "pick_cool_then_place_in_recep",
    "pick_two": "pick_two_obj_and_place",
    "two": "pick_two_obj_and_place",
}
# Offsets of the seed ranges used by build_splits (train seeds stay below EVAL_SEED_BASE). The final split takes the
# upper half of each eval range (an eval set never gets near it: a skipped seed is one duplicate game).
EVAL_SEED_BASE = 1_000_000_000
SPLIT_SEED_SPAN = 10_000_000
FINAL_SEED_OFFSET = SPLIT_SEED_SPAN // 2

# Every otype / rtype the upstream problems declare (the goal formulas refer to e.g. DeskLampType, so all are declared).
OTYPES: tuple[str, ...] = (
    "AlarmClock", "Apple", "BaseballBat", "BasketBall", "Bathtub", "Blinds", "Book", "Boots", "Bowl", "Box", "Bread",
    "ButterKnife", "CD", "Candle", "CellPhone", "Chair", "Cloth", "CreditCard", "Cup", "Curtains", "DeskLamp",
    "DishSponge", "Egg", "FloorLamp", "Footstool", "Fork", "Glassbottle", "HandTowel", "HousePlant", "Kettle",
    "KeyChain", "Knife", "Ladle", "Laptop", "LaundryHamperLid", "Lettuce", "LightSwitch", "Mirror", "Mug", "Newspaper",
    "Painting", "Pan", "PaperTowel", "PaperTowelRoll", "Pen", "Pencil", "PepperShaker", "Pillow", "Plate", "Plunger",
    "Poster", "Pot", "Potato", "RemoteControl", "SaltShaker", "ScrubBrush", "ShowerDoor", "ShowerGlass", "Sink",
    "SoapBar", "SoapBottle", "Spatula", "Spoon", "SprayBottle", "Statue", "StoveKnob", "TeddyBear", "Television",
    "TennisRacket", "TissueBox", "ToiletPaper", "ToiletPaperRoll", "Tomato", "Towel", "Vase", "Watch", "WateringCan",
    "Window", "WineBottle",
)
RTYPES: tuple[str, ...] = (
    "ArmChair", "BathtubBasin", "Bed", "Cabinet", "Cart", "CoffeeMachine", "CoffeeTable", "CounterTop", "Desk",
    "DiningTable", "Drawer", "Dresser", "Fridge", "GarbageCan", "HandTowelHolder", "LaundryHamper", "Microwave",
    "Ottoman", "PaintingHanger", "Safe", "Shelf", "SideTable", "SinkBasin", "Sofa", "StoveBurner", "TVStand",
    "Toaster", "Toilet", "ToiletPaperHanger", "TowelHolder",
)
OPENABLE = {"Cabinet", "Drawer", "Fridge", "Microwave", "Safe", "Box"}  # alfworld.gen.constants.OPENABLE_CLASS_LIST
MOVABLE_RECEPTACLE_OBJECTS = {"Bowl", "Box", "Cup", "Mug", "Plate", "Pan", "Pot"}
LAMPS = ("DeskLamp",)
LAMP_SURFACES = ("Desk", "SideTable", "Dresser")

# Receptacle types of each room: type -> (min count, max count).
SCENES: dict[str, dict[str, tuple[int, int]]] = {
    "Kitchen": {
        "CounterTop": (1, 3), "Cabinet": (3, 8), "Drawer": (1, 5), "Fridge": (1, 1), "Microwave": (1, 1),
        "SinkBasin": (1, 1), "StoveBurner": (2, 4), "CoffeeMachine": (1, 1), "Toaster": (0, 1),
        "GarbageCan": (1, 1), "DiningTable": (0, 1), "Shelf": (0, 2), "SideTable": (0, 1),
    },
    "LivingRoom": {
        "Sofa": (1, 1), "ArmChair": (0, 2), "CoffeeTable": (1, 1), "SideTable": (1, 2), "Drawer": (0, 4),
        "Cabinet": (0, 3), "Shelf": (0, 3), "TVStand": (0, 1), "Dresser": (0, 1), "GarbageCan": (1, 1),
        "DiningTable": (0, 1), "Ottoman": (0, 1), "Safe": (0, 1),
    },
    "Bedroom": {
        "Bed": (1, 1), "Desk": (0, 1), "Dresser": (0, 1), "Drawer": (2, 5), "SideTable": (1, 2), "Shelf": (0, 3),
        "GarbageCan": (1, 1), "Safe": (0, 1), "LaundryHamper": (0, 1), "ArmChair": (0, 1), "Cabinet": (0, 2),
    },
    "Bathroom": {
        "Toilet": (1, 1), "SinkBasin": (1, 2), "BathtubBasin": (0, 1), "CounterTop": (1, 1), "Cabinet": (1, 4),
        "Drawer": (0, 3), "Shelf": (0, 2), "TowelHolder": (0, 1), "HandTowelHolder": (0, 1),
        "ToiletPaperHanger": (1, 1), "GarbageCan": (1, 1), "Dresser": (0, 1), "Cart": (0, 1),
    },
}
# Small objects found in each room (targets and distractors are drawn from these).
SCENE_OBJECTS: dict[str, tuple[str, ...]] = {
    "Kitchen": (
        "Apple", "Bread", "Egg", "Lettuce", "Potato", "Tomato", "Mug", "Cup", "Bowl", "Plate", "Pan", "Pot", "Fork",
        "Knife", "ButterKnife", "Spoon", "Spatula", "Ladle", "Kettle", "DishSponge", "SaltShaker", "PepperShaker",
        "SoapBottle", "WineBottle", "Glassbottle", "PaperTowel", "CreditCard", "CellPhone", "Vase", "Statue",
    ),
    "LivingRoom": (
        "RemoteControl", "KeyChain", "CreditCard", "Laptop", "Newspaper", "Pillow", "Box", "Vase", "Statue", "Watch",
        "Book", "CellPhone", "Plate", "Bowl", "TissueBox", "WateringCan", "Candle", "Pen", "Pencil", "CD",
    ),
    "Bedroom": (
        "Book", "CD", "CellPhone", "CreditCard", "KeyChain", "Laptop", "Pen", "Pencil", "Pillow", "AlarmClock",
        "BaseballBat", "BasketBall", "TennisRacket", "Mug", "Bowl", "Watch", "Cloth", "Box", "Vase", "Statue",
        "TissueBox",
    ),
    "Bathroom": (
        "SoapBar", "SoapBottle", "Towel", "HandTowel", "ToiletPaper", "SprayBottle", "Candle", "Cloth", "TissueBox",
        "DishSponge", "Plunger", "PaperTowel",
    ),
}
# Which rooms each task type happens in (alfworld.gen.constants.GOALS_VALID).
TASK_SCENES: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
    "pick_two_obj_and_place": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
    "look_at_obj_in_light": ("LivingRoom", "Bedroom"),
    "pick_clean_then_place_in_recep": ("Kitchen", "Bathroom"),
    "pick_heat_then_place_in_recep": ("Kitchen",),
    "pick_cool_then_place_in_recep": ("Kitchen",),
}
# The appliance each transform task needs, and the object property it requires.
TRANSFORMS: dict[str, tuple[str, str]] = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable"),
    "pick_heat_then_place_in_recep": ("Microwave", "Heatable"),
    "pick_cool_then_place_in_recep": ("Fridge", "Coolable"),
}


def _tables() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    from alfworld.gen import constants

    can_contain = {r: set(objs) for r, objs in constants.VAL_RECEPTACLE_OBJECTS.items()}
    actions = {k: set(v) for k, v in constants.VAL_ACTION_OBJECTS.items()}
    return can_contain, actions


def _goal_library() -> dict[str, Any]:
    from alfworld.gen import goal_library

    return goal_library.gdict


def packaged_logic() -> tuple[str, str]:
    """The packaged ALFWorld PDDL domain and twl2 grammar (with its ``UNKNOWN GOAL`` placeholder)."""
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    return Path(ALFRED_PDDL_PATH).read_text(), Path(ALFRED_TWL2_PATH).read_text()


def normalize_task_type(task_type: str) -> str:
    """Accept the upstream names and short aliases (pick, look/examine, clean, heat, cool, pick_two)."""
    t = task_type.strip().lower()
    t = TASK_ALIASES.get(t, t)
    if t not in TASK_TYPES:
        raise ValueError(f"unknown ALFWorld task type {task_type!r}; "
                         f"expected one of {TASK_TYPES} or {sorted(TASK_ALIASES)}")
    return t


def _receptacle_id(rtype: str, n: int) -> str:
    # Sinks and bathtubs are named like upstream (the demangler displays them as "sinkbasin N" / "bathtubbasin N").
    if rtype == "SinkBasin":
        return f"Sink_bar_{n}_bar_SinkBasin"
    if rtype == "BathtubBasin":
        return f"Bathtub_bar_{n}_bar_BathtubBasin"
    return f"{rtype}_bar_{n}"


class _Candidate(Exception):
    """This candidate layout cannot host the task; try the next one."""


def _sample_layout(rng: random.Random, task_type: str, max_per_type: int | None = None,
                   max_receptacles: int | None = None) -> dict[str, Any]:
    can_contain, actions = _tables()
    scene = rng.choice(TASK_SCENES[task_type])
    cap = int(max_per_type) if max_per_type else None
    counts = {rt: rng.randint(min(lo, cap), min(hi, cap)) if cap else rng.randint(lo, hi)
              for rt, (lo, hi) in SCENES[scene].items()}
    while max_receptacles and sum(counts.values()) > max_receptacles:  # drop receptacles at random down to the cap
        counts[rng.choice(sorted(rt for rt, n in counts.items() if n))] -= 1
    if task_type == "look_at_obj_in_light" and not any(counts.get(s, 0) for s in LAMP_SURFACES):
        if max_receptacles and sum(counts.values()) >= max_receptacles:
            raise _Candidate("no lamp surface")
        counts["SideTable"] = 1
    receptacles: list[tuple[str, str]] = []  # (id, rtype)
    for rtype in sorted(counts):
        receptacles += [(_receptacle_id(rtype, i + 1), rtype) for i in range(counts[rtype])]
    rtypes_present = {rt for _, rt in receptacles}
    pool = [o for o in SCENE_OBJECTS[scene] if any(o in can_contain.get(rt, ()) for rt in rtypes_present)]

    def homes(otype: str, exclude: set[str] = frozenset()) -> list[tuple[str, str]]:
        return [(rid, rt) for rid, rt in receptacles if otype in can_contain.get(rt, ()) and rt not in exclude]

    params = {"object_target": "", "parent_target": "", "toggle_target": "", "mrecep_target": "",
              "object_sliced": False}
    # Target object type and goal receptacle type.
    if task_type in TRANSFORMS:
        appliance, prop = TRANSFORMS[task_type]
        if appliance not in rtypes_present:
            raise _Candidate("no appliance")
        objs = [o for o in pool if o in actions[prop]]
    else:
        appliance = None
        objs = list(pool)
    if not objs:
        raise _Candidate("no target object")
    obj = rng.choice(objs)
    n_targets = rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)
    if task_type == "look_at_obj_in_light":
        lamp = rng.choice(LAMPS)
        params["toggle_target"] = lamp
        recep = None
        target_exclude: set[str] = set()
    else:
        receps = sorted(rt for rt in rtypes_present if obj in can_contain.get(rt, ()) and rt != appliance)
        # The target must start somewhere else than every receptacle of the goal's type.
        receps = [rt for rt in receps if homes(obj, exclude={rt})]
        if not receps:
            raise _Candidate("no goal receptacle")
        recep = rng.choice(receps)
        params["parent_target"] = recep
        target_exclude = {recep}
    params["object_target"] = obj

    placed: list[tuple[str, str, str]] = []  # (object id, otype, receptacle id)
    counter: dict[str, int] = {}

    def place(otype: str, where: list[tuple[str, str]]) -> None:
        counter[otype] = counter.get(otype, 0) + 1
        rid, _ = rng.choice(where)
        placed.append((f"{otype}_bar_{counter[otype]}", otype, rid))

    for _ in range(n_targets):
        place(obj, homes(obj, exclude=target_exclude))
    if task_type == "look_at_obj_in_light":
        surfaces = [(rid, rt) for rid, rt in receptacles if rt in LAMP_SURFACES]
        place(params["toggle_target"], surfaces)
    # Distractors: other object types (a goal receptacle never starts holding the target type).
    others = [o for o in pool if o != obj]
    n_distractors = min(len(others), rng.randint(6, 12))
    for otype in rng.sample(others, n_distractors):
        for _ in range(rng.randint(1, 2)):
            place(otype, homes(otype))
    return {"scene": scene, "receptacles": receptacles, "objects": placed, "params": params,
            "task_type": task_type}


def _task_sentence(rng: random.Random, task_type: str, params: dict[str, Any]) -> str:
    template = rng.choice(_goal_library()[task_type]["templates"])
    return template.format(obj=params["object_target"].lower(), recep=params["parent_target"].lower(),
                           toggle=params["toggle_target"].lower(), mrecep=params["mrecep_target"].lower())


def _goal_pddl(task_type: str, params: dict[str, Any]) -> str:
    goal = _goal_library()[task_type]["pddl"]
    goal = goal.format(obj=params["object_target"], recep=params["parent_target"], toggle=params["toggle_target"],
                       mrecep=params["mrecep_target"])
    return goal.replace("#", "-")


def _problem_pddl(layout: dict[str, Any]) -> str:
    can_contain, actions = _tables()
    receptacles, objects = layout["receptacles"], layout["objects"]
    loc = {rid: f"loc_bar_{i + 1}" for i, (rid, _) in enumerate(receptacles)}
    lines = ["(define (problem plan_example)", "(:domain alfred)", "(:objects", "  agent1 - agent"]
    lines += [f"  {t}Type - otype" for t in OTYPES]
    lines += [f"  {t}Type - rtype" for t in RTYPES]
    lines += [f"  {rid} - receptacle" for rid, _ in receptacles]
    lines += [f"  {oid} - object" for oid, _, _ in objects]
    lines += [f"  {loc[rid]} - location" for rid, _ in receptacles]
    lines += ["  loc_bar_0 - location", ")", "(:init", "  (atLocation agent1 loc_bar_0)"]
    for rid, rt in receptacles:
        lines += [f"  (receptacleType {rid} {rt}Type)", f"  (receptacleAtLocation {rid} {loc[rid]})"]
        if rt in OPENABLE:
            lines.append(f"  (openable {rid})")
    otypes_present = sorted({ot for _, ot, _ in objects})
    for rt in sorted({rt for _, rt in receptacles}):
        for ot in otypes_present:
            if ot in can_contain.get(rt, ()):
                lines.append(f"  (canContain {rt}Type {ot}Type)")
    for oid, ot, rid in objects:
        lines += [f"  (objectType {oid} {ot}Type)", f"  (inReceptacle {oid} {rid})",
                  f"  (objectAtLocation {oid} {loc[rid]})"]
        if ot in LAMPS:
            lines.append(f"  (toggleable {oid})")
            continue
        lines.append(f"  (pickupable {oid})")
        if ot in MOVABLE_RECEPTACLE_OBJECTS:
            lines.append(f"  (isReceptacleObject {oid})")
        for prop, pred in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable"),
                           ("Sliceable", "sliceable")):
            if ot in actions[prop]:
                lines.append(f"  ({pred} {oid})")
    lines.append(")")
    return "\n".join(lines) + "\n" + _goal_pddl(layout["task_type"], layout["params"])


def problem_fingerprint(game: dict[str, Any]) -> str:
    """Identity of a game for de-duplication: the hash of its PDDL problem (objects, placements, goal)."""
    text = re.sub(r"\s+", " ", game["pddl_problem"]).strip()
    return hashlib.sha256(text.encode()).hexdigest()


def _make_env(infos):
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    from .engine import enable_grammar_cache

    enable_grammar_cache()

    env = PddlEnv(infos)
    for wrapper in (AlfredDemangler(), AlfredInfos):
        env = wrapper(env)
    return env


def verify_game(game: dict[str, Any]) -> list[str]:
    """Load ``game`` (a tw-pddl dict) in the engine with the ALFWorld wrappers, plan, replay the plan.

    Returns the plan (engine command names). Raises ``ValueError`` if the game does not load, is won at reset, has no
    plan, or the plan does not win it.
    """
    import textworld

    env = _make_env(textworld.EnvInfos(won=True, admissible_commands=True, extras=["walkthrough"]))
    try:
        data = dict(game)
        data["walkthrough"] = None  # force the planner
        env.load(data)
        state = env.reset()
    except Exception as e:  # an unreachable goal is a KeyError('val1') at load
        raise ValueError(f"game does not load: {e!r}") from e
    if state["won"]:
        raise ValueError("game is won at reset")
    plan = list(state.get("extra.walkthrough") or [])
    if not plan:
        raise ValueError("planner found no plan")
    done = False
    for cmd in plan:
        if cmd not in state["admissible_commands"]:
            raise ValueError(f"plan command {cmd!r} is not admissible")
        state, _, done = env.step(cmd)
    if not state["won"]:
        raise ValueError("plan does not win the game")
    return plan


def generate_game(seed: int, task_type: str | None = None, *, salt: str = "", max_per_type: int | None = None,
                  max_receptacles: int | None = None, max_attempts: int = 50) -> dict:
    """One solvable ALFWorld game, fully determined by (seed, task_type, salt, max_per_type, max_receptacles).

    Smaller rooms, shorter searches: ``max_per_type`` caps how many receptacles of each type a room has (1: one
    cabinet, one drawer, ...), ``max_receptacles`` how many it has in all (a room that then lacks what the task needs
    is redrawn). None keeps the upstream ranges (``SCENES``).

    Returns the ``game.tw-pddl`` JSON content (``pddl_domain``, ``grammar``, ``pddl_problem``, ``solvable``,
    ``walkthrough``) plus ``traj_data`` (what :func:`write_game` writes to ``traj_data.json``: the upstream
    ``task_type`` / ``pddl_params`` keys) and ``a2rl`` metadata (seed, task sentence, scene, fingerprint).
    """
    for knob, value in (("max_per_type", max_per_type), ("max_receptacles", max_receptacles)):
        if value is not None and int(value) < 1:
            raise ValueError(f"{knob}={value} must be >= 1 (or None: the upstream room sizes)")
    base = f"{GENERATOR_VERSION}:{salt}:{int(seed)}"
    if task_type is None:
        task_type = random.Random(base + ":task").choice(TASK_TYPES)
    task_type = normalize_task_type(task_type)
    domain, grammar = packaged_logic()
    errors = []
    for attempt in range(max_attempts):
        rng = random.Random(f"{base}:{task_type}:{attempt}")
        try:
            layout = _sample_layout(rng, task_type, max_per_type, max_receptacles)
        except _Candidate as e:
            errors.append(str(e))
            continue
        sentence = _task_sentence(rng, task_type, layout["params"])
        game = {
            "pddl_domain": domain,
            "grammar": grammar.replace("UNKNOWN GOAL", sentence),
            "pddl_problem": _problem_pddl(layout),
            "solvable": True,
            "walkthrough": None,
        }
        try:
            game["walkthrough"] = verify_game(game)
        except ValueError as e:
            errors.append(str(e))
            continue
        fp = problem_fingerprint(game)
        game["traj_data"] = {
            "task_type": task_type,
            "task_id": f"a2rl_{fp[:12]}",
            "pddl_params": layout["params"],
            "scene": {"scene_type": layout["scene"], "a2rl_seed": int(seed)},
            "turk_annotations": {"anns": [{"task_desc": sentence, "high_descs": [], "votes": []}]},
        }
        game["a2rl"] = {"generator": GENERATOR_VERSION, "seed": int(seed), "attempt": attempt,
                        "task_type": task_type, "task": sentence, "scene": layout["scene"], "fingerprint": fp,
                        "n_receptacles": len(layout["receptacles"]), "n_objects": len(layout["objects"])}
        return game
    raise RuntimeError(f"no solvable {task_type} game for seed {seed} in {max_attempts} attempts: {errors[-3:]}")


def write_game(game: dict, game_dir: str | Path) -> Path:
    """Write ``game.tw-pddl`` and ``traj_data.json`` into ``game_dir``; returns the game file's path."""
    game_dir = Path(game_dir)
    game_dir.mkdir(parents=True, exist_ok=True)
    data = {k: v for k, v in game.items() if k != "traj_data"}
    path = game_dir / "game.tw-pddl"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)
    (game_dir / "traj_data.json").write_text(json.dumps(game.get("traj_data", {}), indent=1))
    return path


def _task_cycle(task_types: Sequence[str] | None) -> list[str]:
    types = [normalize_task_type(t) for t in (task_types or TASK_TYPES)]
    if not types:
        raise ValueError("task_types is empty")
    return types


def _generate_one(args: tuple[int, str, str, dict]) -> dict:
    seed, task_type, salt, room = args
    return generate_game(seed, task_type, salt=salt, **room)


def generate_split(out_dir: str | Path, n_games: int, seed: int, task_types: Sequence[str] | None = None, *,
                   salt: str = "", exclude: Iterable[str] = (), seed_limit: int | None = None,
                   max_per_type: int | None = None, max_receptacles: int | None = None,
                   workers: int = 1) -> list[Path]:
    """Generate ``n_games`` games under ``out_dir`` (one folder each, ``game.tw-pddl`` + ``traj_data.json``).

    Game seeds are ``seed, seed + 1, ...``; task types cycle through ``task_types`` (default: all six) so the split is
    balanced. A game whose problem fingerprint is in ``exclude`` or already in this split is skipped (the next seed
    is used, with the same task type). ``seed_limit`` (exclusive) bounds the seed range. ``max_per_type``,
    ``max_receptacles``: see :func:`generate_game`. ``workers`` > 1 generates
    in that many processes (same result). Writes ``manifest.json`` (seeds, task types, fingerprints, walkthroughs)
    and returns the game file paths, in order.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    types = _task_cycle(task_types)
    excluded = set(exclude)
    seen: set[str] = set()
    paths: list[Path] = []
    entries = []
    s = int(seed)
    room = {"max_per_type": max_per_type, "max_receptacles": max_receptacles}
    pool = None
    if workers > 1:
        import concurrent.futures
        import multiprocessing

        pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        while len(paths) < n_games:
            # Candidates for the next games (speculatively in parallel; a skipped one shifts the rest by one seed).
            want = n_games - len(paths)
            batch = max(1, min(want, 4 * workers)) if pool else 1
            jobs = []
            for k in range(batch):
                if seed_limit is not None and s + k >= seed_limit:
                    break
                jobs.append((s + k, types[(len(paths) + k) % len(types)], salt, room))
            if not jobs:
                raise RuntimeError(f"seed range [{seed}, {seed_limit}) exhausted after {len(paths)} games")
            games = list(pool.map(_generate_one, jobs)) if pool else [_generate_one(jobs[0])]
            for (gs, task_type, *_), game in zip(jobs, games):
                s = gs + 1
                fp = game["a2rl"]["fingerprint"]
                if fp in excluded or fp in seen:
                    break  # the following candidates were made for the wrong task-type slot: redo them
                seen.add(fp)
                name = f"{len(paths):05d}-{task_type}-s{gs}"
                paths.append(write_game(game, out_dir / name))
                entries.append({"dir": name, "seed": gs, "task_type": task_type, "task": game["a2rl"]["task"],
                                "fingerprint": fp, "walkthrough": game["walkthrough"]})
    finally:
        if pool:
            pool.shutdown()
    manifest = {"generator": GENERATOR_VERSION, "n_games": n_games, "first_seed": int(seed), "salted": bool(salt),
                "task_types": types, **room, "games": entries}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return paths


def split_fingerprints(split_dir: str | Path) -> set[str]:
    """Fingerprints of the games in a generated split folder (from every game file under it)."""
    return {problem_fingerprint(json.loads(p.read_text())) for p in sorted(Path(split_dir).rglob("game.tw-pddl"))}


def build_splits(out_dir: str | Path, n_train: int, n_eval: int, seed: int = 0,
                 task_types: Sequence[str] | None = None, *, eval_salt: str = "",
                 eval_dir: str | Path | None = None, max_per_type: int | None = None,
                 max_receptacles: int | None = None, workers: int = 1) -> dict[str, list[Path]]:
    """Disjoint train and eval splits.

    Eval games come from seeds ``EVAL_SEED_BASE + seed * SPLIT_SEED_SPAN + i`` (optionally salted with
    ``eval_salt``), train games from ``seed * SPLIT_SEED_SPAN + i`` (always below ``EVAL_SEED_BASE``); any train
    game whose problem equals an eval game's is skipped. ``eval_dir`` puts the eval set elsewhere (the grading side);
    by default it is ``out_dir/eval`` and the train set ``out_dir/train``.
    """
    if not 0 <= seed < EVAL_SEED_BASE // SPLIT_SEED_SPAN:
        raise ValueError("seed out of range")
    out_dir = Path(out_dir)
    eval_dir = Path(eval_dir) if eval_dir is not None else out_dir / "eval"
    train_first = seed * SPLIT_SEED_SPAN
    eval_first = EVAL_SEED_BASE + seed * SPLIT_SEED_SPAN
    eval_paths = generate_split(eval_dir, n_eval, eval_first, task_types, salt=eval_salt,
                                seed_limit=eval_first + FINAL_SEED_OFFSET, max_per_type=max_per_type,
                                max_receptacles=max_receptacles, workers=workers)
    eval_fps = split_fingerprints(eval_dir)
    train_paths = generate_split(out_dir / "train", n_train, train_first, task_types, exclude=eval_fps,
                                 seed_limit=train_first + SPLIT_SEED_SPAN, max_per_type=max_per_type,
                                 max_receptacles=max_receptacles, workers=workers)
    return {"train": train_paths, "eval": eval_paths}


def build_final_split(out_dir: str | Path, n_final: int, seed: int = 0, task_types: Sequence[str] | None = None, *,
                      eval_salt: str = "", exclude: Iterable[str] = (), max_per_type: int | None = None,
                      max_receptacles: int | None = None, workers: int = 1) -> list[Path]:
    """The held-out final split under ``out_dir``: ``n_final`` games from seeds ``EVAL_SEED_BASE + seed *
    SPLIT_SEED_SPAN + FINAL_SEED_OFFSET + i`` (the upper half of the eval range, so the eval set stays as it was),
    salted with ``eval_salt`` like the eval set; any game whose problem is in ``exclude`` (the train and eval
    fingerprints) is skipped."""
    if not 0 <= seed < EVAL_SEED_BASE // SPLIT_SEED_SPAN:
        raise ValueError("seed out of range")
    first = EVAL_SEED_BASE + seed * SPLIT_SEED_SPAN + FINAL_SEED_OFFSET
    return generate_split(out_dir, n_final, first, task_types, salt=eval_salt, exclude=exclude,
                          seed_limit=first + SPLIT_SEED_SPAN - FINAL_SEED_OFFSET, max_per_type=max_per_type,
                          max_receptacles=max_receptacles, workers=workers)
