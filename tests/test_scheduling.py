"""Real sweeps on the session's Ray cluster: ledger resume and extension, reservations, budgets, sandbox."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.ledger import Ledger
from tests.support.cells import cells_ended

# the sleeper ends by its wall time whatever it is; 30 s leaves the noop cell room to start and exit on a loaded
# machine (4 s did not: its sandboxed python start ran past it at the suite's own load)
SMOKE = ["sweep=smoke", "sweep.budget.wall_time_s=30"]


def ledger_of(out: Path) -> Ledger:
    return Ledger(out / "ledger.sqlite")


def test_smoke_sweep_records_outcomes_and_resume_runs_nothing(run_sweep):
    plan, text, out = run_sweep(SMOKE)
    assert len(plan.to_run) == 2
    cells = ledger_of(out).cells()
    by_agent = {row["agent"]: row for row in cells.values()}
    assert by_agent["noop"]["status"] == "completed"
    assert by_agent["sleeper"]["status"] == "budget_exhausted" and by_agent["sleeper"]["limit_hit"] == "wall_time"
    assert all(row["attempts"] == 1 for row in cells.values())
    assert "2/2 done" in text
    kinds = {e["kind"] for e in ledger_of(out).events()}
    assert {"status", "outcome"} <= kinds
    # stdout/stderr are kept per cell, outside the workspace
    sleeper = by_agent["sleeper"]["cell_id"]
    assert "working until the budget ends" in (out / "cells" / sleeper / "attempt-1" / "agent.stdout").read_text()

    plan, text, _ = run_sweep(SMOKE, output_dir=out)
    assert plan.to_run == []
    assert all(row["attempts"] == 1 for row in ledger_of(out).cells().values())


def test_adding_seeds_and_agents_runs_only_new_cells(run_sweep):
    _, _, out = run_sweep(["sweep=smoke", "sweep.agents=[noop]"])
    plan, _, _ = run_sweep(["sweep=smoke", "sweep.agents=[noop]", "sweep.seeds=[0,1]"], output_dir=out)
    assert [(c.agent.name, c.seed) for c in plan.to_run] == [("noop", 1)]
    plan, _, _ = run_sweep(["sweep=smoke", "sweep.agents=[noop,command]", "sweep.seeds=[0,1]",
                            "+sweep.extra=1", "agent=command", "agent.command=exit 3"], output_dir=out)
    assert {c.agent.name for c in plan.to_run} == {"command"}
    rows = ledger_of(out).cells()
    cells_ended([r for r in rows.values() if r["agent"] == "noop"])
    errored = [r for r in rows.values() if r["agent"] == "command"]
    assert {r["status"] for r in errored} == {"agent_error"}
    assert all("agent exited with code 3" in r["error"] for r in errored), errored
    # errored cells are finished unless asked: rerun_errored runs exactly those again
    plan, _, _ = run_sweep(["sweep=smoke", "sweep.seeds=[0,1]", "agent=command", "agent.command=exit 3"],
                           output_dir=out)
    assert plan.to_run == []
    plan, _, _ = run_sweep(["sweep=smoke", "sweep.seeds=[0,1]", "agent=command", "agent.command=exit 3",
                            "rerun_errored=true"], output_dir=out)
    assert len(plan.to_run) == 2
    rerun = [r for r in ledger_of(out).cells().values() if r["agent"] == "command"]
    assert {r["attempts"] for r in rerun} == {2}
    assert all(r["status"] == "agent_error" and "agent exited with code 3" in r["error"] for r in rerun), rerun


def test_dry_run_lists_cells_and_gpu_hours_and_runs_nothing(run_sweep, tmp_path):
    plan, text, out = run_sweep(["sweep=smoke", "sweep.seeds=[0,1,2]", "sweep.budget.gpus=1",
                                 "sweep.budget.wall_time_s=3600", "dry_run=true"])
    assert len(plan.to_run) == 6
    assert "6 to run" in text and "6.0 GPU-hours" in text and "emulated_gpu=1" in text
    assert not (out / "ledger.sqlite").exists()


def test_gpu_reservations_never_overlap(run_sweep):
    """Two cells that each need the only (emulated) GPU run one after the other; meanwhile the progress says what the
    pending one waits for."""
    _, printed, out = run_sweep(["sweep=smoke", "sweep.agents=[sleeper]", "sweep.seeds=[0,1]",
                                 "sweep.budget.gpus=1", "sweep.budget.wall_time_s=3", "cluster.pending_report_s=0.2"])
    rows = sorted(ledger_of(out).cells().values(), key=lambda r: r["started_at"])
    assert [(r["status"], r["limit_hit"]) for r in rows] == [("budget_exhausted", "wall_time")] * 2, rows
    assert rows[0]["ended_at"] <= rows[1]["started_at"]
    waits = [line.split(" | ")[1] for line in printed.splitlines() if " | pending: " in line]
    assert waits and all(w.startswith(("pending: 1 x (CPU=1, emulated_gpu=1); free now: ",
                                       "pending: 2 x (CPU=1, emulated_gpu=1); free now: ")) for w in waits), printed


def agent_processes(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in (p.info["cmdline"] or [])):
                found.append(p)
        except psutil.Error:
            pass
    return found


def command_agent(tmp_path: Path, name: str, script: str, extra_files: tuple[Path, ...] = ()) -> list[str]:
    """A command agent whose script (and extra files) travel into the workspace's code/ through agent.files."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(script))
    files = ",".join(str(f) for f in (path, *extra_files))
    return ["sweep=smoke", "agent=command", f"agent.files=[{files}]", f"agent.command=bash code/{name}"]


