"""The sweep viewer in a real browser: headless Chromium (Debian's /usr/bin/chromium, driven by Playwright) loads the
static pages `report` writes (file://) and the pages `view` serves on loopback, over a real finished sweep (the demo's
agents and a Claude Code cell whose scripted upstream makes it call a tool), and over a synthetic sweep with a long
trace, a summary and an audit. Every page must load without a script error; run tokens and driver keys, planted in
the trace by the agent's own command, never reach a page.

A2RL_DOCS_SCREENSHOTS=1 also writes the screenshots the docs show (docs/img/viewer-*.png).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from contracts.records import write_json_durably
from orchestrator.analysis import formats, tables
from orchestrator.report_command import write_report
from orchestrator.ledger import Ledger
from orchestrator.viewer import data as viewer_data
from orchestrator.viewer.masking import MASK, Masker
from orchestrator.viewer.static import write_site
from tests.conftest import ROOT
from tests.support.cells import cells_ended
from tests.support.fake_upstream import FakeUpstream, shell_script
from tests.test_cli_agents import REAL_KEY, USAGE, agent_sweeps, drivers_override, fake_driver, install_clis

def _bench():
    """benchmarks/bench_viewer.py (not a package): its synthetic sweep and its Chromium settings."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_viewer", ROOT / "benchmarks" / "bench_viewer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench()
CHROMIUM, CHROMIUM_ARGS, make_sweep = bench.CHROMIUM, bench.CHROMIUM_ARGS, bench.make_sweep
DOCS_IMG = ROOT / "docs" / "img"
PLANTED_KEY = "sk-ant-api03-" + "Zq7" * 12  # a provider key the records do not name: masked by its look
# The scripted model's one command: leaves code, prints the run token and a real-looking key (as an agent that read
# them would), and submits a copy of the base model.
COMMAND = ("env > code/agent_env.txt; echo token=$A2RL_RUN_TOKEN key=" + PLANTED_KEY + " real=" + REAL_KEY + "; "
           "mkdir -p output && cp -r model/. output/m && curl -s -X POST \"$GRADING_SERVER_URL/submit\" "
           "-H \"Authorization: Bearer $A2RL_RUN_TOKEN\" -H 'Content-Type: application/json' "
           "-d '{\"model_path\": \"output/m\"}' > code/submission.json && echo SUBMITTED")


def browser_or_skip():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium; scripts/setup does it as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    return sync_playwright


@pytest.fixture(scope="module")
def browser():
    sync_playwright = browser_or_skip()
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Visit:
    """A page open in the browser, with every script error it logged."""

    def __init__(self, browser, url: str, wait_plots: bool = False):
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.goto(url, wait_until="commit")
        self.wait("body[data-plotted]" if wait_plots else "body[data-ready]")

    def wait(self, selector: str) -> None:
        self.page.wait_for_selector(selector, state="attached", timeout=60_000)

    def text(self, selector: str = "main") -> str:
        return self.page.inner_text(selector)

    def shot(self, name: str, tmp: Path, at: str | None = None) -> None:
        if not os.environ.get("A2RL_DOCS_SCREENSHOTS"):
            tmp = tmp / "screenshots"  # taken all the same (the page renders for a person), kept apart from docs/
            tmp.mkdir(exist_ok=True)
        else:
            self.wait("body[data-plotted]")
        if at:
            self.page.locator(at).scroll_into_view_if_needed()
            self.page.evaluate(f"document.querySelector({json.dumps(at)}).scrollIntoView()")
        path = tmp / f"viewer-{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        if os.environ.get("A2RL_DOCS_SCREENSHOTS"):
            DOCS_IMG.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, DOCS_IMG / path.name)

    def close(self) -> None:
        self.page.close()
        assert not self.errors, self.errors


# -- a real sweep ------------------------------------------------------------------------------------------------

