"""`python -m orchestrator [overrides]` runs a sweep; `python -m orchestrator report output_dir=DIR` analyses it
(SUBCOMMANDS lists the others)."""
from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

# Ray token auth, so that agents (which share the machine's network) cannot connect to the cluster. Ray reads this
# when it is imported, so it is set before anything imports ray. To join a cluster=ray without auth, set
# RAY_AUTH_MODE=disabled yourself (agents on its nodes can then reach it).
os.environ.setdefault("RAY_AUTH_MODE", "token")
# wandb takes our `agents` package for OpenAI's Agents SDK and advertises Weave at every run: it is not that.
os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from contracts.specs import ConfigError  # noqa: E402
from orchestrator.sweep import CONF_DIR, GROUPS, known  # noqa: E402


def check_group_overrides(argv: list[str]) -> None:
    """One clear line for an unknown group option, before Hydra's multi-line error."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if sep and key in GROUPS and value not in ("null", "") and not (CONF_DIR / key / f"{value}.yaml").exists():
            folder = (f" (a benchmark folder under smith_dir is named in the sweep: sweep.tasks=[{value}], or alone: "
                      "task=smith task.path=FOLDER)") if key == "task" and value.startswith("smith-") else ""
            raise ConfigError(f"unknown {key} {value!r}; known {key}s: {', '.join(known(key))}{folder}")


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def sweep_main(cfg: DictConfig) -> None:
    from orchestrator.runner import run_sweep
    from orchestrator.sandbox import SandboxUnavailable

    try:
        run_sweep(cfg)
    except ConfigError as e:
        print(f"a2rl: config error: {e}", file=sys.stderr)
        sys.exit(2)
    except SandboxUnavailable as e:  # missing or too old bubblewrap: what to install, one line
        print(f"a2rl: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        print(f"a2rl: no space left on device writing {e.filename}: free space on that disk and run the same command "
              "again (it resumes: what the record files hold is restored, finished cells are kept)", file=sys.stderr)
        sys.exit(1)


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def report_main(cfg: DictConfig) -> None:
    from contracts.specs import to_plain
    from orchestrator.analysis.run_summary import summarizer_from_config
    from orchestrator.analysis.seeds import Targets
    from orchestrator.callbacks import wandb_mode
    from orchestrator.report_command import write_report

    filters = {k: v for k, v in (to_plain(cfg.filter) or {}).items() if v is not None}
    wandb_cfg = None
    if cfg.logger.kind == "wandb":
        wandb_cfg = {"project": cfg.logger.project, "entity": cfg.logger.get("entity"),
                     "mode": wandb_mode(cfg.logger.mode)}
    try:
        path = write_report(cfg.output_dir, filters=filters, wandb_cfg=wandb_cfg,
                            summarizer=summarizer_from_config(cfg.analysis, cfg.driver_proxy),
                            auditor=summarizer_from_config(cfg.analysis, cfg.driver_proxy, "audit"),
                            seed_targets=Targets(**to_plain(cfg.analysis.seeds)))
    except (ConfigError, FileNotFoundError) as e:
        print(f"a2rl: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"[a2rl] report written to {path}")


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def prepare_main(cfg: DictConfig) -> None:
    """Fetch what the sweep's cells and graders read, before any holds a GPU (orchestrator/prepare.py)."""
    from orchestrator.prepare import run_prepare

    try:
        sys.exit(run_prepare(cfg))
    except ConfigError as e:
        print(f"a2rl: config error: {e}", file=sys.stderr)
        sys.exit(2)


def plan_main() -> None:
    """How many more seeds each group needs, and the command that runs them (`plan output_dir=DIR [ci=5] ...`;
    orchestrator/plan_command.py)."""
    from orchestrator.plan_command import plan_main as plan

    plan()


def view_main() -> None:
    """Serve a sweep's viewer on loopback (`view output_dir=DIR [host=...] [port=...]`; orchestrator/viewer/)."""
    from orchestrator.viewer.server import view_main as serve

    serve()


# `python -m orchestrator <subcommand> [overrides]`; no subcommand runs a sweep.
SUBCOMMANDS = {"report": report_main, "prepare": prepare_main, "view": view_main, "plan": plan_main}


def main() -> None:
    subcommand = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS else None
    if subcommand:
        del sys.argv[1]
    try:
        check_group_overrides(sys.argv[1:])
        for arg in sys.argv[1:]:  # Hydra makes output_dir (its run dir) before a2rl runs: check it first
            if arg.startswith("output_dir=") and subcommand is None:
                from orchestrator.preflight import check_writable

                check_writable({"output_dir": Path(arg.split("=", 1)[1]).expanduser()})
    except ConfigError as e:
        print(f"a2rl: config error: {e}", file=sys.stderr)
        sys.exit(2)
    (SUBCOMMANDS[subcommand] if subcommand else sweep_main)()


if __name__ == "__main__":
    main()
