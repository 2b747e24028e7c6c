"""Analyses over the ledger: statistics, best-so-far curves, per-cell run reports and the sweep report.

tables reads the ledger into the frames every other module takes (the same frames the Parquet exports hold),
stats holds the estimators, curves the best-so-far curves, figures the plots, run_report one cell's report,
report the whole sweep's (report_markdown renders its report.md).
"""
