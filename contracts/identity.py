"""What of a task's config is its identity (what a cell's id and a score cache's key hash): below contracts/specs.py
and contracts/task_spec.py, which both read it."""
from __future__ import annotations


# Grader settings that change how fast a score comes, not what it is.
GRADER_RUNTIME_KEYS = {"num_cpus", "num_gpus", "num_replicas", "batch_size", "max_concurrent", "backend", "threads",
                       "infra_retries", "gpu_memory_utilization", "tensor_parallel_size", "max_model_len",
                       "kv_cache_gb", "memory_gb", "submission_max_files", "submission_max_gb"}


# Task classes were named by their import path when the first ledgers were written. Identities still hash those
# names, so cells keep their ids and score caches their keys now that a task class is registered by a short name.
TASK_CLASS_IDENTITY = {
    "reasoning_gym": "evaluators.tasks.reasoning_gym_task:ReasoningGymTask",
    "alfworld": "evaluators.tasks.alfworld_task:AlfWorldTask",
}


def task_identity(task: dict) -> dict:
    """A task config without its grader's resource knobs, its class under the name its first cells hashed."""
    out = dict(task)
    if "cls" in out:
        out["cls"] = TASK_CLASS_IDENTITY.get(out["cls"], out["cls"])
    out["grader"] = {k: v for k, v in (task.get("grader") or {}).items() if k not in GRADER_RUNTIME_KEYS}
    out.pop("contamination", None)  # how the grader checks what agents wrote, not what the task is
    out.pop("known_models", None)   # which checkpoints the grader tells submissions from, likewise
    out.pop("reference_score", None)  # what the report anchors scores to, not what the task is
    out.pop("reference_source", None)
    return out
