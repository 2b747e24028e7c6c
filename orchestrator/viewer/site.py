"""The viewer's pages as files: one path -> one text, the same for the live server and the static copy.

Paths (all in one folder, so relative links work from a web server and from file:// alike):
  index.html                      the sweep
  cell-<id>.html                  a cell
  group-<slug>.html               a group's seeds side by side
  data/cell-<id>-trace-<n>.js     page n of a cell's transcript, loaded when the reader opens it
  data/cell-<id>-code.js          a cell's code snapshots, loaded when the reader opens its code
  assets/...                      the page script, its styles, and plotly.min.js: plotly_js() chooses which

A page's own data is in the page (a JSON <script>); what a page loads later is a script file that hands its data to
the page (A2RL.loaded), because a page opened from disk may not fetch JSON. Every text passes the masker last.
"""
from __future__ import annotations

import json
import logging
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from orchestrator.analysis import formats
from orchestrator.viewer import code, data
from orchestrator.viewer.masking import Masker, known_secrets

log = logging.getLogger(__name__)

ASSETS = Path(__file__).parent / "assets"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
# Where scripts/setup puts plotly.js's cartesian bundle (plotly.js-cartesian-dist-min from the npm registry, checked
# against its pinned sha256, with its MIT licence): in the environment a2rl runs in, as pip puts a package there.
BUNDLE_DIR = Path(sys.prefix) / "share" / "a2rl"
BUNDLE = "plotly-cartesian.min.js"
WHOLE_PLOTLY_NOTE = ("plots use the whole plotly.js (the plotly package's, 4.8 MB): scripts/setup did not fetch "
                     "plotly.js's cartesian bundle (1.5 MB), so plots take longer to start")


@dataclass(frozen=True)
class PlotlyJs:
    """The plotly.js the pages load (as assets/plotly.min.js) and, beside it, its licence where it has one apart."""
    path: Path
    licence: Path | None
    note: str  # what the pages and the log say about it ("" for the bundle)


def plotly_js(folder: Path | None = None) -> PlotlyJs:
    """The one choice of the pages' plotly.js: the cartesian bundle scripts/setup placed in folder (default
    BUNDLE_DIR), whose scatter and heatmap traces are all the pages draw and which starts in a third of the time of
    the whole library (benchmarks/bench_viewer.py); without it, the whole plotly.js the plotly package ships (its
    licence is in the file's header), so the viewer always draws its plots."""
    folder = BUNDLE_DIR if folder is None else folder
    if (folder / BUNDLE).is_file():
        licence = folder / "plotly-cartesian.LICENSE.txt"
        return PlotlyJs(folder / BUNDLE, licence if licence.is_file() else None, "")
    import plotly

    return PlotlyJs(Path(plotly.__file__).parent / "package_data" / "plotly.min.js", None, WHOLE_PLOTLY_NOTE)


