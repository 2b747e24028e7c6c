"""Command line: ``python -m envs.alfworld {splits,expert,bench} ...``.

- ``splits OUT --train N --eval M [--seed S] [--task-types pick,clean,...] [--eval-dir DIR] [--eval-salt X]``:
  generated train / eval games (eval under OUT/eval unless --eval-dir).
- ``expert GAMES_DIR OUT.jsonl [--mode search|planner]``: the expert's demonstrations (one JSON line per step) for
  every game under GAMES_DIR.
- ``bench [--n 6]``: generate one game per task type and time generation, load, reset, step and the planner.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _bench(n: int) -> dict:
    from .engine import AlfWorldGame
    from .generator import TASK_TYPES, generate_game, write_game

    out: dict[str, list[float]] = {"generate_s": [], "construct_s": [], "reset_s": [], "step_ms": [],
                                   "planner_s": [], "walkthrough_len": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            task_type = TASK_TYPES[i % len(TASK_TYPES)]
            t = time.perf_counter()
            game = generate_game(90_000 + i, task_type)
            out["generate_s"].append(time.perf_counter() - t)
            path = write_game(game, Path(tmp) / str(i))
            t = time.perf_counter()
            env = AlfWorldGame(path)
            out["construct_s"].append(time.perf_counter() - t)
            t = time.perf_counter()
            _, info = env.reset()
            out["reset_s"].append(time.perf_counter() - t)
            for cmd in info["walkthrough"]:
                t = time.perf_counter()
                env.step(cmd)
                out["step_ms"].append(1000 * (time.perf_counter() - t))
            out["walkthrough_len"].append(len(info["walkthrough"]))
            planner = AlfWorldGame(path, expert_plan=True)
            planner.reset()  # the plan at reset is computed too; time one replan after a step
            t = time.perf_counter()
            planner.step(info["walkthrough"][0])
            out["planner_s"].append(time.perf_counter() - t)
    return {k: {"mean": round(statistics.mean(v), 4), "max": round(max(v), 4)} for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.alfworld")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("splits")
    sp.add_argument("out")
    sp.add_argument("--train", type=int, required=True)
    sp.add_argument("--eval", type=int, required=True)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--task-types", default="")
    sp.add_argument("--eval-dir", default=None)
    sp.add_argument("--eval-salt", default="")
    sp.add_argument("--max-per-type", type=int, default=None, help="receptacles of each type per room, at most")
    sp.add_argument("--max-receptacles", type=int, default=None, help="receptacles per room, at most")
    sp.add_argument("--workers", type=int, default=1)
    ex = sub.add_parser("expert")
    ex.add_argument("games_dir")
    ex.add_argument("out")
    ex.add_argument("--mode", default="search", choices=["search", "planner"])
    be = sub.add_parser("bench")
    be.add_argument("--n", type=int, default=6)
    a = ap.parse_args(argv)
    if a.cmd == "splits":
        from .generator import build_splits

        types = [t for t in a.task_types.split(",") if t] or None
        res = build_splits(a.out, a.train, a.eval, a.seed, types, eval_salt=a.eval_salt, eval_dir=a.eval_dir,
                           max_per_type=a.max_per_type, max_receptacles=a.max_receptacles, workers=a.workers)
        print(json.dumps({k: len(v) for k, v in res.items()}))
    elif a.cmd == "expert":
        import dataclasses

        from .expert import expert_demonstrations

        games = sorted(Path(a.games_dir).rglob("game.tw-pddl"))
        demos = expert_demonstrations(games, mode=a.mode, relative_to=a.games_dir)
        Path(a.out).write_text("".join(json.dumps(dataclasses.asdict(d)) + "\n" for d in demos))
        print(json.dumps({"games": len(games), "demonstrations": len(demos)}))
    else:
        print(json.dumps(_bench(a.n), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
