"""The viewer as static files (`report` writes them to OUTPUT_DIR/report/viewer/): open index.html from disk, or put
the folder on any web server; a lab shares it without running a2rl. The same pages as `view` serves, not live."""
from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.viewer.site import Site


def write_site(output_dir: str | Path, target: str | Path | None = None, sweep: dict | None = None,
               n_boot: int = 10_000) -> Path:
    """Write every page of the sweep's viewer into target (default OUTPUT_DIR/report/viewer) and return its
    index.html. sweep: the sweep page's data when the caller has it (report computed it already)."""
    site = Site(output_dir, live=False, n_boot=n_boot)
    target = Path(target) if target is not None else site.output_dir / "report" / "viewer"
    if target.exists():  # a cell or group of an earlier copy must not linger
        shutil.rmtree(target)
    (target / "data").mkdir(parents=True)
    (target / "assets").mkdir()
    site.sweep(given=sweep)
    for path in site.paths():
        page = site.get(path)
        if page is not None:
            (target / path).write_bytes(page.body)
    return target / "index.html"