def run_sweep_for_viewer(cache_dir, grading_port, tmp_path_factory, agents: str, name: str) -> Path:
    """The demo sweep (one seed) with `agents`, Claude Code against the scripted upstream, then `report`."""
    browser_or_skip()  # no browser: nothing here would be looked at
    cli_bin = install_clis()
    fake = FakeUpstream(script=shell_script(COMMAND, "Submitted the model. Done."), usage=USAGE,
                        expect_key=REAL_KEY).start()
    runner = agent_sweeps(cache_dir, grading_port, tmp_path_factory, str(cli_bin))
    go = next(runner)
    try:
        out = go(name, [f"sweep.agents=[{agents}]", "sweep.budget.wall_time_s=45",
                        drivers_override([{"name": "none", "provider": "none"},
                                          fake_driver("fake-anthropic", "anthropic", fake, "claude-fake")])])
    finally:
        fake.stop()
        runner.close()
    write_report(out, n_boot=200)
    return out


@pytest.fixture(scope="module")
def real_sweep(ray_cluster, cache_dir, grading_port, tmp_path_factory):
    """The demo sweep's copy_base and a Claude Code cell: its services start in about a minute, both cells end in
    seconds (the demo's sft trains for a minute more: test_the_demo_sweeps_sft_cell, slow)."""
    out = run_sweep_for_viewer(cache_dir, grading_port, tmp_path_factory, "copy_base,claude_code", "viewer")
    return out, {r["agent"]: r for r in Ledger(out / "ledger.sqlite").cells().values()}


def secrets_of(out: Path) -> list[str]:
    """Every run token and driver key the sweep handed out (its workspaces' run.json and the agent's own `env`
    dump), the real key and the planted one."""
    found = [REAL_KEY, PLANTED_KEY]
    for run_json in out.glob("workspaces/*/run.json"):
        found.append(json.loads(run_json.read_text())["run_token"])
    for dump in out.glob("workspaces/*/code/agent_env.txt"):
        found += re.findall(r"^(?:A2RL_RUN_TOKEN|ANTHROPIC_API_KEY)=(\S+)$", dump.read_text(), re.MULTILINE)
    return found


def test_static_pages_show_the_sweep_its_cells_and_groups(real_sweep, browser):
    out, cells = real_sweep
    cells_ended(cells.values())  # the pages show cells that ran as they should
    site = out / "report" / "viewer"
    from orchestrator.viewer.site import plotly_js

    chosen = plotly_js()  # the copy carries the plotly.js the viewer chose; a note in the footer only for the fallback
    assert (site / "assets" / "plotly.min.js").read_bytes() == chosen.path.read_bytes()
    assert ('<footer class="note">' in (site / "index.html").read_text()) == bool(chosen.note)
    v = Visit(browser, (site / "index.html").as_uri(), wait_plots=True)
    assert v.page.locator("#cells tbody tr").count() == 2
    assert "copy_base" in v.text("#cells") and "claude_code" in v.text("#cells")
    assert "copy_of_base" in v.text("#cells")  # the grader's flag on the copies
    v.page.select_option("select[data-filter=agent]", "claude_code")
    assert v.page.locator("#cells tbody tr").count() == 1 and "1 of 2 cells" in v.text("#cell-count")
    v.page.select_option("select[data-filter=flags]", "-")  # cells without a flag: none here
    assert v.page.locator("#cells tbody tr").count() == 0
    v.page.select_option("select[data-filter=agent]", "")
    v.page.select_option("select[data-filter=flags]", "copy_of_base")
    assert v.page.locator("#cells tbody tr").count() == 2
    v.page.wait_for_selector("#curves .main-svg")  # the curves, drawn by plotly from the report's own curve data
    assert v.page.locator("#heatmap .plot-container").count() == 1
    assert "improvement" in v.text("#tables")
    # the seeds each group needs (analysis/seeds.py), as report.md's Seeds section gives them (no pair of agents:
    # copy_base and claude_code run on different drivers)
    assert v.page.locator("details[data-table=seeds]").count() == 1
    assert v.page.locator("details[data-table=seed_pairs]").count() == 0
    v.close()

    copy = cells["copy_base"]["cell_id"]
    cell = Visit(browser, (site / f"cell-{copy}.html").as_uri(), wait_plots=True)
    outcome = json.loads((out / "cells" / copy / "report.json").read_text())["outcome_class"]
    assert "copy_base / none on arithmetic, seed 0" in cell.text("h1") and outcome in cell.text("#outcome")
    assert cell.page.locator("#trajectory .plot-container").count() == 1
    assert cell.page.locator("#submissions tbody tr").count() == cells["copy_base"]["n_submissions"]
    assert "agent.stdout" in cell.text("#logs")
    cell.close()

    group = Visit(browser, (site / "group-arithmetic__copy_base__none__free.html").as_uri())
    assert group.page.locator("#seeds tbody tr").count() == 1 and outcome in group.text("#seeds")
    group.close()


