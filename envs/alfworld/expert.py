"""Expert trajectories for ALFWorld games, as chat data for SFT warm-up.

Two experts, both checked in the real engine (a trajectory is kept only if it wins the game):

- ``"planner"``: the game's walkthrough (the packaged Fast Downward planner's plan). Shortest, but omniscient: it
  walks straight to the closed cabinet that hides the target, which a model cannot know from its prompt.
- ``"search"`` (default): a scripted agent that only uses what its prompt shows (the task, its previous commands, the
  current observation and the admissible commands): it searches the receptacles that can hold the target in a fixed
  order (opening closed ones), takes the target when it sees it, uses the sink / microwave / fridge, finds the lamp,
  and puts the object in the first receptacle of the goal's type. Learnable behaviour for an unseen game. When it
  fails on a game (it should not on generated games), the planner's walkthrough is used instead.

Each step becomes one Demonstration (contracts.environment): the state the expert acted in and its command; the
task renders it into a train row with the environment's own prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from contracts.environment import Demonstration, Step

from .engine import MAX_STEPS, AlfWorldGame

_TAKE_RE = re.compile(r"^take (.+?) from (.+)$")
_MOVE_RE = re.compile(r"^move (.+?) to (.+)$")
_NUM_RE = re.compile(r"^(.*?)\s*(\d+)$")
LAMP_SURFACES = ("desk", "sidetable", "dresser")
TRANSFORM_OF = {
    "pick_clean_then_place_in_recep": ("clean", "sinkbasin"),
    "pick_heat_then_place_in_recep": ("heat", "microwave"),
    "pick_cool_then_place_in_recep": ("cool", "fridge"),
}


def _natural_key(name: str) -> tuple[str, int]:
    m = _NUM_RE.match(name)
    return (m.group(1), int(m.group(2))) if m else (name, 0)


def _rtype(name: str) -> str:
    return _natural_key(name)[0]


_ROOM_RE = re.compile(r"Looking quickly around you, you see (.*?)\.(?:\s|$)", re.S)


def receptacles_in_room(obs: str) -> set[str]:
    """Receptacle names the initial observation lists ("... you see a cabinet 2, a fridge 1, and a sinkbasin 1.")."""
    m = _ROOM_RE.search(obs or "")
    if not m:
        return set()
    out = set()
    for part in re.split(r",\s*(?:and\s+)?|\s+and\s+", m.group(1)):
        part = re.sub(r"^(?:a|an|the)\s+", "", part.strip())
        if _NUM_RE.match(part):
            out.add(part)
    return out


def _can_contain() -> dict[str, set[str]]:
    from alfworld.gen import constants

    return {r.lower(): {o.lower() for o in objs} for r, objs in constants.VAL_RECEPTACLE_OBJECTS.items()}


class SearchExpert:
    """A non-omniscient scripted policy for the six upstream task types.

    ``act(obs, admissible) -> command``; call ``reset(task_type, pddl_params)`` first (the ``traj_data.json`` keys).
    Its decisions depend only on what the model's prompt holds.
    """

    def __init__(self) -> None:
        self._contain = _can_contain()

    def reset(self, task_type: str, pddl_params: dict[str, Any]) -> None:
        self.task_type = task_type
        self.obj = str(pddl_params.get("object_target", "")).lower()
        self.recep = str(pddl_params.get("parent_target", "")).lower()
        self.lamp = str(pddl_params.get("toggle_target", "")).lower()
        self.needed = 2 if task_type == "pick_two_obj_and_place" else 1
        self.receptacles: set[str] = set()
        self.here: str | None = None
        self.held: str | None = None
        self.transformed = False
        self.placed: list[str] = []
        self.take_sources: list[str] = []  # receptacles an object was taken from (may hold another one)
        self.searched: set[str] = set()
        self.lamp_searched: set[str] = set()
        self.history: list[str] = []

    # -- helpers -------------------------------------------------------------------------------------------------
    def _order(self, names: Iterable[str]) -> list[str]:
        return sorted(names, key=_natural_key)

    @staticmethod
    def _go(target: str, admissible: Sequence[str]) -> str:
        return f"go to {target}"

    def _search_targets(self) -> list[str]:
        can = [r for r in self.receptacles if self.obj in self._contain.get(_rtype(r), set())]
        rest = [r for r in self.receptacles if r not in can]
        first = [r for r in self.take_sources if r not in self.searched]
        goal_last = lambda rs: [r for r in self._order(rs) if _rtype(r) != self.recep] + \
            [r for r in self._order(rs) if _rtype(r) == self.recep]  # noqa: E731
        order = first + goal_last(can) + goal_last(rest)
        seen, out = set(), []
        for r in order:
            if r not in seen and (r not in self.searched or r in first):
                seen.add(r)
                out.append(r)
        return out

    def _lamp_targets(self) -> list[str]:
        surfaces = [r for r in self.receptacles if _rtype(r) in LAMP_SURFACES]
        others = [r for r in self.receptacles if r not in surfaces]
        order = self._order(surfaces) + self._order(others)
        return [r for r in order if r not in self.lamp_searched]

    def _first_of(self, rtype: str) -> str | None:
        names = self._order(r for r in self.receptacles if _rtype(r) == rtype)
        return names[0] if names else None

    # -- policy --------------------------------------------------------------------------------------------------
    def act(self, obs: str, admissible: Sequence[str]) -> str | None:
        """The next command, or None when it has nothing left to try."""
        adm = list(admissible)
        if not self.history:
            self.receptacles |= receptacles_in_room(obs)
        self.receptacles |= {c[6:] for c in adm if c.startswith("go to ")}
        cmd = self._decide(adm)
        if cmd is not None:
            self._record(cmd)
        return cmd

    def _record(self, cmd: str) -> None:
        self.history.append(cmd)
        if cmd.startswith("go to "):
            self.here = cmd[6:]
            self.receptacles.add(self.here)
        elif m := _TAKE_RE.match(cmd):
            self.held = m.group(1)
            self.take_sources.append(m.group(2))
        elif m := _MOVE_RE.match(cmd):
            self.placed.append(m.group(1))
            self.held = None
            self.transformed = False
        elif cmd.split(" ", 1)[0] in ("clean", "heat", "cool"):
            self.transformed = True

    def _decide(self, adm: list[str]) -> str | None:
        here = self.here
        if self.held is None and (self.task_type == "look_at_obj_in_light" or len(self.placed) < self.needed):
            # Search phase: take a target seen here, else open here, else go on to the next receptacle.
            for c in adm:
                m = _TAKE_RE.match(c)
                if m and _rtype(m.group(1)) == self.obj and m.group(1) not in self.placed and m.group(2) == here:
                    return c
            if here is not None and f"open {here}" in adm:
                return f"open {here}"
            if here is not None:
                self.searched.add(here)
            targets = [r for r in self._search_targets() if r != here]
            return self._go(targets[0], adm) if targets else None
        if self.held is None:
            return None
        if self.task_type == "look_at_obj_in_light":
            for c in adm:
                if c.startswith("use ") and _rtype(c[4:]) == self.lamp:
                    return c
            if here is not None:
                self.lamp_searched.add(here)
            targets = [r for r in self._lamp_targets() if r != here]
            return self._go(targets[0], adm) if targets else None
        if self.task_type in TRANSFORM_OF and not self.transformed:
            verb, appliance_type = TRANSFORM_OF[self.task_type]
            appliance = self._first_of(appliance_type)
            if appliance is None:
                return None
            if here != appliance:
                return self._go(appliance, adm)
            return f"{verb} {self.held} with {appliance}"
        goal = self._first_of(self.recep)
        if goal is None:
            return None
        if here != goal:
            return self._go(goal, adm)
        if f"open {goal}" in adm:
            return f"open {goal}"
        return f"move {self.held} to {goal}"


def _game_meta(game_path: Path) -> dict[str, Any]:
    traj = game_path.parent / "traj_data.json"
    data = json.loads(traj.read_text()) if traj.exists() else {}
    return {"task_type": data.get("task_type", ""), "pddl_params": data.get("pddl_params", {})}


def play_until_won(game: AlfWorldGame, choose, limit: int) -> list[dict[str, Any]] | None:
    """Play from reset, each command chosen by ``choose(obs, admissible)`` (``{"command", ...what to keep}``, or
    None to give up); the per-step states ``{obs, admissible, command, ...}`` if that wins within ``limit`` steps,
    else None."""
    obs, info = game.reset()
    steps = []
    for _ in range(limit):
        chosen = choose(obs, info["admissible_commands"])
        if chosen is None:
            return None
        steps.append({"obs": obs, "admissible": info["admissible_commands"], **chosen})
        obs, _, done, info = game.step(chosen["command"])
        if info["won"]:
            return steps
        if done:
            return None
    return None


def play_commands(game: AlfWorldGame, commands: Sequence[str]) -> list[dict[str, Any]] | None:
    """Replay ``commands`` from reset; the per-step states if they win the game, else None."""
    planned = iter(commands)
    return play_until_won(game, lambda obs, admissible: {"command": next(planned)}, len(commands))


def search_commands(game: AlfWorldGame, task_type: str, pddl_params: dict[str, Any],
                    max_steps: int = MAX_STEPS) -> list[dict[str, Any]] | None:
    """Run the search expert; the per-step states if it wins within ``max_steps``, else None."""
    expert = SearchExpert()
    expert.reset(task_type, pddl_params)

    def choose(obs: str, admissible: list[str]) -> dict | None:
        cmd = expert.act(obs, admissible)
        return None if cmd is None else {"command": cmd}

    return play_until_won(game, choose, max_steps)


def expert_steps(game_path: str | Path, mode: str = "search", max_steps: int = MAX_STEPS) -> dict[str, Any]:
    """One expert episode on a game: ``{"game", "task", "task_type", "expert", "steps": [{obs, admissible,
    command}]}``. ``mode``: "search" (falls back to the planner) or "planner"."""
    if mode not in ("search", "planner"):
        raise ValueError(f"unknown expert mode {mode!r}")
    game_path = Path(game_path)
    meta = _game_meta(game_path)
    game = AlfWorldGame(game_path, max_steps=None)
    try:
        steps, used = None, mode
        if mode == "search" and meta["task_type"]:
            steps = search_commands(game, meta["task_type"], meta["pddl_params"], max_steps)
        if steps is None:
            used = "planner"
            data = json.loads(game_path.read_text())
            # Our games store the planner's plan; an upstream file may store none, or an expert run with random
            # detours: ask the planner then.
            walkthrough = data.get("walkthrough") if "a2rl" in data else None
            steps = play_commands(game, walkthrough) if walkthrough else None
            if steps is None:
                planner = AlfWorldGame(game_path, max_steps=None, walkthrough=False, expert_plan=True)
                try:
                    walkthrough = planner.reset()[1]["expert_plan"]
                finally:
                    planner.close()
                steps = play_commands(game, walkthrough)
        if steps is None:
            raise RuntimeError(f"no expert trajectory wins {game_path}")
        return {"game": str(game_path), "task": game.task, "task_type": meta["task_type"], "expert": used,
                "steps": steps}
    finally:
        game.close()


def demonstrations(episode: dict[str, Any], game_name: str | None = None, episode_index: int = 0,
                   history: Sequence[Sequence[str]] | None = None,
                   labels: Sequence[bool] | None = None) -> list[Demonstration]:
    """One Demonstration per step of an expert episode. ``history``: each step's earlier commands (default: the
    episode's own commands so far); ``labels``: False for a step that is no demonstration (an injected detour)."""
    out = []
    done: list[str] = []
    for i, st in enumerate(episode["steps"]):
        if labels is None or labels[i]:
            out.append(Demonstration(
                instance=game_name or episode["game"], goal=episode["task"],
                step=Step(observation=st["obs"], actions=tuple(st["admissible"]), reward=0.0, done=False),
                history=tuple(history[i] if history is not None else done), action=st["command"],
                episode=episode_index, index=i, expert=episode["expert"], info={"task_type": episode["task_type"]},
                observations=tuple(s["obs"] for s in episode["steps"][:i + 1])))
        done.append(st["command"])
    return out


def expert_demonstrations(game_paths: Iterable[str | Path], mode: str = "search", max_steps: int = MAX_STEPS,
                          relative_to: str | Path | None = None) -> list[Demonstration]:
    """Demonstrations for every game, in order. ``relative_to``: name games by their path relative to this folder
    (e.g. the train split) instead of their absolute path."""
    out: list[Demonstration] = []
    for p in game_paths:
        name = str(Path(p).relative_to(relative_to)) if relative_to is not None else None
        out += demonstrations(expert_steps(p, mode=mode, max_steps=max_steps), game_name=name)
    return out
