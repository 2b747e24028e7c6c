"""ALFWorld (text) games for the interactive task: generated offline, or upstream data when a user points at it.

- ``generator``: seeded games against the packaged ``alfred.pddl`` / ``alfred.twl2`` (six task types), disjoint
  train / eval splits.
- ``task``: the task ``alfworld`` (registered), its games and train rows; ``environment``: the games as an Environment.
- ``engine``: ``AlfWorldGame(path)``: reset / step in the real engine (textworld + the ALFWorld wrappers).
- ``prompt``: render / parse, the one prompt / reply format of the training data, the grader and the agents.
- ``expert``, ``ordered_expert``: expert episodes (search expert or planner walkthrough) as demonstrations.
- ``real_data``: upstream ``json_2.1.1`` discovery (train, valid_unseen as eval, valid_seen as the final split).
- ``splits``: ``game_sets``, a task's game files by split, generated or upstream.
"""

from __future__ import annotations

from . import corpus, paper_task, task  # noqa: F401  (register the corpus, the task "alfworld", its paper variant)
from .generator import TASK_TYPES, build_splits, generate_game, generate_split  # noqa: F401
from .splits import game_sets  # noqa: F401
