"""`python -m orchestrator report ...`: one sweep model (analysis.sweep_model), rendered twice: the report
(analysis.report: report.md, figures, Parquet, W&B) and the viewer's pages as static files (viewer.static, in
OUTPUT_DIR/report/viewer/). Here, above both, so that neither imports the other: the viewer reads the analysis, the
analysis knows no viewer."""
from __future__ import annotations

from pathlib import Path

from orchestrator.analysis import report, run_summary, seeds, sweep_model
from orchestrator.viewer import data, static


def write_report(output_dir: str | Path, filters: dict | None = None, wandb_cfg: dict | None = None, *,
                 success_threshold: float = 0.0, n_boot: int = 10_000, seed: int = 0,
                 summarizer: run_summary.Summarizer | None = None,
                 auditor: run_summary.Summarizer | None = None,
                 seed_targets: seeds.Targets | None = None) -> Path:
    """Write OUTPUT_DIR/report/ (with its viewer/) from one model of the sweep and return its path. The arguments:
    analysis.report.build_report's; seed_targets: what the seeds section plans for (analysis.seeds)."""
    model = sweep_model.build(output_dir, filters, write_reports=True, success_threshold=success_threshold,
                              n_boot=n_boot, seed=seed, seed_targets=seed_targets)
    report_dir = report.write_report(model, filters, wandb_cfg, success_threshold=success_threshold,
                                     summarizer=summarizer, auditor=auditor)
    static.write_site(model.output_dir, report_dir / "viewer", n_boot=n_boot, sweep=data.sweep_data(model))
    return report_dir
