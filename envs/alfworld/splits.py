"""A task's game files by split: generated games, or upstream data's (envs.alfworld.task reads them here, apart from
the package's __init__, which imports the task)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envs.alfworld.generator import build_splits


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
        from envs.alfworld.real_data import draw_across_types, real_splits

        splits = real_splits(data_path, task_types, splits=("train", "eval", "final"))
        for split, cap in (("train", n_train), ("eval", n_eval)):
            splits[split] = draw_across_types(splits[split], cap, seed)
        taken = {game.parent.parts[-2:] for split in ("train", "eval") for game in splits[split]}
        final = [game for game in splits["final"] if game.parent.parts[-2:] not in taken]
        splits["final"] = draw_across_types(final, n_final, seed)
        return splits
    return build_splits(out_dir, n_train, n_eval, seed, task_types, eval_salt=eval_salt, eval_dir=eval_dir)
