"""Printing query results: an aligned text table, CSV or JSON, rows written as they come.

Plain stdlib on purpose: a query answers in a fraction of a second, and a rich-text
library's import alone would cost a third of nfdump's whole run.
"""
from __future__ import annotations

import datetime as dt
import json
import sys


def jsonable(v):
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.UTC)
        return v.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(v, float) and v != v:
        return None
    return v


def deep(o):
    if isinstance(o, dict):
        return {k: deep(v) for k, v in o.items()}
    if isinstance(o, list):
        return [deep(v) for v in o]
    return jsonable(o)


def _text(v) -> str:
    return "" if v is None else str(jsonable(v))


def table(rows: list[dict], columns, title: str = "", out=None) -> None:
    """Columns aligned like nfdump's: numbers right, text left; a title line above."""
    out = out or sys.stdout
    cols = list(columns)
    cells = [[_text(r[c]) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    right = [bool(rows) and isinstance(rows[0][c], (int, float)) for c in cols]

    def line(vals):
        return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(vals, widths, right)).rstrip()

    if title:
        out.write(title + ":\n")
    out.write(line(cols) + "\n")
    for row in cells:
        out.write(line(row) + "\n")
    if not rows:
        out.write("(no rows)\n")


def stream(rows, columns, fmt: str, title: str = "", out=None) -> int:
    """Write rows (any iterable of dicts) as fmt; CSV and JSON go out row by row. Returns the count."""
    out = out or sys.stdout
    cols = list(columns)
    n = 0
    if fmt == "csv":
        import csv  # noqa: PLC0415  (start-up: flowlake query's fast path)

        w = csv.writer(out)
        w.writerow(cols)
        for r in rows:
            w.writerow([jsonable(r[c]) for c in cols])
            n += 1
    elif fmt == "json":  # the text of json.dumps(list, indent=1), one row at a time
        for r in rows:
            text = json.dumps({c: jsonable(r[c]) for c in cols}, indent=1).replace("\n", "\n ")
            out.write(("[\n " if n == 0 else ",\n ") + text)
            out.flush()
            n += 1
        out.write("\n]\n" if n else "[]\n")
    else:
        rows = list(rows)
        table(rows, cols, title, out)
        n = len(rows)
    return n