@pytest.mark.parametrize("sandboxed", [True, False])
def test_budget_kills_the_whole_group_no_orphans(run_sweep, tmp_path, sandboxed):
    marker = f"a2rl-orphan-{os.getpid()}-{int(sandboxed)}"
    # a child that ignores SIGTERM, and a grandchild that also leaves the process group (setsid)
    overrides = command_agent(tmp_path, "spawn.sh", f"""
        bash -c 'trap "" TERM; exec -a {marker}-child sleep 300' &
        setsid bash -c 'trap "" TERM; exec -a {marker}-grandchild sleep 300' &
        sleep 300
    """) + ["sweep.budget.wall_time_s=3", "sandbox.kill_grace_s=1"]
    if not sandboxed:
        overrides += ["sandbox.required=false"]
    _, _, out = run_sweep(overrides)
    row = next(iter(ledger_of(out).cells().values()))
    assert (row["status"], row["limit_hit"]) == ("budget_exhausted", "wall_time"), row
    time.sleep(0.5)
    left = agent_processes(marker)
    names = [" ".join(p.cmdline()) for p in left]
    for p in left:
        p.kill()
    if sandboxed:
        assert names == []
    else:
        # Without the PID namespace a grandchild that called setsid escapes the group: the reason the sandbox
        # is on by default. The in-group child that ignores SIGTERM is still killed.
        assert all("grandchild" in n for n in names), names


