"""The normalised active result (a dict shaped like schemas.active.ACTIVE_RESULT) and
the one parse error type, which always names file and line."""
from __future__ import annotations

import datetime as dt
import os
import time

FIELDS = ("test_type", "source", "destination", "start", "end", "parameters",
          "metrics", "tool", "source_file")


class ParseError(ValueError):
    def __init__(self, path: str, line: int | None, problem: str):
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {problem}")


def make(test_type: str, source: str, destination: str, start_ms: int, end_ms: int,
         parameters: dict, metrics: dict, tool: str, source_file: str) -> dict:
    """Build a record; parameter values become text, metric values floats (None/NaN dropped)."""
    params = {str(k): str(v) for k, v in parameters.items() if v is not None and v != ""}
    mets = {}
    for k, v in metrics.items():
        if v is None:
            continue
        f = float(v)
        if f == f:  # NaN means "not measured": leave it out of the map
            mets[str(k)] = f
    return {"test_type": test_type, "source": source or "", "destination": destination or "",
            "start": int(start_ms), "end": int(max(end_ms, start_ms)), "parameters": params,
            "metrics": mets, "tool": tool, "source_file": str(source_file)}


def to_ms(when: dt.datetime | float | int) -> int:
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        return int(round(when.timestamp() * 1000))
    return int(round(float(when) * 1000))


def file_mtime_ms(path) -> int:
    """For formats that carry no timestamp (plain ping/fping text): the file's mtime,
    or now for text that never was a file (a probe's own output)."""
    try:
        return int(os.stat(path).st_mtime * 1000)
    except OSError:
        return int(time.time() * 1000)


def to_json(rec: dict) -> dict:
    """JSON-friendly view: timestamps as ISO 8601 UTC strings."""
    out = dict(rec)
    for key in ("start", "end"):
        out[key] = dt.datetime.fromtimestamp(rec[key] / 1000, dt.timezone.utc).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    return out
