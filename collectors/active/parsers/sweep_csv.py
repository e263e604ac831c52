"""CSV parameter sweeps: throughput or latency against frame size, streams, window,
rate or message size, under named conditions ("1% loss", "link failure").

One row = one record. Columns (header required, case-insensitive):
- `source`/`src`, `destination`/`dst`/`target`: endpoints; `path`: a path label.
- `start`/`time`/`timestamp` (ISO 8601 or epoch seconds), optional `end`.
- `test`/`test_type` (default "sweep").
- metric columns: names ending in _ms, _us, _bps, _kbps, _mbps, _gbps, _pps, _bytes_per_s,
  or named loss/jitter/throughput/latency/rtt/retransmits; must be numbers (empty = not measured).
  Mbps/Gbps/kbps are converted to a `throughput_bps`-style `_bps` key.
- everything else (frame_size, streams, window, rate, condition, ...) is a parameter.
"""
from __future__ import annotations

import csv
import datetime as dt
import io

from ..result import ParseError, file_mtime_ms, make, to_ms

_METRIC_SUFFIX = ("_ms", "_us", "_bps", "_kbps", "_mbps", "_gbps", "_pps", "_bytes_per_s")
_METRIC_NAMES = {"loss", "jitter", "throughput", "latency", "rtt", "retransmits"}
_SCALE = {"_kbps": 1e3, "_mbps": 1e6, "_gbps": 1e9}
_ALIASES = {"src": "source", "dst": "destination", "target": "destination", "time": "start",
            "timestamp": "start", "test": "test_type"}


def _is_metric(col: str) -> bool:
    return col in _METRIC_NAMES or col.endswith(_METRIC_SUFFIX)


def _when(value: str, path, no, col) -> int:
    try:
        return to_ms(float(value))
    except ValueError:
        pass
    try:
        return to_ms(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        raise ParseError(path, no, f"column {col}: not a time (ISO 8601 or epoch seconds): {value!r}") from None


def parse(path, text: str) -> list[dict]:
    # newline="" as the csv module requires: a bare CR is a line end, not a stray byte
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        return _parse(path, reader)
    except csv.Error as exc:  # e.g. a NUL byte or an unterminated quote at the end
        raise ParseError(path, max(reader.line_num, 1), f"malformed CSV: {exc}") from None


def _parse(path, reader) -> list[dict]:
    try:
        header = next(reader)
    except StopIteration:
        raise ParseError(path, 1, "empty CSV file") from None
    cols = [_ALIASES.get(h.strip().lower(), h.strip().lower()) for h in header]
    if len(set(cols)) != len(cols):
        raise ParseError(path, 1, f"duplicate column names in header: {header}")
    metric_cols = [c for c in cols if _is_metric(c)]
    if not metric_cols:
        raise ParseError(path, 1, "no metric column (e.g. throughput_mbps, latency_ms, loss)")
    default_t = file_mtime_ms(path)
    out = []
    for no, row in enumerate(reader, 2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(cols):
            raise ParseError(path, no, f"{len(row)} fields, header has {len(cols)}")
        values = {c: v.strip() for c, v in zip(cols, row)}
        start = _when(values["start"], path, no, "start") if values.get("start") else default_t
        end = _when(values["end"], path, no, "end") if values.get("end") else start
        metrics, params = {}, {}
        for c in cols:
            v = values[c]
            if c in ("source", "destination", "start", "end", "test_type"):
                continue
            if c in metric_cols:
                if v == "":
                    continue
                try:
                    x = float(v)
                except ValueError:
                    raise ParseError(path, no, f"column {c}: not a number: {v!r}") from None
                for suf, scale in _SCALE.items():
                    if c.endswith(suf):
                        c, x = c[: -len(suf)] + "_bps", x * scale
                metrics[c] = x
            else:
                params[c] = v
        out.append(make(values.get("test_type") or "sweep", values.get("source", ""),
                        values.get("destination", ""), start, end, params, metrics, "csv", path))
    if not out:
        raise ParseError(path, 2, "CSV has a header but no rows")
    return out
