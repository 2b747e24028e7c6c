"""Tasks: `load_task(cfg)` builds one from its config (conf/task/*.yaml)."""
from evaluators.tasks.base import Task, load_task

__all__ = ["Task", "load_task"]
