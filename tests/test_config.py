"""Sweep expansion, stable cell ids, and config mistakes reported in one clear line."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import orchestrator.sweep as sweep_module
from contracts.specs import ConfigError
from contracts.task_spec import TaskSpec
from orchestrator.sweep import check_cluster, expand, load_named
from tests.conftest import ROOT, compose


def cells_for(*overrides):
    return expand(compose(list(overrides)))


def test_demo_expands_agents_by_seeds():
    cells = cells_for("sweep=demo")
    assert len(cells) == 4
    assert {(c.agent.name, c.seed) for c in cells} == {("sft", 0), ("sft", 1), ("copy_base", 0), ("copy_base", 1)}
    assert all(c.driver.name == "none" and c.task_name == "arithmetic" for c in cells)
    assert cells[0].budget.wall_time_s == 90  # the sweep's budget overrides the budget group's


def test_cell_ids_are_stable_and_distinct():
    ids = [c.cell_id for c in cells_for("sweep=demo")]
    assert len(set(ids)) == 4
    assert ids == [c.cell_id for c in cells_for("sweep=demo")]
    # the same spec hashes the same in another process (no dict-order or PYTHONHASHSEED dependence)
    code = ("from tests.conftest import compose; from orchestrator.sweep import expand; "
            "print(','.join(c.cell_id for c in expand(compose(['sweep=demo']))))")
    other = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                           env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin", "HOME": str(ROOT)}, check=True)
    assert other.stdout.strip().split(",") == ids


def test_ids_change_with_what_decides_the_result_only():
    base = cells_for("sweep=demo")[0]
    assert cells_for("sweep=demo", "sweep.budget.wall_time_s=91")[0].cell_id != base.cell_id
    assert cells_for("sweep=demo", "sweep.name=other")[0].cell_id == base.cell_id
    assert cells_for("sweep=demo", "task=arithmetic", "task.grader.batch_size=3")[0].cell_id == base.cell_id


def test_a_drivers_window_decides_the_result_and_its_tokenizer_does_not():
    """driver.context_window sets the agent's limits; unset (a local server is asked) it keeps the ids cells had
    before the key existed. driver.tokenizer only counts cut calls' tokens."""
    import dataclasses

    from contracts.specs import DriverSpec

    cell = cells_for("sweep=demo")[0]

    def with_driver(**extra):
        return dataclasses.replace(cell, driver=DriverSpec("local", "openai-compatible", "m", extra)).cell_id

    assert with_driver() == with_driver(context_window=None) == with_driver(tokenizer="/models/m")
    assert with_driver(context_window=2048) != with_driver()


def test_adding_seeds_keeps_existing_ids():
    two = {c.cell_id for c in cells_for("sweep=demo")}
    three = {c.cell_id for c in cells_for("sweep=demo", "sweep.seeds=[0,1,2]")}
    assert two < three and len(three - two) == 2
    assert len(cells_for("sweep=demo", "sweep.seeds=3")) == 6  # a count means seeds 0..n-1


def test_selecting_a_group_narrows_the_sweep_with_overrides():
    cells = cells_for("sweep=smoke", "agent=command", "agent.command=echo hi")
    assert {c.agent.name for c in cells} == {"command"}
    assert cells[0].agent.command == "echo hi"


def test_a_task_file_extends_another_the_same_way_in_a_sweep_and_on_the_command_line():
    listed = cells_for("sweep=alfworld_small", "sweep.agents=[sft]")[0].task
    selected = cells_for("sweep=alfworld_small", "sweep.agents=[sft]", "task=alfworld_small")[0].task
    assert listed == selected
    assert listed.name == "alfworld_small" and listed.params["task_types"] == ["pick"]
    assert listed.cls == load_named("task", "alfworld", "test")["cls"]  # inherited from conf/task/alfworld.yaml
    assert "defaults" not in listed.config


def test_a_config_that_extends_itself_is_refused(tmp_path, monkeypatch):
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "a.yaml").write_text("defaults: [b]\nname: a\n")
    (tmp_path / "task" / "b.yaml").write_text("defaults: [a]\nname: b\n")
    monkeypatch.setattr(sweep_module, "CONF_DIR", tmp_path)
    with pytest.raises(ConfigError, match="task 'a' extends itself: a -> b -> a"):
        load_named("task", "a", "test")


