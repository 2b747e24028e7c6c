"""Materialise one cell's workspace: what an agent may see, and nothing else.

  instructions.md   the task and the rules: budget, grading API, layout
  run.json          endpoints, token, budget, deadline, agent knobs (machine-readable)
  data/train.jsonl  the task's visible train split (the eval split never enters a workspace)
  model/            the base model: a link to the read-only model cache, never a copy
  code/             the agent's code (snapshotted at each submission); starts with a built-in agent's script,
                    the agent client and the task's render/parse, or the files listed in agent.files
  output/           where models to submit go
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from contracts.file_lock import build_once
from contracts.specs import CellSpec
from contracts.task_spec import TaskSpec

API_TEXT = """
## How you are graded

Submit a model directory (transformers format: weights, config, tokenizer) saved under `output/`:

    curl -s -X POST "$GRADING_SERVER_URL/submit" -H "Authorization: Bearer $A2RL_RUN_TOKEN" \\
         -H 'Content-Type: application/json' -d '{{"model_path": "output/my_model"}}'

The answer (JSON) has `score`, `baseline_score` (the base model's), `improvement`, `best`,
`remaining_submissions`, `elapsed_s` and `flags`. `GET $GRADING_SERVER_URL/status` (same header) shows time,
submissions and best so far (and, when you have an LLM driver, the tokens and cost used and left). The score is
computed on a hidden eval split you cannot see. An answer with status 503 and `"code": "infra_error"` means the
grading infrastructure failed on your submission: it did not count against your budget; submit it again.

When your run ends, one submission is scored once more on a held-out final split that no answer ever scores (when
the task has one): the one you marked with `"final": true` in the body of `/submit` (the last one you marked), else
your best by score. That held-out score is your run's result. Its model directory is kept as it was when you
submitted it, so you may overwrite it afterwards.

## Your budget

- wall time: {wall_time_s:.0f} s (deadline in run.json; everything you started is stopped then)
- submissions: {max_submissions}
{extra_limits}
## Rules

- Work only inside this folder. The base model in `model/` is read-only; write models to `output/`.
- A submission identical to the base model is scored but flagged `copy_of_base`.
- Your code in `code/` is recorded at every submission.
"""


def instructions(cell: CellSpec, task_text: str) -> str:
    b = cell.budget
    extra = ""
    if b.max_tokens:
        extra += f"- driver tokens: {b.max_tokens}\n"
    if b.max_cost_usd:
        extra += f"- driver cost: ${b.max_cost_usd:.2f}\n"
    api = API_TEXT.format(wall_time_s=b.wall_time_s, max_submissions=b.max_submissions, extra_limits=extra)
    mode = ""
    if cell.mode and (cell.mode.get("instructions") or "").strip():
        mode = f"\n## Training mode: {cell.mode_name}\n\n{cell.mode['instructions'].strip()}\n"
    return f"# Task: {cell.task_name}\n\n{task_text.strip()}\n{mode}{api}"


def material_key(task: TaskSpec) -> str:
    """What a task's cached material is keyed by: its config's identity."""
    return hashlib.sha256(json.dumps(task.identity, sort_keys=True, default=str).encode()).hexdigest()[:12]


def task_material(task: TaskSpec, cache_dir: Path) -> Path:
    """The task's visible material (instructions.md, train.jsonl), built once per task config and cached.

    The orchestrator builds it before the trials start, so a cell only copies files (generating a train split
    can take seconds and import heavy packages)."""
    def build(tmp: Path) -> None:
        from contracts.task import build_task

        tmp.mkdir(parents=True)
        for name, text in build_task(task, cache_dir).given_texts().items():  # the grader knows them as given
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)

    return build_once(cache_dir / "tasks" / f"{task.name}-{material_key(task)}", build)


def new_workspace(workspace: Path, *, folders: tuple[str, ...], model_link: str, base_model_dir: Path,
                  code_files: Mapping[str, Path] | None) -> Path:
    """What every agent side's workspace starts as: its empty folders, the base model as a link (never a copy), and
    the files its code/ starts with (name -> source). A half-made workspace from a crashed attempt is never reused."""
    if workspace.exists():
        shutil.rmtree(workspace)
    for name in ("code", *folders):
        (workspace / name).mkdir(parents=True, exist_ok=True)
    (workspace / model_link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(base_model_dir, workspace / model_link, target_is_directory=True)
    for name, path in (code_files or {}).items():
        shutil.copy2(path, workspace / "code" / name)
    return workspace


def materialise(workspace: Path, cell: CellSpec, *, material: Path, base_model_dir: Path,
                run_info: dict, code_files: Mapping[str, Path] | None = None) -> Path:
    """a2rl's workspace (the layout above)."""
    new_workspace(workspace, folders=("data", "output"), model_link="model", base_model_dir=base_model_dir,
                  code_files=code_files)
    (workspace / "instructions.md").write_text(instructions(cell, (material / "instructions.md").read_text()))
    shutil.copyfile(material / "train.jsonl", workspace / "data" / "train.jsonl")
    if (material / "eval").is_dir():  # the protocol's evaluator (Task.evaluator_files)
        shutil.copytree(material / "eval", workspace / "eval")
    run = {
        "cell_id": cell.cell_id,
        "task": cell.task_name,
        "agent": cell.agent.name,
        "driver": cell.driver.name,
        "seed": cell.seed,
        "mode": cell.mode_name,
        "model_path": "model",
        "train_data": "data/train.jsonl",
        "output_dir": "output",
        "code_dir": "code",
        "wall_time_s": cell.budget.wall_time_s,
        "max_submissions": cell.budget.max_submissions,
        "max_tokens": cell.budget.max_tokens,
        "max_cost_usd": cell.budget.max_cost_usd,
        "agent_args": cell.agent.args,
        **run_info,
    }
    (workspace / "run.json").write_text(json.dumps(run, indent=2))
    return workspace


def given_digests(workspace: Path) -> dict[str, str]:
    """{path in the workspace: sha256} of every file in it, links not followed: taken before the agent starts, what
    a2rl gave it (the grader's contamination scan reads those files, while unchanged, as given text)."""
    out = {}
    for root, _, files, root_fd in os.fwalk(workspace, follow_symlinks=False):
        for name in files:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root_fd)
            except OSError:  # a link
                continue
            with os.fdopen(fd, "rb") as f:
                out[os.path.relpath(os.path.join(root, name), workspace)] = \
                    hashlib.file_digest(f, "sha256").hexdigest()  # type: ignore[attr-defined]  # (3.11+)
    return out


