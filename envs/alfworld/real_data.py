"""Real upstream ALFWorld data (the ``json_2.1.1`` layout of ``alfworld-download``), when a user points at it.

Layout::

    $ALFWORLD_DATA/json_2.1.1/
        train/<task_type>-<Object>-<Mrecep>-<Recep>-<scene>/<trial_...>/{traj_data.json, game.tw-pddl}
        valid_seen/...     (in-distribution evaluation)
        valid_unseen/...   (out-of-distribution evaluation: the benchmark's 134 eval games)

Game discovery follows the upstream ``AlfredTWEnv.collect_game_files``: a folder with ``traj_data.json`` is a game
when its ``game.tw-pddl`` exists, has ``solvable: true``, its task type is wanted, and its path names neither a movable
receptacle task nor a sliced object ("movable", "Sliced"). Results are sorted, so a split is the same list everywhere.
Train games come from ``train``, eval games from ``valid_unseen`` (the benchmark's unseen split, what the paper
reports), and the held-out final games from ``valid_seen``: upstream's only other split of games no train trial
plays (its rooms are train rooms, so it is the easier, in-distribution half; a final score is compared with the base
model's on the same split, never with the eval score).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from pathlib import Path

from .generator import TASK_TYPES, normalize_task_type

DATA_DIRNAME = "json_2.1.1"
SPLIT_DIRS = {"train": "train", "eval": "valid_unseen", "final": "valid_seen", "valid_unseen": "valid_unseen",
              "valid_seen": "valid_seen", "eval_in_distribution": "valid_seen",
              "eval_out_of_distribution": "valid_unseen"}


def resolve_data_root(path: str | os.PathLike) -> Path:
    """The ``json_2.1.1`` folder given itself, its parent (``$ALFWORLD_DATA``) or one of its split folders.

    Raises ``FileNotFoundError`` when the path holds no upstream data.
    """
    p = Path(os.path.expandvars(os.path.expanduser(str(path))))
    candidates = [p, p / DATA_DIRNAME]
    if p.name in set(SPLIT_DIRS.values()):
        candidates.append(p.parent)
    for c in candidates:
        if c.is_dir() and any((c / d).is_dir() for d in ("train", "valid_unseen", "valid_seen")):
            return c
    raise FileNotFoundError(f"no ALFWorld {DATA_DIRNAME} data (train/, valid_unseen/) under {p}")


def discover_games(split_dir: str | os.PathLike, task_types: Sequence[str] | None = None) -> list[Path]:
    """Playable game files under one split folder, sorted (the upstream ``collect_game_files`` filters)."""
    wanted = {normalize_task_type(t) for t in (task_types or TASK_TYPES)}
    games = []
    for root, _dirs, files in os.walk(split_dir):
        if "traj_data.json" not in files:
            continue
        if "movable" in root or "Sliced" in root:
            continue
        try:
            traj = json.loads((Path(root) / "traj_data.json").read_text())
        except (OSError, ValueError):
            continue
        if traj.get("task_type") not in wanted:
            continue
        game_file = Path(root) / "game.tw-pddl"
        if not game_file.exists():
            continue
        try:
            data = json.loads(game_file.read_text())
        except (OSError, ValueError):
            continue
        if not data.get("solvable", False):
            continue
        games.append(game_file)
    return sorted(games)


def real_splits(path: str | os.PathLike, task_types: Sequence[str] | None = None,
                splits: Sequence[str] = ("train", "eval")) -> dict[str, list[Path]]:
    """``{"train": [...], "eval": [...]}`` game files of the upstream data (eval = ``valid_unseen``)."""
    root = resolve_data_root(path)
    out = {}
    for name in splits:
        d = root / SPLIT_DIRS[name]
        out[name] = discover_games(d, task_types) if d.is_dir() else []
    return out


def task_type_of(game_file: Path) -> str:
    """An upstream game's task type, from its task folder's name (as the original reads it)."""
    return game_file.parent.parent.name.split("-")[0]


def draw_across_types(games: Sequence[Path], n: int, seed: int = 0) -> list[Path]:
    """``n`` of a split's games, drawn across its task types (sorted, seeded): each type gets its share of ``n`` as
    in the whole split (largest remainders, ties broken by a seeded order of the types), its games drawn from a
    seeded shuffle of the type's own, so a smaller set has the split's mix of types and its score estimates the
    whole split's. The sorted list's first ``n`` would all be one type (look_at_obj_in_light sorts first).
    All of them when ``n`` is 0 or at least their number."""
    if n <= 0 or n >= len(games):
        return list(games)
    by_type: dict[str, list[Path]] = {}
    for game in sorted(games):
        by_type.setdefault(task_type_of(game), []).append(game)
    shares = {t: n * len(g) / len(games) for t, g in by_type.items()}
    counts = {t: int(share) for t, share in shares.items()}
    order = sorted(by_type)
    random.Random(f"{seed}:types").shuffle(order)
    for t in sorted(order, key=lambda t: -(shares[t] - counts[t]))[:n - sum(counts.values())]:
        counts[t] += 1
    drawn = []
    for t, type_games in by_type.items():
        random.Random(f"{seed}:{t}").shuffle(type_games)
        drawn += type_games[:counts[t]]
    return sorted(drawn)


def ensure_task_in_grammar(game_file: str | os.PathLike, cache_dir: str | os.PathLike, seed: int = 0) -> Path:
    """A game file whose grammar names its task.

    Upstream games carry the task sentence already; one still holding the ``UNKNOWN GOAL`` placeholder gets a
    templated sentence from its ``traj_data.json`` (seeded), written as a copy under ``cache_dir`` (the source data
    is never modified). Returns the path to play.
    """
    game_file = Path(game_file)
    data = json.loads(game_file.read_text())
    if "UNKNOWN GOAL" not in data.get("grammar", ""):
        return game_file
    from alfworld.gen import goal_library

    traj = json.loads((game_file.parent / "traj_data.json").read_text())
    params = traj["pddl_params"]
    goal = traj["task_type"] + ("_slice" if params.get("object_sliced") else "")
    rng = random.Random(f"{seed}:{game_file.parent}")
    sentence = rng.choice(goal_library.gdict[goal]["templates"]).format(
        obj=params["object_target"].lower(), recep=params["parent_target"].lower(),
        toggle=params["toggle_target"].lower(), mrecep=params["mrecep_target"].lower())
    data["grammar"] = data["grammar"].replace("UNKNOWN GOAL", sentence)
    dest = Path(cache_dir) / game_file.parent.parent.name / game_file.parent.name
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "game.tw-pddl").write_text(json.dumps(data))
    (dest / "traj_data.json").write_text(json.dumps(traj))
    return dest / "game.tw-pddl"