def page_data(page: Path) -> dict:
    """The JSON a page carries for its script (#page-data)."""
    text = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', page.read_text(), re.S).group(1)
    return json.loads(text)


def test_the_report_and_the_viewer_show_one_models_numbers(real_sweep):
    """`report` builds one model of the sweep and renders it twice: the numbers of its exports and report.md are the
    ones its static pages show, formatted by the one formatter set, and `view` (which builds the model again from the
    ledger, without the traces) shows the same."""
    out, _ = real_sweep
    report_dir = out / "report"
    cells = pd.read_parquet(report_dir / "cells.parquet")
    improvement = pd.read_parquet(report_dir / "improvement.parquet")
    page = page_data(report_dir / "viewer" / "index.html")
    assert [c["key"] for c in page["columns"]] == [c.key for c in formats.CELL_TABLE]

    shown = {c["cell_id"]: c for c in page["cells"]}
    assert sorted(shown) == sorted(cells["cell_id"]) and len(cells) == 2
    for row in tables.plain_frame(cells).to_dict("records"):
        cell = shown[row["cell_id"]]
        elapsed = json.loads((out / "cells" / row["cell_id"] / "report.json").read_text())["elapsed_s"]
        for column in formats.CELL_TABLE:
            if column.key == "flags":
                continue
            value = elapsed if column.key == "elapsed_s" else row[column.key]  # elapsed: the run report's
            assert cell[column.key] == value, column.key
            assert cell["shown"][column.key] == formats.show(value, column.format), column.key
    assert any(c["improvement"] is not None for c in page["cells"])  # numbers, not only dashes, were compared

    exclude = improvement[improvement["infra_errors"] == "exclude"].reset_index(drop=True)
    plotted = page["tables"]["improvement"]
    assert plotted["columns"] == list(improvement.columns)
    assert plotted["rows"] == tables.plain(improvement.to_numpy().tolist())
    table = page["shown_tables"]["improvement"]
    assert len(table["rows"]) == len(exclude) > 0
    markdown = (report_dir / "report.md").read_text()
    for r, text in zip(exclude.to_dict("records"), table["rows"]):
        assert text[table["columns"].index("mean")] == formats.table_value(r["mean"])
        assert formats.fmt(r["mean"], signed=True) in markdown

    live = viewer_data.build_sweep(out, n_boot=200)  # what `view` shows, from the ledger
    for key in ("cells", "columns", "progress", "tables", "shown_tables", "bands", "cell_curves"):
        assert json.loads(json.dumps(live[key])) == page[key], key


@pytest.mark.slow  # about 3 minutes: the demo's sft trains; the default run covers the pages with copy_base's cell
def test_the_demo_sweeps_sft_cell(ray_cluster, cache_dir, grading_port, tmp_path_factory, browser):
    out = run_sweep_for_viewer(cache_dir, grading_port, tmp_path_factory, "sft,copy_base", "viewer-demo")
    rows = Ledger(out / "ledger.sqlite").cells().values()
    cells_ended(rows)
    sft = next(r for r in rows if r["agent"] == "sft")
    v = Visit(browser, (out / "report" / "viewer" / f"cell-{sft['cell_id']}.html").as_uri())
    outcome = json.loads((out / "cells" / sft["cell_id"] / "report.json").read_text())["outcome_class"]
    assert "sft / none on arithmetic, seed 0" in v.text("h1") and outcome in v.text("#outcome")
    assert v.page.locator("#submissions tbody tr").count() == sft["n_submissions"]
    v.page.click("#code-controls button")  # the code at its submission, from the snapshot repository
    v.page.wait_for_selector("#code-view ul.files")
    assert "sft.py" in v.text("#code-view ul.files") and "def " in v.text("#code-view .file")
    v.close()


