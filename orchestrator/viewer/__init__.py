"""A web viewer of a sweep: `python -m orchestrator view output_dir=DIR` serves it on loopback while the sweep runs or
after, and `report` writes the same pages as static files (OUTPUT_DIR/report/viewer/index.html).

data: what a page shows: the sweep's model (analysis.sweep_model) shaped for a page, and a cell's records; code: a
cell's code snapshots; masking: secrets never reach a page; site: the pages by path (Jinja2 templates,
assets/viewer.js, plotly.js as site.plotly_js chooses); server: the live server; static: the static copy.
"""