@pytest.mark.parametrize("overrides, message", [
    (["sweep.agents=[nope]"], "unknown agent 'nope' in sweep.agents; known agents: claude_code, codex, command"),
    (["sweep.tasks=[nope]"], "unknown task 'nope'"),
    (["sweep.budget.wall_time_s=0"], "wall_time_s=0 must be a positive number"),
    (["sweep.budget.max_submissions=-1"], "max_submissions=-1 must be a positive number"),
    (["sweep.seeds=[]"], "sweep.seeds is empty"),
    (["sweep.budget.gpus=-1"], "gpus=-1 must be a number >= 0"),
    (["agent=command"], "agent.command is required for agent 'command'"),
    (["task=arithmetic", "+task.grader.colour=red"], "task arithmetic: grader: unknown key(s) ['colour']"),
    (["task=arithmetic", "task.grader.batch_size=0"], "task arithmetic: grader.batch_size=0 must be an integer >= 1"),
    (["task=arithmetic", "+task.rollout.num_hosts=1.5"], "task arithmetic: rollout.num_hosts=1.5 must be an integer"),
    (["task=webshop", "task.rollout.num_hosts=null", "+task.rollout.host_cpus=1"],
     "task webshop: rollout.num_hosts is null (one host per CPU of the cluster) while host_cpus=1 reserves CPUs"),
    (["task=arithmetic", "task.cls=nope"], "unknown task 'nope'; known: alfworld"),
    # (the kinds follow: a sweep's `imports` register more, tests/support/buggy.py in this process too)
    (["sweep.agents=[sft]", "+agent.kind=robot"], "agent.kind='robot' must be one of "),
    # an agent.args key its agent does not read (a typo) would be ignored: its script's DEFAULTS, its CLI's knobs
    (["agent=sft", "+agent.args.step_per_round=3"],
     "agent.args: unknown key(s) ['step_per_round']; known keys are ['activation_checkpointing', 'batch_size',"),
    (["agent=codex", "+agent.args.reasoning_efort=low"],
     "unknown key(s) ['reasoning_efort']; known keys are ['extra_args', 'output_limit', 'preamble',"
     " 'reasoning_effort']"),
])
def test_config_errors_name_key_and_value(overrides, message):
    with pytest.raises(ConfigError) as e:
        cells_for("sweep=demo", *overrides)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_an_unknown_agent_kind_is_told_every_kind_registered_in_the_process():
    from contracts.registry import names

    with pytest.raises(ConfigError) as e:
        cells_for("sweep=demo", "sweep.agents=[sft]", "+agent.kind=robot")
    assert {"builtin", "cli", "command"} <= set(names("agent_kind"))
    assert str(e.value).endswith("must be one of " + ", ".join(map(repr, names("agent_kind"))))


def test_unknown_cluster_mode():
    with pytest.raises(ConfigError, match="cluster.mode='k8s' is unknown"):
        check_cluster(compose(["cluster.mode=k8s"]))


def test_ray_workers_run_at_the_commands_niceness_unless_asked_otherwise(monkeypatch):
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    assert int(compose([]).cluster.worker_niceness) == 0  # not Ray's 15, which starves them on a busy machine
    monkeypatch.setenv("RAY_worker_niceness", "15")  # Ray's own variable is the user asking
    assert int(compose([]).cluster.worker_niceness) == 15
    assert int(compose(["cluster.worker_niceness=5"]).cluster.worker_niceness) == 5
    for bad in ("high", "20"):
        with pytest.raises(ConfigError, match=f"cluster.worker_niceness='{bad}'.*from -20 to 19"):
            check_cluster(compose([f"cluster.worker_niceness={bad}"]))


def test_cli_prints_one_line_for_config_errors():
    for args, expected in [(["agent=nope"], "unknown agent 'nope'; known agents: claude_code, codex, command"),
                           (["sweep.seeds=[]"], "sweep.seeds is empty"),
                           (["cluster.mode=k8s"], "cluster.mode='k8s' is unknown"),
                           (["sweep=alfworld_small", "task=alfworld_small", "task.max_receptacles=0"],
                            "task alfworld_small: max_receptacles=0 must be >= 1"),
                           (["sweep=demo", "task=arithmetic", "+task.colour=red"], "does not take ['colour']")]:
        proc = subprocess.run([sys.executable, "-m", "orchestrator", *args, "dry_run=true", "output_dir=/tmp/a2rl-x"],
                              cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], proc.stderr


def test_plan_and_summary_columns_fit_long_names(monkeypatch):
    import io
    import re

    import orchestrator.summary as summary

    proc = subprocess.run([sys.executable, "-m", "orchestrator", "sweep=alfworld_small", "dry_run=true",
                           "output_dir=/tmp/a2rl-x"], cwd=ROOT, capture_output=True, text=True, check=True)
    plan = [re.split(r"\s{2,}", line) for line in proc.stdout.splitlines() if "alfworld_small" in line]
    assert [row[1:3] for row in plan] == [["sft_alfworld", "none"], ["sft_grpo_alfworld", "none"],
                                          ["copy_base", "none"]], proc.stdout

    row = {"task": "alfworld_small", "agent": "sft_grpo_alfworld", "driver": "none", "cells": 1, "baseline": 0.0,
           "best_mean": 12.5, "improvement_mean": 12.5, "improvement_se": None, "n_scored": 1, "flags": [],
           "statuses": {"completed": 1}, "held_out_mean": 11.0, "held_out_se": None, "n_held_out": 1,
           "gap_mean": 1.5, "driver_tokens": 0.0, "driver_cost_usd": 0.0, "judge_cost_usd": 0.0, "gpu_hours": 0.5,
           "usd_per_point": None, "gpu_hours_per_point": 0.04}
    monkeypatch.setattr(summary, "summary_rows", lambda ledger, cell_ids: [row])
    out = io.StringIO()
    summary.print_summary(None, [], out=out)
    assert re.split(r"\s{2,}", out.getvalue().splitlines()[-1])[:3] == ["alfworld_small", "sft_grpo_alfworld", "none"]


