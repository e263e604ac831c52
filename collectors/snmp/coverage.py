"""Flow coverage warnings for `flowlake status`: the newest day of the flow_coverage report
(job interface_capacity), hours whose coverage is outside 1 +/- [snmp] coverage_tolerance."""
from __future__ import annotations

from pathlib import Path


def latest_day(root: Path) -> Path | None:
    days = sorted(p for p in root.glob("date=*") if p.is_dir() and any(p.glob("*.parquet")))
    return days[-1] if days else None


def coverage_status(cfg) -> dict:
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    tol = float(cfg.snmp.coverage_tolerance)
    out = {"date": None, "tolerance": tol, "interfaces": 0, "warnings": [], "outside": []}
    day = latest_day(cfg.lake / "reports" / "flow_coverage")
    if day is None:
        return out
    out["date"] = day.name.split("=", 1)[1]
    try:
        rows = [r for f in sorted(day.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    except Exception as exc:  # status must never crash on a damaged report file
        out["error"] = f"{day}: {exc}"
        return out
    per: dict[tuple, list] = {}
    for r in rows:
        if r.get("hour") is None or r.get("coverage") is None:
            continue
        per.setdefault((r["exporter"], r["if_index"], r["if_name"], r["side"]), []).append((r["hour"], r["coverage"]))
    out["interfaces"] = len(per)
    for (exp, idx, name, side), hours in sorted(per.items()):
        bad = [(h, c) for h, c in hours if abs(c - 1.0) > tol]
        if not bad:
            continue
        lo, hi = min(c for _, c in bad), max(c for _, c in bad)
        out["outside"].append({"exporter": exp, "if_index": idx, "if_name": name, "side": side,
                               "hours": len(bad), "of_hours": len(hours), "min": lo, "max": hi})
        label = f"{exp} if{idx}" + (f" ({name})" if name else "")
        span = f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"
        out["warnings"].append(
            f"flow coverage of {label} {side}: {span} in {len(bad)} of {len(hours)} hours of {out['date']}, outside "
            f"1 +/- {tol:g} (a wrong sampling rate, lost export datagrams or the interface not exporting)")
    return out