def test_sandbox_hides_secrets_and_other_cells(run_sweep, cache_dir, tmp_path):
    import ray

    gcs_port = ray.get_runtime_context().gcs_address.rsplit(":", 1)[1]
    ray_probe = tmp_path / "ray_probe.py"
    ray_probe.write_text(RAY_PROBE)
    # The probe can tell: outside the sandbox, with the token in $HOME, it gets in.
    outside = subprocess.run([sys.executable, str(ray_probe), gcs_port], capture_output=True, text=True, timeout=60)
    assert "RAY_CONNECTED" in outside.stdout, outside.stdout + outside.stderr
    out = tmp_path / "out"
    out.mkdir()
    (out / "planted-secret.txt").write_text("TOP-SECRET-LEDGER")
    (cache_dir / "grading").mkdir(parents=True, exist_ok=True)
    (cache_dir / "grading" / "planted-secret.txt").write_text("TOP-SECRET-EVAL")
    secrets = [out / "planted-secret.txt", cache_dir / "grading" / "planted-secret.txt", Path(__file__).resolve(),
               tmp_path / "probe.sh"]
    overrides = command_agent(tmp_path, "probe.sh", f"""
        for f in {' '.join(map(str, secrets))}; do
          if cat "$f" >/dev/null 2>&1; then echo "LEAK $f"; else echo "HIDDEN $f"; fi
        done
        echo "WORKSPACES_SEEN $(ls {out}/workspaces | wc -l)"
        touch /usr/a2rl-probe 2>/dev/null && echo WROTE_SYSTEM || echo SYSTEM_READONLY
        echo ok > output/probe.txt && echo WORKSPACE_WRITABLE
        test -f model/config.json && echo MODEL_VISIBLE
        test -f data/train.jsonl && echo TRAIN_VISIBLE
        # The Ray cluster listens on the machine's ports: without its token (in the hidden $HOME) it refuses.
        {sys.executable} code/ray_probe.py {gcs_port}
        sleep 2  # so both cells' workspaces exist at once
    """, extra_files=(ray_probe,)) + ["sweep.seeds=[0,1]", "sandbox.network=host",  # Ray's ports are reachable
                                      "sweep.budget.wall_time_s=300"]  # the probe ends it: smoke's 10 s did not
    _, _, out = run_sweep(overrides, output_dir=out)                 # fit python's start on a loaded machine
    rows = ledger_of(out).cells().values()
    assert len(rows) == 2 and all(row["status"] == "completed" for row in rows), rows
    for row in rows:
        text = (out / "cells" / row["cell_id"] / "attempt-1" / "agent.stdout").read_text()
        assert "LEAK" not in text and text.count("HIDDEN") == len(secrets), text
        assert "WORKSPACES_SEEN 1" in text  # its own, never another cell's
        for fact in ("SYSTEM_READONLY", "WORKSPACE_WRITABLE", "MODEL_VISIBLE", "TRAIN_VISIBLE",
                     "RAY_REFUSED AuthenticationError"):
            assert fact in text, text


def test_hidden_folders_and_files_read_empty_in_the_sandbox(tmp_path):
    from orchestrator import sandbox

    folder, token, workspace = tmp_path / "records", tmp_path / "auth_token", tmp_path / "ws"
    folder.mkdir()
    (folder / "ledger.txt").write_text("SECRET")
    token.write_text("TOKEN")
    workspace.mkdir()
    argv = sandbox.bwrap_argv(workspace, [folder, token], []) + ["--", "/bin/sh", "-c", f"ls {folder}; cat {token}"]
    seen = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0 and seen.stdout == "", seen
    assert token.read_text() == "TOKEN"  # hidden from the sandbox, untouched outside


def test_paths_given_through_symbolic_links_work_in_the_sandbox(tmp_path):
    """A folder the sandbox is given through a link that lies in a hidden folder (a CLI folder, a virtualenv linked
    into the checkout) is bound where it points and reached by the name given; so is a workspace behind a link."""
    from orchestrator import sandbox

    real, hidden = tmp_path / "real-tools", tmp_path / "checkout"
    (real / "bin").mkdir(parents=True)
    tool = real / "bin" / "tool"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    hidden.mkdir()
    (hidden / "tools").symlink_to(real)      # the link, inside a hidden folder
    (tmp_path / "ws-real").mkdir()
    (tmp_path / "ws-link").symlink_to(tmp_path / "ws-real")
    given = hidden / "tools" / "bin" / "tool"
    argv = sandbox.bwrap_argv(tmp_path / "ws-link", [hidden, tmp_path], [hidden / "tools"]) + [
        "--", "/bin/sh", "-c", f"{given} && ls {hidden} && echo made > {tmp_path / 'ws-link' / 'note'}"]
    seen = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0 and seen.stdout == "tool ran\ntools\n", seen
    assert (tmp_path / "ws-real" / "note").read_text() == "made\n"
    # what is hidden inside a link's target stays hidden under the link's name (a virtualenv linked into the
    # checkout holds packaged eval data): the target's secret folder and file read empty there, the rest is shown
    secret = real / "secret"
    secret.mkdir()
    (secret / "answers").write_text("42")
    (real / "key").write_text("k")
    argv = sandbox.bwrap_argv(None, [hidden, secret, real / "key"], [hidden / "tools"]) + [
        "--", "/bin/sh", "-c", f"cd {hidden / 'tools'} && ls && ls secret && cat key"]
    seen = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0 and seen.stdout == "bin\nkey\nsecret\n", seen