def test_cfg_job_prints_resolved_config():
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "sweep=smoke", "--cfg", "job"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert "name: smoke" in proc.stdout and "wall_time_s: 10" in proc.stdout


def test_paper_grid_crosses_each_cli_with_the_drivers_it_speaks():
    cells = cells_for("sweep=paper_grid")
    pairs = {(c.agent.name, c.driver.name) for c in cells}
    assert ("claude_code", "claude-sonnet") in pairs and ("claude_code", "gpt") not in pairs
    assert {d for a, d in pairs if a == "opencode"} == {"claude-sonnet", "gpt", "gemini"}
    assert {d for a, d in pairs if a in ("openhands", "rdagent")} == {"claude-sonnet", "gpt", "gemini"}
    assert {d for a, d in pairs if a in ("sft", "copy_base", "noop")} == {"none"}
    assert len(cells) == (12 + 3) * 6 * 3  # (CLI x driver pairs + reference agents) x tasks x seeds
    tasks = {c.task_name: c.task.config for c in cells}
    assert sorted(tasks) == ["alfworld", "alpacaeval", "deepsearchqa", "gsm8k", "humaneval", "webshop"]
    # the paper's base models, on top of each task's own file; every grader on a GPU of its own
    assert tasks["gsm8k"]["base_model"] == "Qwen/Qwen2.5-1.5B" and tasks["gsm8k"]["prompt_template"]
    assert tasks["webshop"]["base_model"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert all(t["grader"]["num_gpus"] == 1 for t in tasks.values())
    assert tasks["alpacaeval"]["judge"]["provider"] == "openai"           # the judge's driver file, resolved


def test_paper_grid_dry_run_says_what_is_missing_and_starts_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), PATH="/usr/bin:/bin")
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "sweep=paper_grid", "dry_run=true",
                           f"output_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert "270 cells (270 new)" in text and "3240.0 GPU-hours" in text
    assert "graders: 6 GPUs of their own (6 tasks)" in text and "72.0 GPU-hours" in text
    for expected in ("key: $ANTHROPIC_API_KEY is not set", "key: $OPENAI_API_KEY is not set (judge gpt)",
                     "agent CLI: agent claude_code", "agent CLI: agent openhands: the `openhands` executable",
                     "agent CLI: agent rdagent: rdagent 1.0.0 cannot run a2rl cells", "task gsm8k: openai/gsm8k",
                     "alpacaeval: eval set",
                     "model Qwen/Qwen2.5-1.5B-Instruct (base model of alfworld, webshop, deepsearchqa; known model "
                     "of gsm8k, humaneval, alpacaeval) is not in",
                     "`python -m orchestrator prepare sweep=paper_grid"):
        assert expected in text, expected
    assert not (tmp_path / "out" / "ledger.sqlite").exists()


def test_folders_that_cannot_be_written_are_one_line_naming_the_key(tmp_path):
    from orchestrator.preflight import check_writable

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for key, folder, why in (("output_dir", Path("/proc/a2rl-x"), "cannot be written"),
                             ("output_dir", a_file, "is a file"),
                             ("cache_dir", a_file / "sub", "cannot be written")):
        with pytest.raises(ConfigError, match=f"^{key}=.* {why}.*point {key} at a folder"):
            check_writable({key: folder})
    check_writable({"output_dir": tmp_path / "new" / "out"})  # made when missing
    assert (tmp_path / "new" / "out").is_dir()


def test_every_task_setting_has_one_default_in_conf():
    defaults = yaml.safe_load((ROOT / "conf" / "task_defaults.yaml").read_text())
    spec = TaskSpec.from_config({"name": "bare", "cls": "reasoning_gym", "base_model": "tiny"})
    assert dataclasses.asdict(spec.grader) == defaults["grader"]
    assert dataclasses.asdict(spec.rollout) == defaults["rollout"]
    assert (spec.level, spec.description) == (defaults["level"], defaults["description"])
    # a task's YAML overrides one setting and keeps the others' defaults; its identity is the YAML as written
    arithmetic = load_named("task", "arithmetic", "test")
    spec = TaskSpec.from_config(arithmetic)
    assert spec.grader.max_new_tokens == 16 and spec.grader.max_concurrent == defaults["grader"]["max_concurrent"]
    assert spec.config == arithmetic and "max_concurrent" not in spec.identity["grader"]