def json_for_script(value) -> str:
    """JSON safe inside a <script> element ("</script>" in a trace must not end it)."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


@dataclass
class Page:
    body: bytes
    content_type: str


class Site:
    """One sweep's viewer. live: served while the sweep may still run (pages poll the ledger's version and reload
    when their content changed); static: a copy written to disk."""

    def __init__(self, output_dir: str | Path, live: bool = False, n_boot: int = 10_000):
        self.output_dir = Path(output_dir).expanduser().resolve()
        self.live, self.n_boot = live, n_boot
        self.env = Environment(loader=PackageLoader("orchestrator.viewer", "templates"),
                               autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
        self.env.filters["num"] = formats.fmt
        self.env.filters["duration"] = formats.duration
        self.env.filters["tojson_script"] = json_for_script
        self._lock = threading.Lock()            # the caches below
        self._computing = threading.Lock()       # one computation of the sweep's data at a time
        self._sweep: tuple[str, dict] | None = None
        self._cells: dict[str, tuple[str, dict, list[str]]] = {}
        self._masker: tuple[str, Masker] | None = None
        self._pages: dict[tuple[str, str | None], Page] = {}
        self.plotly = plotly_js()
        if self.plotly.note:
            log.warning("viewer: %s", self.plotly.note)

    # -- cached reads, renewed when what they read changes ---------------------------------------------------------
    def version(self) -> str:
        return data.ledger_version(self.output_dir)

    def sweep_version(self) -> str | None:
        """The ledger version the sweep's data was computed at (None: not yet)."""
        return self._sweep[0] if self._sweep else None

    def sweep(self, given: dict | None = None) -> dict:
        """The sweep page's data (given: already computed, by `report`). Its tables take seconds at 270 cells, so
        a live site computes them again in the background when the ledger moved on, and meanwhile shows the last."""
        version = self.version()
        if given is not None:
            self._sweep = (version, given)
        kept = self._sweep
        if kept is not None and (kept[0] == version or self.live):
            if kept[0] != version:
                self.refresh_sweep()
            return kept[1]
        with self._computing:
            if self._sweep is None or self._sweep[0] != version:
                self._sweep = (version, data.build_sweep(self.output_dir, self.n_boot))
            return self._sweep[1]

    def refresh_sweep(self) -> None:
        """Compute the sweep's data again in a thread, unless that is already under way, and render its page."""
        def run():
            with self._computing:
                version = self.version()
                if self._sweep is None or self._sweep[0] != version:
                    self._sweep = (version, data.build_sweep(self.output_dir, self.n_boot))
            self.get("index.html")  # kept rendered: the next reader gets it at once
        if not self._computing.locked():
            threading.Thread(target=run, daemon=True, name="a2rl-viewer-sweep").start()

    def cell(self, cell_id: str) -> tuple[dict, list[str]] | None:
        """A cell's page data and transcript, read again only when that cell's records changed (not at every
        write of a running sweep: a 50,000-event transcript takes a second to read)."""
        version = data.cell_version(self.output_dir, cell_id)
        with self._lock:
            kept = self._cells.get(cell_id)
        if kept is None or kept[0] != version:
            found = data.cell_data(self.output_dir, cell_id)
            if found is None:
                return None
            with self._lock:
                if len(self._cells) > 8:  # a few recent cells: their transcripts can be large
                    self._cells.pop(next(iter(self._cells)))
                kept = self._cells[cell_id] = (version, *found)
        return kept[1], kept[2]

    def masker(self) -> Masker:
        version = self.version()
        with self._lock:
            kept = self._masker
        if kept is None or kept[0] != version:
            specs = [json.loads(s) for s in data.query(self.output_dir, "SELECT spec FROM cells")["spec"]]
            kept = self._masker = (version, Masker(known_secrets(self.output_dir, specs)))
        return kept[1]

    # -- pages ---------------------------------------------------------------------------------------------------
    def get(self, path: str) -> Page | None:
        """The page at a path, or None. The sweep's and groups' pages are kept rendered until its data changes (the
        sweep page of 270 cells is half a megabyte of masked text)."""
        path = path.lstrip("/") or "index.html"
        if not (path == "index.html" or path.startswith("group-")):
            return self._make(path)
        self.sweep()  # (computed now if it never was)
        key = (path, self.sweep_version())
        with self._lock:
            kept = self._pages.get(key)
        if kept is None:
            kept = self._make(path)
            if kept is not None:
                with self._lock:
                    self._pages = {k: v for k, v in self._pages.items() if k[1] == key[1]}
                    self._pages[key] = kept
        return kept

    def _make(self, path: str) -> Page | None:
        if path.startswith("assets/"):
            return self._asset(path[len("assets/"):])
        if path == "index.html":
            text = self._render("sweep.html", title="sweep", data=self.sweep(), version=self.sweep_version())
        elif path.startswith("cell-") and path.endswith(".html"):
            found = self.cell(path[5:-5])
            if found is None:
                return None
            shown = found[0]
            # what the page's script needs (the logs and the summary are in the HTML already)
            script = {k: shown[k] for k in ("cell", "report", "final", "trace_pages", "trace_total", "page_size",
                                            "has_code", "group", "failure_classes")}
            script["formats"] = formats.FORMATS  # how its script shows the numbers it reads from the records
            text = self._render("cell.html", title=f"cell {path[5:-5]}", data=shown, script=script,
                                version=data.cell_version(self.output_dir, path[5:-5]))
        elif path.startswith("group-") and path.endswith(".html"):
            group = data.group_data(self.sweep(), path[6:-5])
            if group is None:
                return None
            text = self._render("group.html", title="group", data=group, version=self.sweep_version())
        elif path.startswith("data/cell-") and path.endswith(".js"):
            text = self._cell_script(path[len("data/cell-"):-3])
            if text is None:
                return None
        else:
            return None
        return Page(self.masker().mask(text).encode(), CONTENT_TYPES[Path(path).suffix])

    def _render(self, template: str, **context) -> str:
        context["data"] = json.loads(self.masker().mask(json.dumps(context["data"])))  # before HTML escapes it
        context["script"] = json.loads(self.masker().mask(json.dumps(context.get("script", context["data"]))))
        return self.env.get_template(template).render(live=self.live, plotly_note=self.plotly.note, **context)

    def _cell_script(self, name: str) -> str | None:
        """cell-<id>-trace-<n>.js or cell-<id>-code.js."""
        if name.endswith("-code"):
            found = self.cell(name[:-5])
            if found is None:
                return None
            trajectory = (found[0].get("report") or {}).get("trajectory") or []
            shots = code.snapshots(self.output_dir / "cells" / name[:-5] / "code.git", trajectory)
            return f"A2RL.loaded({json_for_script('code')},{json_for_script(shots)});\n"
        cell_id, sep, page = name.rpartition("-trace-")
        if not sep or not page.isdigit():
            return None
        found = self.cell(cell_id)
        if found is None:
            return None
        start = int(page) * data.TRACE_PAGE
        if start and start >= len(found[1]):
            return None
        entries = found[1][start:start + data.TRACE_PAGE]
        return f"A2RL.loaded({json_for_script('trace-' + page)},[{','.join(entries)}]);\n"

    def _asset(self, name: str) -> Page | None:
        path = {"plotly.min.js": self.plotly.path, "plotly.LICENSE.txt": self.plotly.licence}.get(name, ASSETS / name)
        if path is None or "/" in name or not path.is_file():
            return None
        return Page(path.read_bytes(), CONTENT_TYPES.get(path.suffix, "application/octet-stream"))

    # -- every path, for the static copy ---------------------------------------------------------------------------
    def paths(self):
        """Every page's path, a cell's together (its data is read once for all of them)."""
        sweep = self.sweep()
        yield "index.html"
        yield from [f"assets/{p.name}" for p in sorted(ASSETS.iterdir())] + ["assets/plotly.min.js"]
        if self.plotly.licence:
            yield "assets/plotly.LICENSE.txt"
        for group in sorted({c["group"] for c in sweep["cells"]}):
            yield f"group-{group}.html"
        for c in sweep["cells"]:
            cid = c["cell_id"]
            found = self.cell(cid)
            if found is None:
                continue
            yield f"cell-{cid}.html"
            yield from (f"data/cell-{cid}-trace-{n}.js" for n in range(len(found[0]["trace_pages"])))
            if found[0]["has_code"]:
                yield f"data/cell-{cid}-code.js"