# Reads the cluster's key-value store straight from its GCS, as any local process could without token auth.
RAY_PROBE = """import sys
from ray._raylet import GcsClient
try:
    GcsClient(address="127.0.0.1:" + sys.argv[1]).internal_kv_keys(b"", namespace=None, timeout=5)
    print("RAY_CONNECTED")
except Exception as e:
    print("RAY_REFUSED", type(e).__name__)"""


def test_infra_errors_are_retried_by_tune_then_recorded(run_sweep, tmp_path):
    """A workspace root that cannot be created is the system's fault: retried, then infra_error."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the workspace root should be")
    _, text, out = run_sweep(["sweep=smoke", "sweep.agents=[noop]", f"cluster.workspace_root={blocker}/ws",
                              "cluster.max_retries=1"])
    row = next(iter(ledger_of(out).cells().values()))
    assert row["status"] == "infra_error", row
    assert row["attempts"] == 2  # the first try and one retry
    assert "ws" in row["error"] and ("NotADirectoryError" in row["error"] or "FileExistsError" in row["error"])
    kinds = [e["payload"].get("status") for e in ledger_of(out).events(kind="status")]
    assert "retrying" in kinds and "retrying" in text


def test_a_bug_in_a2rl_ends_the_cell_once_with_its_traceback_and_the_summary_says_so(run_sweep):
    """An unexpected exception in a2rl's code (here planted in an agent kind's command line) is not retried: the cell
    ends once as infra_error marked a2rl_bug, its traceback in the outcome, and the sweep's summary names it."""
    _, text, out = run_sweep(["sweep=smoke", "agent=command", "agent.kind=buggy", "agent.command=true",
                              "imports=[tests.support.buggy]", "cluster.max_retries=2"])
    row = next(iter(ledger_of(out).cells().values()))
    assert row["status"] == "infra_error" and row["attempts"] == 1, row
    assert "a2rl bug" in row["error"] and "KeyError" in row["error"], row
    import json

    outcome_file = out / "cells" / row["cell_id"] / "attempt-1" / "outcome.json"
    outcome = json.loads(outcome_file.read_text())
    assert outcome["a2rl_bug"] and "a planted bug" in outcome["traceback"] and "in command" in outcome["traceback"]
    assert "bug in a2rl itself" in text and str(outcome_file) in text, text
    assert "retrying" not in text


def test_the_sweep_survives_its_trial_controller_dying(run_sweep, monkeypatch):
    """When Ray's memory monitor kills a trial's worker, Tune's actor manager meets an OutOfMemoryError it does not
    know and raises "Caught unexpected exception" out of its controller's step: Tune's controller dies (seen with a
    memory bomb, which left both cells `running`). That one fault is injected where Tune raises it, in the
    controller's step (a Tune callback), since Ray's memory monitor cannot be aimed at one worker here; the rest is
    real: no cell is left running, the cut-off cell runs again, and the sweep finishes. Two sleeper cells: each ends
    by its budget whatever the machine's speed (a noop cell beside one ran out of its 4 s at load 14)."""
    from orchestrator import callbacks
    from orchestrator.cell_report import CellReport

    original, fired = callbacks.LedgerCallback.on_trial_result, []

    def dies_once(self, iteration, trials, trial, result, **info):
        original(self, iteration, trials, trial, result, **info)
        if not fired and CellReport.from_metrics(result).started_at is not None:
            fired.append(trial)
            raise RuntimeError("Caught unexpected exception: Task was killed due to the node running low on memory")

    monkeypatch.setattr(callbacks.LedgerCallback, "on_trial_result", dies_once)
    _, text, out = run_sweep(SMOKE + ["sweep.agents=[sleeper]", "sweep.seeds=[0,1]", "cluster.max_retries=1"])
    rows = ledger_of(out).cells().values()
    assert fired and "trial controller died" in text and "retrying" in text, text
    assert [(r["status"], r["limit_hit"]) for r in rows] == [("budget_exhausted", "wall_time")] * 2, \
        [dict(r) for r in rows]
    assert max(r["attempts"] for r in rows) == 2
    assert not [p for p in psutil.process_iter(["cmdline"]) if "working until the budget ends" in
                " ".join(p.info["cmdline"] or [])]