def test_a_cli_agents_transcript_shows_its_tool_calls_and_driver_calls(real_sweep, browser, tmp_path):
    out, cells = real_sweep
    cell = cells["claude_code"]
    v = Visit(browser, (out / "report" / "viewer" / f"cell-{cell['cell_id']}.html").as_uri())
    transcript = v.text("#trace")
    assert "tool call · Bash" in transcript and "SUBMITTED" in transcript  # the call and what it gave back
    assert "driver call" in transcript and "1000 in / 50 out / 200 cached tokens" in transcript
    assert "submission #1" in transcript and "copy_of_base" in transcript
    assert "Submitted the model. Done." in transcript  # the model's last message
    assert f"token={MASK}" in transcript and f"key={MASK}" in transcript and f"real={MASK}" in transcript
    v.shot("transcript", tmp_path, at="#transcript-section")
    v.page.uncheck("input[data-kind=tool_result]")  # the kind filters hide what is not wanted
    assert v.page.locator("#trace .entry.tool-result").count() == 1
    assert not v.page.is_visible("#trace .entry.tool-result") and v.page.is_visible("#trace .entry.tool-call")
    assert "claude-fake" in v.text("#outcome") and "$0.0" in v.text(".cards")
    v.page.click("#code-controls button")
    v.page.wait_for_selector("#code-view ul.files")
    v.page.click("text=agent_env.txt")  # the agent's `env` dump: its run token and proxy key, masked
    env_dump = v.text("#code-view .file")
    assert "A2RL_RUN_TOKEN=" + MASK in env_dump
    v.close()


def test_no_token_or_key_reaches_a_page(real_sweep):
    out, _ = real_sweep
    secrets = secrets_of(out)
    assert len(secrets) >= 6  # two run tokens (the CLI's twice: run.json, its env), its proxy key, the real and planted
    trace = "".join(p.read_text() for p in out.glob("cells/*/attempt-*/trace.jsonl"))
    # planted: the records hold the key and the run token as the agent printed them (the real key the proxy already
    # replaced with "***" before the agent could see it)
    assert PLANTED_KEY in trace and any(s in trace for s in secrets[2:])
    for path in (out / "report" / "viewer").rglob("*"):
        if path.is_file() and path.suffix in (".html", ".js") and path.parent.name != "assets":
            text = path.read_text()
            leaked = [s for s in secrets if s in text]
            assert not leaked, (path, leaked)


