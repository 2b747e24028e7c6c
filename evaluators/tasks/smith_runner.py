"""Runs a benchmark folder's `evaluate` in a process of its own, one item at a time (evaluators/tasks/smith_task.py).

The folder's eval.py is the lab's code, but what it scores is the model's reply: it may raise, loop, hang or kill its
process. The grader never runs it in its own process. `score_items` starts this file as a child, sends it one item
a line and waits for that item's result at most `timeout_s`; an item whose evaluate raised, returned something
that is not a number, ran past the limit or took the child down scores 0 with the reason, and a new child takes
the items left. Standard library only.

    python smith_runner.py EVAL_PY      reads {"question", "model_answer", "reference", "extra"} a line on stdin,
                                        writes {"score": x} or {"error": "..."} a line on stdout
"""
from __future__ import annotations

import importlib.util
import json
import numbers
import os
import select
import subprocess
import sys
import time
from pathlib import Path

READY = "ready"  # the child's first line, once eval.py is imported


def load_evaluate(eval_py: str):
    """The folder's `evaluate`, from eval.py imported as the release imports it (module name `eval`)."""
    spec = importlib.util.spec_from_file_location("eval", eval_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.evaluate


def one_result(evaluate, job: dict) -> dict:
    try:
        score = evaluate(job["question"], job["model_answer"], job["reference"], **job["extra"])
    except BaseException as e:  # noqa: BLE001 - the release scores an item whose evaluate raised 0
        return {"error": f"evaluate raised {type(e).__name__}: {str(e)[:300]}", "kind": "raised"}
    if isinstance(score, numbers.Real):
        return {"score": float(score)}
    return {"error": f"evaluate returned {type(score).__name__} {str(score)[:80]!r}, not a number",
            "kind": "not_a_number"}


def child(eval_py: str) -> None:
    out = sys.stdout
    sys.stdout = sys.stderr  # what eval.py prints must not be read as a result
    try:
        evaluate = load_evaluate(eval_py)
    except BaseException as e:  # noqa: BLE001
        out.write(json.dumps({"error": f"eval.py cannot be imported: {type(e).__name__}: {str(e)[:300]}",
                              "kind": "import"}) + "\n")
        out.flush()
        return
    out.write(json.dumps({"status": READY}) + "\n")
    out.flush()
    for line in sys.stdin:
        out.write(json.dumps(one_result(evaluate, json.loads(line))) + "\n")
        out.flush()


class _Child:
    """One child process and its stdout, read line by line with a deadline. (-B: no __pycache__ written into the
    benchmark's folder.)"""

    def __init__(self, eval_py: Path, cwd: Path):
        self.proc = subprocess.Popen([sys.executable, "-I", "-B", __file__, str(eval_py)], cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1, start_new_session=True)
        self.buffer = ""
        self.dead = False  # its stdout closed

    def read_line(self, timeout_s: float) -> dict | None:
        """The next line as JSON, or None: past the deadline, or the child is gone."""
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while "\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536).decode(errors="replace")
            if not chunk:
                self.dead = True
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split("\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return {"error": f"the evaluator process wrote {line[:80]!r}", "kind": "died"}

    def send(self, job: dict) -> bool:
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()


def score_items(eval_py: Path, jobs: list[dict], timeout_s: float, cwd: Path) -> list[dict]:
    """One result per job ({"question", "model_answer", "reference", "extra"}), in order: {"score": x}, or
    {"error": reason, "kind": raised | not_a_number | import | timeout | died}."""
    results: list[dict] = []
    worker: _Child | None = None
    try:
        for job in jobs:
            if worker is None:
                worker = _Child(eval_py, cwd)
                ready = worker.read_line(max(timeout_s, 30.0))  # importing eval.py may take a while (its imports)
                if ready is None or ready.get("status") != READY:
                    worker.stop()
                    failed = ready if ready and ready.get("error") else \
                        {"error": "the evaluator process did not start", "kind": "died"}
                    return results + [failed] * (len(jobs) - len(results))  # the same for every item
            got = worker.read_line(timeout_s) if worker.send(job) else None
            if got is None:
                died = worker.dead or worker.proc.poll() is not None
                worker.stop()
                worker = None
                got = {"error": "the evaluator process died", "kind": "died"} if died else \
                    {"error": f"evaluate ran past {timeout_s:g} s", "kind": "timeout"}
            results.append(got)
    finally:
        if worker is not None:
            worker.stop()
    return results


if __name__ == "__main__":
    child(sys.argv[1])
