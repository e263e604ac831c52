"""perfSONAR pScheduler run results (JSON): rtt, latency, throughput and trace tests.

Accepted shapes: a run object as the pScheduler REST API returns it
(`start-time`, `end-time`, `result-merged`), optionally with the task (`task.test`)
or the test (`test`) beside it, as archivers send it; or a list of those.
Durations are ISO 8601 (`PT0.000041S`), as pScheduler writes them.
"""
from __future__ import annotations

import datetime as dt
import re

from ..result import ParseError, make, to_ms
from .iperf3 import load_json

_DUR = re.compile(r"^P(?:(?P<d>[\d.]+)D)?(?:T(?:(?P<h>[\d.]+)H)?(?:(?P<m>[\d.]+)M)?(?:(?P<s>[\d.]+)S)?)?$")


def duration_ms(value, path, field) -> float | None:
    if value is None:
        return None
    m = _DUR.match(str(value))
    if not m or value in ("P", "PT"):
        raise ParseError(path, None, f"{field}: not an ISO 8601 duration: {value!r}")
    secs = sum(float(m[k] or 0) * f for k, f in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)))
    return secs * 1000.0


def _time(value, path, field) -> int:
    try:
        return to_ms(dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except ValueError:
        raise ParseError(path, None, f"{field}: not an ISO 8601 time: {value!r}") from None


def parse(path, text: str, doc=None) -> list[dict]:
    doc = load_json(path, text) if doc is None else doc
    runs = doc if isinstance(doc, list) else [doc]
    out = []
    for i, run in enumerate(runs):
        where = f"run {i}"
        if not isinstance(run, dict):
            raise ParseError(path, None, f"{where}: expected a JSON object")
        inner = run.get("run") if isinstance(run.get("run"), dict) else run
        test = (run.get("task") or {}).get("test") or run.get("test") or (inner.get("task") or {}).get("test")
        if not test or "type" not in test:
            raise ParseError(path, None, f"{where}: no test type (task.test.type or test.type)")
        result = run.get("result") or inner.get("result-merged") or inner.get("result")
        if not isinstance(result, dict):
            raise ParseError(path, None, f"{where}: no result object (result-merged)")
        if result.get("succeeded") is False:
            raise ParseError(path, None, f"{where}: the run failed: {result.get('error') or 'no error text'}")
        start = _time(inner.get("start-time"), path, f"{where}: start-time")
        end = _time(inner.get("end-time") or inner.get("start-time"), path, f"{where}: end-time")
        spec = test.get("spec") or {}
        ttype = test["type"]
        params = {k: v for k, v in spec.items() if isinstance(v, (str, int, float)) and k not in ("schema",)}
        tool = "pscheduler/" + str(inner.get("tool") or (run.get("tool") or {}).get("name") or ttype)
        out.append(make(ttype, spec.get("source", ""), spec.get("dest", ""), start, end, params,
                        _metrics(ttype, result, path, where), tool, path))
    return out


def _metrics(ttype, r, path, where) -> dict:
    dur = lambda k: duration_ms(r.get(k), path, f"{where}: {k}")  # noqa: E731
    if ttype == "rtt":
        sent = r.get("sent")
        rt = [duration_ms(x.get("rtt"), path, f"{where}: roundtrips") for x in r.get("roundtrips", [])
              if x.get("rtt")]
        return {"sent": sent, "received": r.get("received"), "loss": r.get("loss"),
                "duplicates": r.get("duplicates"), "reorders": r.get("reorders"),
                "rtt_min_ms": dur("min"), "rtt_avg_ms": dur("mean"), "rtt_max_ms": dur("max"),
                "rtt_stddev_ms": dur("stddev"), "replies": len(rt)}
    if ttype == "latency":
        hist = {float(k): int(v) for k, v in (r.get("histogram-latency") or {}).items()}
        n = sum(hist.values())
        sent = r.get("packets-sent") or 0
        m = {"sent": sent, "received": r.get("packets-received"), "lost": r.get("packets-lost"),
             "duplicates": r.get("packets-duplicated"), "reorders": r.get("packets-reordered"),
             "loss": (r.get("packets-lost") or 0) / sent if sent else None,
             "clock_error_ms": r.get("max-clock-error")}
        if n:
            m["latency_min_ms"] = min(hist)
            m["latency_max_ms"] = max(hist)
            m["latency_avg_ms"] = sum(k * v for k, v in hist.items()) / n
        return m
    if ttype == "throughput":
        s = (r.get("summary") or {}).get("summary") or {}
        m = {"throughput_bps": s.get("throughput-bits"), "bytes": s.get("throughput-bytes"),
             "retransmits": s.get("retransmits")}
        ivals = [iv.get("summary", {}).get("throughput-bits") for iv in r.get("intervals", [])]
        ivals = [x for x in ivals if x is not None]
        if ivals:
            m.update(intervals=len(ivals), interval_bps_min=min(ivals), interval_bps_max=max(ivals))
        return m
    if ttype == "trace":
        paths = r.get("paths") or []
        hops = paths[0] if paths else []
        last = next((h for h in reversed(hops) if h.get("rtt")), None)
        return {"hops": len(hops), "paths": len(paths),
                "rtt_last_hop_ms": duration_ms(last.get("rtt"), path, f"{where}: paths") if last else None,
                "hops_no_reply": sum(1 for h in hops if not h.get("ip"))}
    raise ParseError(path, None, f"{where}: unsupported pScheduler test type {ttype!r} "
                                 "(rtt, latency, throughput, trace)")