def test_view_serves_the_same_pages_on_loopback(real_sweep, browser):
    out, cells = real_sweep
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "view", f"output_dir={out}", "port=0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        base = re.search(r"http://(\S+)/", line).group(0)
        assert base.startswith("http://127.0.0.1:"), line  # loopback unless asked otherwise
        secrets = secrets_of(out)
        for path in ["", f"cell-{cells['claude_code']['cell_id']}.html",
                     f"data/cell-{cells['claude_code']['cell_id']}-trace-0.js",
                     f"data/cell-{cells['claude_code']['cell_id']}-code.js"]:
            body = urllib.request.urlopen(base + path, timeout=60).read().decode()
            assert not [s for s in secrets if s in body], path
        for missing in ("cell-nope.html", "assets/../ledger.sqlite", "data/cell-nope-trace-0.js"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(base + missing, timeout=30)
            assert e.value.code == 404
        v = Visit(browser, base)
        assert v.page.locator("#cells tbody tr").count() == 2 and v.page.get_attribute("body", "data-live")
        v.close()
        v = Visit(browser, base + f"cell-{cells['claude_code']['cell_id']}.html")
        assert "tool call · Bash" in v.text("#trace")
        v.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- a synthetic sweep: a long trace, a summary, an audit, code that changes -------------------------------------

@pytest.fixture(scope="module")
def long_trace(tmp_path_factory):
    """Six cells; the first with 1,200 trace events (three transcript pages), a planted key in its second tool call,
    an LLM-written summary that tries to run a script, and an audit whose finding cites a trace line on page two."""
    out = tmp_path_factory.mktemp("viewer-synthetic") / "out"
    made = make_sweep(out, n_cells=6, trace_events_n=1200, secret=PLANTED_KEY)
    big = made["big"]
    cell_dir = out / "cells" / big
    write_json_durably(cell_dir / "summary.json", {
        "text": "### What the agent tried\n\nIt trained in rounds.<script>window.pwned = 1</script>\n\n"
                "### Outcome\n\nimproved", "driver": "gpt", "model": "gpt-fake", "input_tokens": 10,
        "output_tokens": 5, "cost_usd": 0.001, "key": "k"})
    rows = Ledger(out / "ledger.sqlite").events(big, kind="agent_trace")
    cited = rows[700]  # on the second page of 500
    write_json_durably(cell_dir / "audit.json", {
        "key": "k", "driver": "gpt", "model": "gpt-fake", "error": None, "verdict_is_earlier": False,
        "findings": {"credentials": [{"source": "trace", "where": f"t={cited['t']:.1f} tool_call",
                                      "quote": "cat ~/.netrc"}], "downloads": [], "grader_probed": [],
                     "evaluator_edited": [], "not_trained": []},
        "verdict": {"credentials": {"verdict": "yes", "reason": "it read a credential file",
                                    "evidence": [{"quote": "cat ~/.netrc", "quote_found": True}]}}})
    return out, made, cited


def test_a_long_transcript_is_paged_and_audit_evidence_links_to_its_line(long_trace, browser, tmp_path):
    out, made, cited = long_trace
    index = write_site(out, n_boot=200)
    sweep = Visit(browser, index.as_uri())
    assert sweep.page.locator("#cells tbody tr").count() == 6
    sweep.shot("sweep", tmp_path)
    sweep.close()
    v = Visit(browser, (index.parent / f"cell-{made['big']}.html").as_uri())
    v.shot("cell", tmp_path)
    assert v.page.locator("#trace .entry").count() == 500  # one page at a time
    assert v.page.locator("#trace-controls select option").count() == 3
    assert MASK in v.text("#trace") and PLANTED_KEY not in v.page.content()
    v.page.click("#trace-controls button:has-text('later')")
    v.page.wait_for_selector("#trace .entry[id=e-500]")
    assert "window.pwned" in v.text("#summary") and v.page.evaluate("window.pwned") is None  # shown, never run
    assert v.page.locator("#summary h3").count() == 2  # the summary's markdown, rendered
    v.page.click("#audit a.trace-link")  # the audit's finding opens the trace where it was seen
    v.page.wait_for_selector("#trace .entry.highlight")
    assert v.page.get_attribute("#trace .entry.highlight", "data-t") == f"{cited['t']:.1f}"
    assert v.page.is_visible("#trace .entry.highlight")
    assert "it read a credential file" in v.text("#audit")
    # the code at two submissions and the diff between them
    v.page.click("#code-controls button")
    v.page.wait_for_selector("#code-controls select[data-side=a]")
    v.page.select_option("#code-controls select[data-side=a]", "0")
    v.page.wait_for_selector("#code-view .diff")
    assert "train.py" in v.text("#code-view") and v.page.locator("#code-view .diff-body .add").count() > 0
    v.shot("code-diff", tmp_path, at="#code-section")
    v.close()


def test_a_live_page_follows_the_ledger(long_trace, browser, tmp_path):
    out, made, _ = long_trace
    live = tmp_path / "out"
    shutil.copytree(out, live)
    late = bench.spec("task0", "sft", "none", 9)  # a cell added to the sweep: pending until it runs
    ledger = Ledger(live / "ledger.sqlite")
    ledger.add_cells([late])
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "view", f"output_dir={live}", "port=0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base = re.search(r"http://(\S+)/", proc.stdout.readline()).group(0)
        pending = Visit(browser, base + f"cell-{late.cell_id}.html")
        assert "pending" in pending.text("#outcome") and "No submissions" in pending.text("main")
        pending.close()
        v = Visit(browser, base)
        assert "pending 1" in v.text(".lead")
        ledger.mark_running(late.cell_id, 1, time.time())
        ledger.finish(late.cell_id, "agent_error", time.time(), error="exit code 1")
        v.page.wait_for_function("!document.querySelector('.lead').innerText.includes('pending')", timeout=60_000)
        assert "agent_error" in v.text(".lead")
        v.close()
    finally:
        ledger.close()
        proc.terminate()
        proc.wait(timeout=30)


# -- without a browser -------------------------------------------------------------------------------------------

def registers_every_trace_type_the_pages_use(plotly_file: Path) -> None:
    """A trace type the page script uses must be one the plotly.js served registers, or its plot would not be drawn."""
    from orchestrator.viewer.site import ASSETS

    script = (ASSETS / "viewer.js").read_text()
    registered = set(re.findall(r'moduleType:"trace",name:"(\w+)"', plotly_file.read_text()))
    inputs = {"checkbox", "search", "text"}  # <input type=...>, not traces
    used = set(re.findall(r'type: "(\w+)"', script)) - inputs
    assert used == {"scatter", "heatmap"} and used <= registered, (used, registered)


def test_the_pages_plotly_js_is_the_bundle_setup_placed(tmp_path):
    """The pages load plotly.js's cartesian bundle, not the whole library (a third of its size, so plots open in
    under 2 s: benchmarks/bench_viewer.py), as scripts/setup fetched it into the environment (the npm registry's
    tarball of the version its URL names, checked against its pinned sha256), with its licence beside it."""
    from orchestrator.viewer.site import BUNDLE, BUNDLE_DIR, Site, plotly_js

    if not (BUNDLE_DIR / BUNDLE).is_file():
        pytest.skip(f"scripts/setup could not fetch plotly.js's cartesian bundle into {BUNDLE_DIR} here (its warning "
                    "said why); the viewer uses the whole plotly.js, which the next test checks")
    chosen = plotly_js()
    assert chosen.path == BUNDLE_DIR / BUNDLE and chosen.note == ""
    version = re.search(r"plotly\.js-cartesian-dist-min-([\d.]+)\.tgz", (ROOT / "scripts" / "setup").read_text())[1]
    assert chosen.path.read_text()[:200].count(f"plotly.js (cartesian - minified) v{version}") == 1
    registers_every_trace_type_the_pages_use(chosen.path)
    site = Site(tmp_path)  # (assets need no ledger)
    assert site.get("assets/plotly.min.js").body == chosen.path.read_bytes()
    assert site.get("assets/plotly.LICENSE.txt").body.startswith(b"MIT License")


def test_setup_places_the_bundle_only_when_its_sha256_matches(tmp_path):
    """scripts/setup's fetch_plotly_bundle (run alone by sourcing the script) on a tarball laid out as the npm
    registry's, from a file:// URL (no download at test time): a wrong sha256 places nothing and says so in one warning
    line; the right one places the bundle and its licence into the venv's share/a2rl/; once there, it is not fetched
    again (its URL is not even read)."""
    import hashlib
    import tarfile

    package = tmp_path / "package"
    package.mkdir()
    (package / "plotly-cartesian.min.js").write_text("/* plotly.js (cartesian - minified) */")
    (package / "LICENSE").write_text("MIT License")
    with tarfile.open(tmp_path / "bundle.tgz", "w:gz") as tar:
        tar.add(package, arcname="package")
    url, sha = (tmp_path / "bundle.tgz").as_uri(), hashlib.sha256((tmp_path / "bundle.tgz").read_bytes()).hexdigest()
    venv = tmp_path / "venv"

    def fetch(url: str, sha: str) -> str:
        proc = subprocess.run(["bash", "-c", 'source scripts/setup && fetch_plotly_bundle "$@"', "-", str(venv), url,
                               sha], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and not proc.stderr, proc
        return proc.stdout

    said = fetch(url, "0" * 64)
    assert len(said.splitlines()) == 1 and "WARNING" in said and "sha256" in said and not venv.exists()
    assert fetch(url, sha) == ""
    share = venv / "share" / "a2rl"
    assert (share / "plotly-cartesian.min.js").read_text() == "/* plotly.js (cartesian - minified) */"
    assert (share / "plotly-cartesian.LICENSE.txt").read_text() == "MIT License"
    assert fetch((tmp_path / "gone.tgz").as_uri(), sha) == ""  # there already: nothing fetched, nothing said
    shutil.rmtree(share)
    said = fetch((tmp_path / "gone.tgz").as_uri(), sha)
    assert len(said.splitlines()) == 1 and "could not download" in said


def test_without_the_bundle_the_pages_load_the_whole_plotly_js_and_say_so(long_trace, tmp_path, monkeypatch, caplog):
    """Where scripts/setup could not fetch the bundle, the viewer serves the plotly package's whole plotly.js (so its
    plots are still drawn, later), logs that once and notes it in every page's footer."""
    import plotly

    from orchestrator.viewer import site as viewer_site

    monkeypatch.setattr(viewer_site, "BUNDLE_DIR", tmp_path / "empty")  # the lookup finds nothing there
    whole = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    chosen = viewer_site.plotly_js()
    assert chosen.path == whole and chosen.licence is None and "whole plotly.js" in chosen.note
    registers_every_trace_type_the_pages_use(whole)
    out, _, _ = long_trace
    with caplog.at_level("WARNING", logger="orchestrator.viewer.site"):
        index = write_site(out, tmp_path / "viewer", n_boot=200)
    assert [r.getMessage() for r in caplog.records] == [f"viewer: {chosen.note}"]
    assert (index.parent / "assets" / "plotly.min.js").read_bytes() == whole.read_bytes()
    assert not (index.parent / "assets" / "plotly.LICENSE.txt").exists()
    for page in [index, *index.parent.glob("cell-*.html")]:
        assert f'<footer class="note">{chosen.note}</footer>' in page.read_text().replace("&#39;", "'"), page


def test_secrets_are_masked_by_value_and_by_look():
    m = Masker({"tok-abcdefghijklmnop"})
    text = json.dumps({"out": "tok-abcdefghijklmnop A2RL_RUN_TOKEN=xyz12345678 OPENAI_API_KEY=sk-proj-" + "a" * 20
                              + " Bearer abcdefghijklmnopqrstuv -H \"Authorization: Bearer $A2RL_RUN_TOKEN\" a2rl-"
                              + "b" * 32 + " sort_key=lambda_value", "run": json.dumps({"run_token": "tok_zzzzzzzz1"})})
    masked = m.mask(text)
    for secret in ("tok-abcdefghijklmnop", "xyz12345678", "sk-proj-", "abcdefghijklmnopqrstuv", "a2rl-bbbb",
                   "tok_zzzzzzzz1"):
        assert secret not in masked, secret
    assert "Bearer $A2RL_RUN_TOKEN" in masked and "sort_key=lambda_value" in masked  # names and code stay


def test_view_refuses_a_folder_without_a_ledger_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "view", f"output_dir={tmp_path}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "no ledger" in proc.stderr
    from orchestrator.viewer.server import view_main

    for args in ([], [f"output_dir={tmp_path}", "colour=red"], [f"output_dir={tmp_path}", "port=http"]):
        with pytest.raises(SystemExit) as e:
            view_main(args)
        assert e.value.code == 2
