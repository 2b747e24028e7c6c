"""copy_base: the adversarial reference. Copies the base model to output/base_copy and submits it once.

The grader must score it like any model and flag it `copy_of_base`. Standalone (stdlib only); run in a workspace.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def submit(grading_url: str, token: str, model_path: str, timeout: float) -> tuple[int, dict]:
    """POST /submit. Returns (HTTP status, JSON answer); errors come back as 4xx/5xx with {error, code}."""
    request = urllib.request.Request(
        grading_url.rstrip("/") + "/submit", data=json.dumps({"model_path": model_path}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            body = json.loads(e.read() or b"{}")
        except ValueError:
            body = {"error": str(e)}
        return e.code, body
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        return 0, {"error": f"{type(e).__name__}: {e}"}


def main() -> int:
    run = json.loads(Path("run.json").read_text())
    target = Path(run["output_dir"]) / "base_copy"
    # copytree follows the workspace's link to the read-only model and copies the files themselves
    shutil.copytree(run["model_path"], target, copy_function=shutil.copyfile, dirs_exist_ok=True)
    timeout = max(10.0, float(run.get("deadline", time.time() + 600)) - time.time())
    status, answer = submit(run["grading_url"], run["run_token"], str(target), timeout)
    print(json.dumps({"model_path": str(target), "status": status, **answer}), flush=True)
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
