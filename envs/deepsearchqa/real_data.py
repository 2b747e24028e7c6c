"""The real DeepSearchQA set (``google/deepsearchqa``), when a user has it, split as the paper does.

The set is 900 questions in one split (``eval``, the file ``DSQA-full.csv``) with the columns ``problem``,
``problem_category``, ``answer`` and ``answer_type`` ("Single Answer" or "Set Answer"). The paper (AutoRL-Bench,
``benchmarks/deepsearchqa/data.py``) shuffles it with seed 42 (``datasets.Dataset.shuffle``) and takes the first
100 as train and the next 200 as eval; the rest is unused there. The held-out final split is the next ``n_final``
after those (skipping any whose question is a train or eval one), so the paper's two splits stay as they were.
``data_path`` is either:

- a dataset id (``google/deepsearchqa``): loaded with ``datasets.load_dataset(id, split="eval")`` (needs network);
- a local file: the CSV (``DSQA-full.csv``, read with ``datasets``' csv builder as the hub's file is), JSONL or
  Parquet with those columns;
- a local folder: one holding ``DSQA-full.csv`` (a hub snapshot), or a dataset saved with ``save_to_disk`` (the
  paper's download step writes one).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from envs.deepsearchqa.world import Question

DATASET_ID = "google/deepsearchqa"
SOURCE_SPLIT = "eval"
CSV_NAME = "DSQA-full.csv"
SPLIT_SEED = 42
COLUMNS = ("problem", "answer")


def load_rows(data_path: str | os.PathLike) -> list[dict]:
    """The set's rows, in the file's order."""
    p = Path(os.path.expanduser(str(data_path)))
    if p.is_dir():
        if (p / CSV_NAME).is_file():
            return load_rows(p / CSV_NAME)
        if (p / "dataset_info.json").is_file() or (p / "state.json").is_file():
            import datasets

            return datasets.load_from_disk(str(p)).to_list()
        raise FileNotFoundError(f"{p} holds neither {CSV_NAME} nor a dataset saved with save_to_disk")
    if p.is_file():
        if p.suffix == ".csv":  # read as the hub reads DSQA-full.csv for load_dataset(id), so a copy gives its cells
            import datasets   # (pandas underneath: an empty cell, "NA" or "None" is null, a number column numbers)

            return datasets.load_dataset("csv", data_files={SOURCE_SPLIT: str(p)}, split=SOURCE_SPLIT).to_list()
        if p.suffix in (".jsonl", ".json"):
            return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
        if p.suffix == ".parquet":
            import pandas as pd

            return pd.read_parquet(p).to_dict("records")
        raise ValueError(f"{p}: a DeepSearchQA file must be .csv, .jsonl or .parquet")
    if str(data_path).count("/") == 1 and not str(data_path).startswith((".", "/", "~")):
        import datasets

        return datasets.load_dataset(str(data_path), split=SOURCE_SPLIT).to_list()
    raise FileNotFoundError(f"DeepSearchQA data {data_path!r} is neither a local file or folder nor a dataset id "
                            f"such as {DATASET_ID}")


def paper_order(rows: list[dict], seed: int = SPLIT_SEED) -> list[dict]:
    """The rows shuffled as the paper does: `datasets.Dataset.shuffle(seed=42)`."""
    import datasets

    return datasets.Dataset.from_list(rows).shuffle(seed=seed).to_list()


def question(row: dict, name: str) -> Question:
    """A row's cells as the original's eval.py passes them into its ReAct prompt and its judge's prompt: as they
    are (no whitespace stripped; a null cell formatted as Python formats None), the answer type "Single Answer"
    only where the row has no such column (its `sample.get("answer_type", "Single Answer")`)."""
    answer_type = row["answer_type"] if "answer_type" in row else "Single Answer"
    return Question(name, str(row["problem"]), str(row["answer"]), (), (), answer_type=str(answer_type),
                    info={"answer_type": str(row.get("answer_type") or ""),
                          "category": str(row.get("problem_category") or "")})


def real_splits(data_path: str | os.PathLike, n_train: int = 100, n_eval: int = 200, n_final: int = 0
                ) -> dict[str, list[Question]]:
    rows = load_rows(data_path)
    missing = [c for c in COLUMNS if rows and c not in rows[0]]
    if not rows or missing:
        raise ValueError(f"DeepSearchQA data {data_path}: " + (f"columns {missing} are missing (it has "
                         f"{sorted(rows[0])})" if rows else "no rows"))
    shuffled = paper_order(rows)
    train, evals = shuffled[:n_train], shuffled[n_train:n_train + n_eval]  # the paper's split
    if not evals:
        raise ValueError(f"DeepSearchQA data {data_path}: {len(rows)} rows leave no eval question after "
                         f"{n_train} train ones")
    taken = {str(r["problem"]).strip() for r in train + evals}
    final = [r for r in shuffled[n_train + n_eval:] if str(r["problem"]).strip() not in taken][:n_final]
    if len(final) < n_final:
        raise ValueError(f"DeepSearchQA data {data_path}: only {len(final)} of its {len(rows)} rows are left for "
                         f"the final split after {n_train} train and {n_eval} eval ones; lower final_size (it "
                         f"asks for {n_final})")
    return {"train": [question(r, f"dsqa-{i:03d}") for i, r in enumerate(train)],
            "eval": [question(r, f"dsqa-{i:03d}") for i, r in enumerate(evals)],
            "final": [question(r, f"dsqa-{i:03d}") for i, r in enumerate(final)]}
