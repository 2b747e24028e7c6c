"""Small helpers to write markdown tables without extra dependencies."""
from __future__ import annotations

import math
import numbers

import pandas as pd

MISSING = "—"


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


def md_table(header: list[str], rows: list[list]) -> str:
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in rows]
    return "\n".join(lines)
