"""copy_base: the adversarial reference. Copies the base model to output/base_copy and submits it once.

The grader must score it like any model and flag it `copy_of_base`. Stdlib and a2rl_client.py only; run in a workspace.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import a2rl_client


def main() -> int:
    run = a2rl_client.load_run()
    target = Path(run["output_dir"]) / "base_copy"
    # copytree follows the workspace's link to the read-only model and copies the files themselves
    shutil.copytree(run["model_path"], target, copy_function=shutil.copyfile, dirs_exist_ok=True)
    status, answer = a2rl_client.submit(run, str(target))
    print(json.dumps({"model_path": str(target), "status": status, **answer}), flush=True)
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
