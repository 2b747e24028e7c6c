"""How a number is shown, once for every view of a sweep: report.md, the run reports, and the viewer's pages.

fmt is the number formatter; FORMATS names the ways a kind of value is shown (digits, sign, a duration), and
CELL_TABLE is the one list of a cell's columns that the viewer's tables show, each with its format. The pages get
both in their data and values already formatted where Python has them; the page script formats only what it reads
unparsed (a transcript's payloads, passed through as the ledger holds them), by these same named formats.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

import pandas as pd

MISSING = "—"

# name -> how a value of that kind is shown: digits after the point, a sign always (an improvement's sign is its
# point), or as a duration (a 12-hour cell in seconds is hard to read)
FORMATS: dict[str, dict] = {
    "text": {},
    "score": {"digits": 3},
    "gain": {"digits": 3, "signed": True},
    "gain_short": {"digits": 2, "signed": True},
    "usd": {"digits": 4},
    "count": {"digits": 0},
    "seconds": {"digits": 1},
    "duration": {"duration": True},
}


def fmt(value, digits: int = 3, signed: bool = False) -> str:
    """A number for a table: fixed digits, a dash for missing (None, NaN, pandas NA); other values as text."""
    if value is None or value is pd.NA:
        return MISSING
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if math.isnan(value):
        return MISSING
    if isinstance(value, numbers.Integral) and not signed:
        return str(int(value))
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def duration(seconds) -> str:
    """12h03m, 4m05s, 7s."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds != seconds:
        return MISSING  # None, NaN, or not in the report (a template's Undefined)
    s = round(float(seconds))
    h, m = divmod(s, 3600)
    m, sec = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s" if m else f"{sec}s"


def show(value, format: str) -> str:
    """value as the named format shows it."""
    spec = FORMATS[format]
    if spec.get("duration"):
        return duration(value)
    if "digits" in spec:
        return fmt(value, spec["digits"], spec.get("signed", False))
    return MISSING if value is None or value is pd.NA or (isinstance(value, float) and value != value) else str(value)


def table_value(value) -> str:
    """A value in a table whose columns name no format (the report's tables on a page): a whole number as one (the
    counts), other numbers as scores."""
    whole = isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer()
    return show(value, "count" if whole else "score")


@dataclass(frozen=True)
class Column:
    key: str             # the cells frame's column (flags and outcome_class: the sweep model's)
    label: str
    format: str = "text"  # a name in FORMATS


CELL_TABLE = (
    Column("cell_id", "cell"), Column("task", "task"), Column("agent", "agent"), Column("driver", "driver"),
    Column("mode", "mode"), Column("seed", "seed"), Column("status", "status"), Column("outcome_class", "outcome"),
    Column("baseline_score", "baseline", "score"), Column("best_score", "best", "score"),
    Column("improvement", "improvement", "gain"), Column("final_score", "held-out", "score"),
    Column("n_submissions", "subs", "count"), Column("driver_tokens", "tokens", "count"),
    Column("cost_usd", "cost $", "usd"), Column("elapsed_s", "elapsed", "duration"), Column("flags", "flags"),
)


def columns_data(columns=CELL_TABLE) -> list[dict]:
    """The columns as a page takes them."""
    return [asdict(c) for c in columns]
