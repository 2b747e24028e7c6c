"""The viewer at the paper's size: how long its sweep page (270 cells) and a cell page with a 12-hour trace (50,000
trace events) take to open in headless Chromium, from the static copy (file://) and from `view`'s server.

    python benchmarks/bench_viewer.py [--cells 270] [--trace-events 50000]

The sweep is synthetic but written as a sweep writes it: through the Ledger class, with record files, driver usage,
run reports and a code snapshot repository, so every loader the pages use reads real files. Times are ms from
navigation, as the page measures them: text = drawn and usable (body[data-ready]: the cells table, a transcript
page); plotly = plotly.js loaded, which starts only then; plots = drawn (body[data-plotted]). "Cold" is a fresh
browser's first visit, "warm" the same page again in the same tab; each is the median of --repeats visits, the
variants taken in turn so that a busy machine slows them alike. The static copy is timed twice side by side: with
plotly.js's cartesian bundle (1.5 MB, which scripts/setup fetches) and with the whole of plotly.js (4.8 MB, the plotly
package's, the viewer's fallback) in the bundle's place: the same pages, only the script differs. The
server is `python -m orchestrator view` in its own process, timed once its sweep data (the report's tables,
10,000-sample bootstrap) is ready: it computes them at start and again in the background when the ledger moves on.
Needs /usr/bin/chromium (apt-get install chromium).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contracts.code_snapshots import snapshot_code  # noqa: E402
from contracts.specs import AgentSpec, Budget, CellSpec, DriverSpec  # noqa: E402
from contracts.task_spec import TaskSpec  # noqa: E402
from orchestrator.ledger import Ledger  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WALL = 12 * 3600.0


def trace_events(n: int, rng: random.Random, secret: str = "") -> list[dict]:
    """n trace events of an agent's 12 hours: messages, tool calls with their results (some long), its usage."""
    out, t = [], 5.0
    for i in range(n):
        t += WALL * 0.95 / n
        kind = i % 4
        if kind == 0:
            p = {"type": "message", "role": "assistant", "text": f"Step {i}: I will train for another round. " * 3}
        elif kind == 1:
            p = {"type": "tool_call", "tool": "Bash", "id": f"call-{i}",
                 "input": {"command": f"python code/train.py --round {i} --lr 1e-4 {secret if i == 1 else ''}"}}
        elif kind == 2:
            lines = rng.randint(2, 60)
            p = {"type": "tool_result", "id": f"call-{i - 1}", "ok": i % 50 != 2,
                 "output": "".join(f"step {j}: loss {rng.random():.4f}\n" for j in range(lines))}
        else:
            p = {"type": "usage", "input_tokens": 1200, "output_tokens": 80, "cached_tokens": 900, "scope": "turn"}
        out.append({"t": t, "kind": "agent_trace", "payload": {**p, "source": "bench"}})
    return out


def spec(task: str, agent: str, driver: str, seed: int) -> CellSpec:
    return CellSpec(agent=AgentSpec(name=agent, kind="cli" if driver != "none" else "builtin"),
                    driver=DriverSpec(name=driver, provider="anthropic" if driver != "none" else "none",
                                      model=f"{driver}-model" if driver != "none" else None),
                    task=TaskSpec.from_config({"name": task, "cls": "arithmetic", "base_model": "tiny"}), seed=seed,
                    sweep="bench", budget=Budget(wall_time_s=WALL, max_submissions=10, max_tokens=10_000_000))