def test_an_agents_python_that_cannot_run_in_the_sandbox_is_one_config_error(run_sweep, monkeypatch):
    """Checked once per sweep before any cell starts, in a sandbox made as a cell's is: here the agents' packages
    lack one (as when a folder above them is closed to the agents' uid), and the sweep stops with one line."""
    from contracts.specs import ConfigError
    from orchestrator import preflight

    monkeypatch.setattr(preflight, "AGENTS_IMPORT", "import torch, a2rl_no_such_package")
    with pytest.raises(ConfigError, match=r"(?s)does not run in their sandbox: .*a2rl_no_such_package.*chmod o\+x"):
        run_sweep(SMOKE)


def test_reservations_that_can_never_fit_are_refused_before_anything_waits(run_sweep):
    """The session cluster has 4 CPUs and 1 emulated GPU. Ray would queue these for ever, in silence."""
    from contracts.specs import ConfigError

    with pytest.raises(ConfigError, match=r"cell noop/arithmetic/seed0 .*reserves .*emulated_gpu=2.*sweep.budget.gpus"):
        run_sweep(SMOKE + ["agent=noop", "sweep.budget.gpus=2"])
    # one GPU for the cell, and the task's grader holds the same one
    with pytest.raises(ConfigError, match=r"reserves .*emulated_gpu=1.*grader"):
        run_sweep(SMOKE + ["agent=noop", "sweep.budget.gpus=1", "task=arithmetic", "task.grader.num_gpus=1"])
    with pytest.raises(ConfigError, match=r"grader of task arithmetic reserves CPU=8"):
        run_sweep(SMOKE + ["agent=noop", "task=arithmetic", "task.grader.num_cpus=8"])


def test_reservation_check_places_services_first_and_only_warns_on_a_growing_cluster():
    from orchestrator.preflight import check_fits
    from contracts.specs import ConfigError

    nodes = [{"CPU": 16, "GPU": 1}, {"CPU": 2}]
    grader = [("the grader of task t", "task.grader.num_gpus", {"CPU": 1, "GPU": 0.5})]
    assert check_fits([("c", {"CPU": 4, "GPU": 0.5})], grader, nodes) == []  # shares the GPU
    with pytest.raises(ConfigError, match="cell c reserves CPU=1, GPU=1"):
        check_fits([("c", {"CPU": 1, "GPU": 1})], grader, nodes)
    assert check_fits([("c", {"CPU": 2})], grader, nodes) == []  # the small node takes it
    warnings = check_fits([("c", {"CPU": 1, "GPU": 2})], grader, nodes, can_grow=True)
    assert len(warnings) == 1 and "cell c" in warnings[0]


def test_a_failed_preflight_is_an_infra_error_retried_before_the_agent_starts(run_sweep, tmp_path):
    """A node whose GPUs do not work inside the sandbox: found before the budget starts, retried, then infra_error.
    (`auto` checks CUDA for cells with real GPUs; here the check is a command that fails, as a broken GPU would.)"""
    _, text, out = run_sweep(["sweep=smoke", "sweep.agents=[noop]", "cluster.max_retries=1",
                              "sandbox.preflight='echo no usable GPU >&2; exit 3'"])
    row = next(iter(ledger_of(out).cells().values()))
    assert row["status"] == "infra_error" and row["attempts"] == 2, row
    assert "PreflightFailed" in row["error"] and "no usable GPU" in row["error"], row["error"]
    assert not list((out / "cells" / row["cell_id"]).glob("attempt-*/agent.stdout"))  # the agent never started


def test_the_shared_storage_preflight_passes_over_a_node_that_left_after_it_was_listed(ray_cluster, tmp_path,
                                                                                       monkeypatch):
    """`ray.nodes()` lists a node that has just died as alive for a while (a restarted orchestrator after a node
    loss), but a task pinned to it is unschedulable. The preflight checks the nodes that are there instead of failing
    the sweep."""
    import secrets

    from orchestrator.preflight import check_nodes_share

    listed = ray_cluster.nodes()
    stale = listed + [{**listed[0], "NodeID": secrets.token_hex(28)}]  # a gone node, still listed alive
    monkeypatch.setattr(ray_cluster, "nodes", lambda: stale)
    check_nodes_share({"output_dir": tmp_path / "out"})
    assert list((tmp_path / "out").iterdir()) == []  # each node took its probe back
