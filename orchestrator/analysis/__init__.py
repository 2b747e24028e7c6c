"""Analyses over the ledger: statistics, best-so-far curves, per-cell run reports and the sweep's model and report.

tables reads the ledger into the frames every other module takes (the same frames the Parquet exports hold),
stats holds the estimators, curves the best-so-far curves, figures the plots, run_report one cell's report,
sweep_model the whole sweep's model (its cells, events, run reports and tables, computed once), report renders it
(report_markdown its report.md), and formats says how every view of it shows a number. The viewer
(orchestrator.viewer) renders the same model; nothing here imports it.
"""
