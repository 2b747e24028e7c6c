"""Number guessing, the smallest real environment a2rl ships: find a secret number from "higher" / "lower" answers.

The worked example of a new environment (the "extending" docs): ``environment`` (the Environment: instances by split,
episodes), ``prompt`` (render / parse, stdlib only: built-in agents get it beside them) and ``task`` (the task
``number_guess``: the secret numbers by split, the expert's rows), with conf/task/number_guess.yaml.
"""

from . import task  # noqa: F401  (registers the task "number_guess")