def base_env(home: Path, cpus: float, inherit: Mapping[str, str] | None = None) -> dict:
    """A clean environment: nothing of the orchestrator's leaks in (no keys, no Ray or W&B variables)."""
    inherit = inherit if inherit is not None else os.environ
    home.mkdir(exist_ok=True)
    threads = str(max(1, int(cpus)))
    env = {
        # `python` is the interpreter a2rl runs on (torch, transformers, trl): the agent's own may be hidden in $HOME
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), inherit.get("PATH", "/usr/local/bin:/usr/bin:/bin")]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HOME": str(home / "hf"),
        "HF_HUB_OFFLINE": inherit.get("HF_HUB_OFFLINE", "0"),
        "WANDB_MODE": "disabled",
    }
    if "CUDA_VISIBLE_DEVICES" in inherit:  # set by Ray for the trial's GPU reservation
        env["CUDA_VISIBLE_DEVICES"] = inherit["CUDA_VISIBLE_DEVICES"]
    return env


def agent_env(workspace: Path, *, home: Path, task: str, base_model: str, model_path: Path, grading_url: str,
              cpus: float, extra: Mapping[str, str] | None = None, inherit: Mapping[str, str] | None = None) -> dict:
    """The variables every agent side sets over the clean environment (their values are the side's: a2rl's name its
    workspace's model/ and run.json's endpoints, the release's are its run.py's), and the side's own (extra)."""
    env = base_env(home, cpus, inherit)
    env.update({
        "TASK": task,
        "BASE_MODEL": base_model,
        "WORKSPACE": str(workspace),
        "MODEL_PATH": str(model_path),
        "DATA_PATH": str(workspace / "data"),
        "OUTPUT_DIR": str(workspace / "output"),
        "GRADING_SERVER_URL": grading_url,
        **(extra or {}),
    })
    return env
