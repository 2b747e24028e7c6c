"""ALFWorld (text) games for the interactive task: generated offline, or upstream data when a user points at it.

- ``generator``: seeded games against the packaged ``alfred.pddl`` / ``alfred.twl2`` (six task types), disjoint
  train / eval splits.
- ``task``: the task ``alfworld`` (registered), its games and train rows; ``environment``: the games as an Environment.
- ``engine``: ``AlfWorldGame(path)``: reset / step in the real engine (textworld + the ALFWorld wrappers).
- ``prompt``: render / parse, the one prompt / reply format of the training data, the grader and the agents.
- ``expert``, ``ordered_expert``: expert episodes (search expert or planner walkthrough) as demonstrations.
- ``real_data``: upstream ``json_2.1.1`` discovery (train, valid_unseen as eval, valid_seen as the final split).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from . import corpus, paper_task, task  # noqa: F401  (register the corpus, the task "alfworld", its paper variant)
from .generator import TASK_TYPES, build_splits, generate_game, generate_split  # noqa: F401


def game_sets(out_dir: str | Path, n_train: int, n_eval: int, seed: int = 0,
              task_types: Sequence[str] | None = None, *, data_path: str | Path | None = None,
              eval_dir: str | Path | None = None, eval_salt: str = "", n_final: int = 0) -> dict[str, list[Path]]:
    """Train and eval game files (and final ones, from upstream data; generated: ``generator.build_final_split``).

    With ``data_path`` pointing at upstream ALFWorld data (``json_2.1.1`` or its parent), its ``train`` and
    ``valid_unseen`` games, and its ``valid_seen`` games as the final split, less any whose folder names a train or
    eval game (``n_train`` / ``n_eval`` / ``n_final`` cap them when > 0: drawn across the task types, seeded by
    ``seed``, ``real_data.draw_across_types``).
    Otherwise generated games: :func:`generator.build_splits` under ``out_dir`` (eval under ``eval_dir`` if given).
    """
    if data_path:
        from .real_data import draw_across_types, real_splits

        splits = real_splits(data_path, task_types, splits=("train", "eval", "final"))
        for split, cap in (("train", n_train), ("eval", n_eval)):
            splits[split] = draw_across_types(splits[split], cap, seed)
        taken = {game.parent.parts[-2:] for split in ("train", "eval") for game in splits[split]}
        final = [game for game in splits["final"] if game.parent.parts[-2:] not in taken]
        splits["final"] = draw_across_types(final, n_final, seed)
        return splits
    return build_splits(out_dir, n_train, n_eval, seed, task_types, eval_salt=eval_salt, eval_dir=eval_dir)
