"""`flowlake status` for enrichment: what the ingest has loaded (state/enrich/status.json,
written by sources.py), what is refused, and how much of the newest lake hour stayed
unknown (AS, country, interface name), read from the lake itself."""
from __future__ import annotations

import json
from pathlib import Path

from .sources import FILES, status_file

# share of unknown flows above which status warns
WARN_UNKNOWN = 0.5


def _newest_hour(lake: Path) -> Path | None:
    flows = lake / "flows"
    days = sorted((d for d in flows.glob("date=*") if d.is_dir()), reverse=True) if flows.exists() else []
    for day in days:
        hours = sorted((h for h in day.glob("hour=*") if h.is_dir() and any(h.glob("*.parquet"))),
                       key=lambda h: int(h.name[5:]) if h.name[5:].isdigit() else -1, reverse=True)
        if hours:
            return hours[0]
    return None


def unknown_shares(lake: Path) -> dict:
    """Flows of the newest lake hour and the share with no AS, country or interface name
    (interfaces: among flows naming one, ifIndex != 0)."""
    import duckdb  # noqa: PLC0415  (start-up: duckdb)

    hour = _newest_hour(lake)
    if hour is None:
        return {}
    from flowlake.pipelines.lake_read import lake_files  # noqa: PLC0415  (start-up: flowlake status)

    files = lake_files(lake, "flows", [hour])[1]  # a Delta table: the hour's files of its current version
    if not files:
        return {}
    src = "read_parquet([" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + \
        "], union_by_name = true, hive_partitioning = false)"
    con = duckdb.connect(config={"threads": 1})
    try:
        cols = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
        out = {"hour": f"{hour.parent.name[5:]} {int(hour.name[5:]):02d}h"}
        if "src_country" not in cols:
            total = con.execute(f"SELECT count(*) FROM {src}").fetchone()[0]
            return {**out, "flows": total, "enriched": False}
        row = con.execute(f"""SELECT count(*),
            count(*) FILTER (WHERE src_country IS NULL),
            avg(CASE WHEN src_as = 0 THEN 1 ELSE 0 END), avg(CASE WHEN dst_as = 0 THEN 1 ELSE 0 END),
            avg(CASE WHEN coalesce(src_country, '') = '' THEN 1 ELSE 0 END),
            avg(CASE WHEN coalesce(dst_country, '') = '' THEN 1 ELSE 0 END),
            avg(CASE WHEN coalesce(in_if_name, '') = '' THEN 1 ELSE 0 END) FILTER (WHERE input_if <> 0),
            avg(CASE WHEN coalesce(out_if_name, '') = '' THEN 1 ELSE 0 END) FILTER (WHERE output_if <> 0),
            avg(CASE WHEN coalesce(src_net_name, '') = '' AND coalesce(dst_net_name, '') = '' THEN 1 ELSE 0 END)
            FROM {src}""").fetchone()
    finally:
        con.close()
    r = lambda v: None if v is None else round(float(v), 4)  # noqa: E731
    return {**out, "flows": row[0], "enriched": row[1] < row[0], "unknown_src_as": r(row[2]),
            "unknown_dst_as": r(row[3]), "unknown_src_country": r(row[4]), "unknown_dst_country": r(row[5]),
            "unknown_in_if_name": r(row[6]), "unknown_out_if_name": r(row[7]), "outside_networks": r(row[8])}


def status(cfg) -> dict:
    try:
        state = json.loads(status_file(cfg).read_text())
    except (OSError, ValueError):
        state = {}
    out = {"enabled": bool(cfg.enrich.enabled), "ingest_state": bool(state),
           "rules": len(cfg.enrich.interface_rules), "sources": {}, "snmp": state.get("snmp", {}),
           "static_exporters": state.get("static_exporters"), "static_interfaces": state.get("static_interfaces"),
           "cache_entries": int(cfg.enrich.cache_entries)}
    for kind, (key, _ext) in FILES.items():
        configured = getattr(cfg.enrich, key)
        s = (state.get("sources") or {}).get(kind) or {}
        out["sources"][kind] = {"config": key, "configured": configured, "in_use": s.get("info") or {},
                                "loaded_at": s.get("loaded_at", ""), "error": s.get("error", ""),
                                "error_at": s.get("error_at", "")}
    try:
        out["lake"] = unknown_shares(cfg.lake)
    except Exception as exc:  # status must never crash on a damaged lake file
        out["lake"] = {"error": str(exc)}
    out["warnings"] = warnings(out)
    return out


def warnings(st: dict) -> list[str]:
    w = []
    for kind, s in st["sources"].items():
        if s["error"]:
            keep = s["in_use"].get("file")
            w.append(f"enrichment {s['config']} refused at {s['error_at']}: {s['error']}"
                     + (f" (still using the copy of {keep} loaded {s['loaded_at']})" if keep else " (none in use)"))
    if st["snmp"].get("error"):
        w.append(f"SNMP interface cache refused: {st['snmp']['error']} (the previous one stays in use)")
    for addr, err in (st["snmp"].get("errors") or {}).items():
        w.append(f"SNMP poll of exporter {addr} failed: {err} (its flows land with the names last known)")
    lake = st.get("lake") or {}
    for key in ("unknown_src_as", "unknown_dst_as", "unknown_in_if_name", "unknown_out_if_name"):
        if (lake.get(key) or 0) > WARN_UNKNOWN and st["enabled"]:
            w.append(f"{lake[key]:.0%} of the flows of {lake['hour']} have {key.replace('unknown_', 'no ')}")
    return w


def print_status(console, st: dict) -> None:
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    t = Table(title="enrichment at ingest" + ("" if st["enabled"] else " (off: [enrich] enabled = false)"))
    for col in ("source", "file", "in use", "records", "loaded", "error"):
        t.add_column(col, overflow="fold")
    for kind, s in st["sources"].items():
        u = s["in_use"]
        detail = (f"{u.get('database_type', '')} built {u.get('build_date', '')}" if "database_type" in u
                  else ("networks file" if u else "-"))
        records = u.get("records", u.get("networks"))
        t.add_row(kind, s["configured"] or "(off)", detail, "-" if records is None else f"{records:,}",
                  s["loaded_at"] or "-", s["error"] or "")
    sn = st["snmp"]
    t.add_row("snmp cache", sn.get("file", "-"), f"{sn.get('exporters', 0)} exporters",
              f"{sn.get('interfaces', 0):,} interfaces", sn.get("loaded_at", "") or "-", sn.get("error", ""))
    t.add_row("static names", "[exporters]", f"{st['static_exporters'] or 0} exporters",
              f"{st['static_interfaces'] or 0} interfaces", "", "")
    t.add_row("interface rules", "[enrich] interface_rules", f"{st['rules']} rules", "", "", "")
    console.print(t)
    lake = st.get("lake") or {}
    if lake.get("enriched"):
        pct = lambda k: "-" if lake.get(k) is None else f"{lake[k]:.1%}"  # noqa: E731
        console.print(f"enrichment of the newest lake hour ({lake['hour']}, {lake['flows']:,} flows): unknown "
                      f"AS src {pct('unknown_src_as')} dst {pct('unknown_dst_as')}, country src "
                      f"{pct('unknown_src_country')} dst {pct('unknown_dst_country')}, interface name in "
                      f"{pct('unknown_in_if_name')} out {pct('unknown_out_if_name')}; outside every network "
                      f"{pct('outside_networks')}")
    elif lake.get("hour"):
        console.print(f"enrichment: the newest lake hour ({lake['hour']}) was written without enrichment columns")
    for w in st["warnings"]:
        console.print(f"[bold red]WARNING: {w}[/]")