def make_sweep(out: Path, n_cells: int = 270, trace_events_n: int = 50_000, seed: int = 0, secret: str = "",
               snapshots: int = 3) -> dict:
    """A finished sweep of n_cells in out (tasks x agents x drivers x seeds), the first cell of the first CLI agent
    with a trace of trace_events_n events (secret: planted in its second tool call). Returns {"big": that cell's id,
    "cells": every cell id}."""
    rng = random.Random(seed)
    tasks = [f"task{i}" for i in range(6)]
    agents = [("claude_code", "claude"), ("codex", "gpt"), ("sft", "none")]
    seeds = range(max(1, n_cells // (len(tasks) * len(agents))))
    specs = [spec(task, agent, driver, s) for task in tasks for agent, driver in agents for s in seeds][:n_cells]
    ledger = Ledger(out / "ledger.sqlite")
    ledger.add_cells(specs)
    big = specs[0].cell_id
    for index, s in enumerate(specs):
        cid = s.cell_id
        ledger.mark_running(cid, 1, 1_000_000.0)
        events, best, baseline = [], None, 0.30
        n_subs = rng.randint(0, 8)
        code = out / "workspaces" / cid / "code"
        for i in range(1, n_subs + 1):
            t = WALL * i / (n_subs + 1)
            score = None if rng.random() < 0.15 else round(baseline + rng.uniform(-0.1, 0.3), 4)
            best = score if best is None or (score is not None and score > best) else best
            commit = None
            if index < snapshots:  # a few cells with code snapshots: the git reads are per cell, not per sweep
                code.mkdir(parents=True, exist_ok=True)
                (code / "train.py").write_text(f"import trainer\n\nLR = {1e-4 * i:g}\nEPOCHS = {i}\n\n"
                                               + "".join(f"trainer.step({j})\n" for j in range(i * 3))
                                               + "trainer.save('output/m')\n")
                commit = snapshot_code(code, out / "cells" / cid / "code.git", f"submission {i}")
            events.append({"t": t, "kind": "submission", "key": f"{cid}:1:submission:{i}", "payload": {
                "submission_id": i, "t": 1_000_000.0 + t, "score": score, "baseline_score": baseline,
                "improvement": None if score is None else score - baseline, "best": best,
                "flags": ["copy_of_base"] if rng.random() < 0.05 else [],
                "error": None if score is not None else "not a loadable model", "elapsed_s": t, "code_commit": commit}})
        if s.driver.name != "none":
            for i in range(20):
                events.append({"t": WALL * i / 20, "kind": "driver_usage", "key": f"{cid}:1:driver:{i}", "payload": {
                    "t": 1_000_000.0 + WALL * i / 20, "model": s.driver.model, "input_tokens": 20_000,
                    "output_tokens": 900, "cached_tokens": 15_000, "cost_usd": 0.05, "status": 200}})
        if cid == big:
            trace = trace_events(trace_events_n, rng, secret)
            events += [{**e, "key": f"{cid}:1:trace:{i}"} for i, e in enumerate(trace)]
        elapsed = WALL * rng.uniform(0.8, 1.0)
        status = "completed" if rng.random() < 0.9 else "agent_error"
        events.append({"t": elapsed, "kind": "outcome", "key": f"{cid}:1:outcome", "payload": {
            "status": status, "limit_hit": None, "exit_code": 0 if status == "completed" else 1, "best_score": best,
            "baseline_score": baseline, "n_submissions": n_subs, "elapsed_s": elapsed, "error": None,
            "started_at": 1_000_000.0, "ended_at": 1_000_000.0 + elapsed}})
        for start in range(0, len(events), 5000):
            ledger.add_events(cid, 1, events[start:start + 5000])
        ledger.update_scores(cid, baseline, best, n_subs)
        ledger.finish(cid, status, 1_000_000.0 + elapsed, error=None if status == "completed" else "exit code 1")
        adir = out / "cells" / cid / "attempt-1"
        adir.mkdir(parents=True, exist_ok=True)
        (adir / "agent.stdout").write_text("".join(f"round {j} done\n" for j in range(200)))
        (adir / "agent.stderr").write_text("")
    ledger.close()
    return {"big": big, "cells": [s.cell_id for s in specs]}


def open_page(page, url: str) -> dict:
    """One visit in a browser tab: ms from navigation until the text is drawn (ready), plotly.js loaded and the plots
    drawn, as the page measured them (performance.now()), and its script errors."""
    errors: list[str] = []
    on_error, on_console = (lambda e: errors.append(str(e))), \
        (lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", on_error)
    page.on("console", on_console)
    page.goto(url, wait_until="commit", timeout=300_000)  # not "load": plotly.js arrives after the page is usable
    page.wait_for_selector("body[data-plotted]", state="attached", timeout=300_000)
    ready, plotly, plotted = page.evaluate("[+document.body.dataset.ready, +document.body.dataset.plotlyLoaded, "
                                           "+document.body.dataset.plotted]")
    page.remove_listener("pageerror", on_error)
    page.remove_listener("console", on_console)
    return {"ready": ready, "plotly": plotly, "plotted": plotted, "errors": errors}


def start_view(out: Path) -> tuple[subprocess.Popen, str]:
    """`python -m orchestrator view` in its own process (as a reader runs it), once its sweep data is ready."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "view", f"output_dir={out}", "port=0"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    line = proc.stdout.readline()
    base = line.split(" at ", 1)[1].split()[0]
    while json.loads(urllib.request.urlopen(base + "version").read())["sweep"] is None:
        time.sleep(0.2)
    return proc, base


def whole_plotly(viewer: Path, target: Path) -> Path | None:
    """A copy of the static viewer with the whole of plotly.js (the plotly package's) in the bundle's place; None
    where the viewer serves the whole of it already (scripts/setup did not fetch the bundle)."""
    import plotly

    from orchestrator.viewer.site import plotly_js

    if plotly_js().note:
        return None
    shutil.copytree(viewer, target)
    whole = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    shutil.copyfile(whole, target / "assets" / "plotly.min.js")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=270)
    parser.add_argument("--trace-events", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3, help="visits per page and variant (the median is shown)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from orchestrator.analysis.run_report import write_cell_reports
    from orchestrator.viewer.static import write_site

    with tempfile.TemporaryDirectory(prefix="a2rl-bench-viewer-") as tmp:
        out = Path(tmp) / "out"
        t0 = time.perf_counter()
        made = make_sweep(out, args.cells, args.trace_events)
        write_cell_reports(out)  # as each cell does when it ends
        print(f"made a sweep of {len(made['cells'])} cells, one with {args.trace_events} trace events, in "
              f"{time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        index = write_site(out)
        size = sum(p.stat().st_size for p in index.parent.rglob("*") if p.is_file())
        print(f"static copy written in {time.perf_counter() - t0:.1f} s ({size / 1e6:.1f} MB, "
              f"{sum(1 for _ in index.parent.rglob('*.html'))} pages)")
        old = whole_plotly(index.parent, Path(tmp) / "viewer-whole-plotly")
        served = index.parent / "assets" / "plotly.min.js"
        print(f"plotly.js: {served.stat().st_size / 1e6:.1f} MB as set up; "
              + ("the whole of it (the plotly package's plotly.min.js) in its place for the old figure" if old
                 else "the whole of it already (scripts/setup did not fetch the cartesian bundle): no old figure"))
        t0 = time.perf_counter()
        server, base = start_view(out)
        print(f"server: the sweep's data (its report tables) ready {time.perf_counter() - t0:.1f} s after `view` "
              f"started; pages below are timed after that, as a reader coming to a running `view` finds it")
        pages = {"sweep page": ("index.html", f"{len(made['cells'])} cells"),
                 "cell page": (f"cell-{made['big']}.html", f"{args.trace_events} trace events")}
        variants = {"static, as set up": index.parent.as_uri() + "/", "server, as set up": base}
        if old:
            variants["static, whole plotly"] = old.as_uri() + "/"
        visits: dict[tuple[str, str], list] = {}
        with sync_playwright() as p:
            for _ in range(args.repeats):
                for where, root in variants.items():
                    for name, (path, _what) in pages.items():
                        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                        try:
                            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
                            cold, warm = open_page(tab, root + path), open_page(tab, root + path)
                        finally:
                            browser.close()
                        visits.setdefault((name, where), []).append((cold, warm))
        server.terminate()
        server.wait()

        def median(runs, which, key):
            return statistics.median(r[which][key] for r in runs)

        print(f"\nms from navigation, median of {args.repeats}: text = the page is drawn and usable (tables, "
              "transcript page); plotly = plotly.js loaded (after text); plots = drawn")
        print(f"{'page':<38} {'from':<21} {'cold: text':>11} {'plotly':>8} {'plots':>8} {'warm: text':>11} "
              f"{'plotly':>8} {'plots':>8}")
        for (name, where), runs in visits.items():
            what = pages[name][1]
            print(f"{name + ' (' + what + ')':<38} {where:<21} "
                  + " ".join(f"{median(runs, i, k):>{w}.0f}" for i in (0, 1)
                             for k, w in (("ready", 11), ("plotly", 8), ("plotted", 8))))
        if old:
            for name in pages:
                new_ms = median(visits[name, "static, as set up"], 0, "plotted")
                old_ms = median(visits[name, "static, whole plotly"], 0, "plotted")
                print(f"{name}: plots shown cold from file:// {old_ms / 1000:.2f} s with the whole of plotly.js, "
                      f"{new_ms / 1000:.2f} s with the cartesian bundle ({old_ms / new_ms:.1f}x sooner)")
        errors = [e for runs in visits.values() for cold, warm in runs for e in cold["errors"] + warm["errors"]]
        print("\nscript errors: " + (json.dumps(errors) if errors else "none"))
        print(f"load average at the end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
