"""The reports' part of `flowlake status`: `flowlake query` (engine, files, index, server),
the PingER regions, reverse DNS. `sections()` feeds `status --json` and `/metrics`;
`render()` prints."""
from __future__ import annotations

import json
from pathlib import Path

from . import engines, pinger_regions, rdns
from .count_rule import PASS_STATE
from .query.status import status as query_status


def sections(cfg) -> dict:
    out = {"pinger": pinger_regions.status(cfg)}
    for key, fn in (("query", query_status), ("rdns", rdns.status), ("border", border_status)):
        try:
            out[key] = fn(cfg)
        except (OSError, ValueError) as exc:  # status must never crash on a bad config, cache or lake
            out[key] = {"error": str(exc)}
    return out


def border_status(cfg) -> dict:
    """The border as flowlake understands it: the configured counting rule and the last
    observation_points report (jobs/observation_points.py), read with pyarrow (no Spark)."""
    site = getattr(cfg, "site", None)
    out = {"count_at": str(getattr(site, "count_at", "auto")),
           "dedup_window_seconds": float(getattr(site, "dedup_window_seconds", 60)), "date": None, "exporters": []}
    try:
        out["last_pass"] = json.loads((Path(cfg.path("state")) / PASS_STATE).read_text())
    except (OSError, ValueError):
        out["last_pass"] = None  # no run has applied the rule on this machine yet
    base = Path(cfg.lake) / "reports" / "observation_points"
    days = sorted(p for p in base.glob("date=*") if p.is_dir() and any(p.glob("*.parquet")))
    if not days:
        return out
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: status reads one small file only when it exists)

    rows = pq.read_table(str(days[-1])).to_pylist()
    out["date"] = days[-1].name.removeprefix("date=")
    out["exporters"] = [r for r in rows if r["exporter"] != "all"]
    out["site"] = next((r for r in rows if r["exporter"] == "all"), None)
    out["unclassified"] = sorted(r["exporter"] for r in out["exporters"] if not r["classified"])
    return out


def _print_border(console, b: dict) -> None:
    if "error" in b:
        console.print(f"[red]border: {b['error']}[/]")
        return
    head = f"border: counting rule [site] count_at = {b['count_at']} (window {b['dedup_window_seconds']:g} s)"
    if not b["date"]:
        console.print(head + "; no observation_points report yet (`flowlake jobs run observation_points`)",
                      markup=False)
        return
    site = b.get("site") or {}
    console.print(head + f"; observation points on {b['date']}: {site.get('multi_point_share', 0.0):.1%} of flows "
                  f"seen at more than one point, {site.get('counted', 0):,} of {site.get('observations', 0):,} "
                  "records counted", markup=False)
    _print_last_pass(console, b.get("last_pass"))
    for r in sorted(b["exporters"], key=lambda r: r["exporter"]):
        name = f" ({r['exporter_name']})" if r["exporter_name"] else ""
        console.print(f"  {r['exporter']}{name}: exports {r['exports']}, external interfaces "
                      f"{r['external_ifs'] or '(none)'}, counted by {r['count_at']}"
                      f"{'' if r['classified'] else ' (interfaces unclassified)'}, {r['counted']:,} of "
                      f"{r['observations']:,} records counted, {r['multi_point_share']:.0%} seen elsewhere too",
                      markup=False)
    contra = int(site.get("contradictory") or 0)
    if contra:
        how = ("count_at = all counts every observation of them" if b["count_at"] == "all"
               else f"each counted once by {b['count_at']}")
        console.print(f"  {contra:,} flows entered and left on external interfaces (transit, or contradictory "
                      f"direction data: ingress and egress both on an external interface): {how}", markup=False)
    if b["unclassified"] and b["count_at"] == "boundary":
        console.print("  count_at = boundary, but these exporters have no classified interfaces and are counted "
                      f"by key: {', '.join(b['unclassified'])} (add [[enrich.interface_rules]])", markup=False)


def _print_last_pass(console, p: dict | None) -> None:
    """The rule's DuckDB pass of the last report run: one pass, or passes over key buckets
    when the day outgrew `[site] dedup_memory_mb` (slower: worth raising the limit)."""
    if not p:
        return
    how = "one pass" if p["passes"] == 1 else (f"{p['passes']} passes over flow-key buckets (the day outgrew "
                                               "[site] dedup_memory_mb; a larger limit counts it in one, faster)")
    console.print(f"  the rule's pass on {p['date']}: {p['observations']:,} observations by {p['rule']} in {how}, "
                  f"DuckDB memory_limit {p['memory_limit']}, {p['seconds']:g} s", markup=False)


def _print_rdns(console, r: dict) -> None:
    if "error" in r:
        console.print(f"[red]reverse DNS: {r['error']}[/]")
        return
    line = (f"reverse DNS (remote_domains): cache {r['cache_entries']:,} of {r['cache_max_entries']:,} addresses "
            f"({r['cache_bytes']:,} bytes, TTL {r['cache_ttl_hours']:g} h), server {r['server']}")
    last = r.get("last_run")
    if last:
        line += (f"; last report {last['date']}: {last['resolved']:,} resolved, {last['unknown']:,} unknown, "
                 f"{last['timed_out']:,} timed out, {last['not_tried']:,} not tried (budget) in {last['seconds']:.1f} s")
        if last.get("resolver_silent"):
            line += (f" [yellow](the resolver answered none of {last['timed_out']:,} lookups: taken as "
                     "unreachable, the rest were not tried)[/]")
    console.print(line)


def render(console, st: dict) -> None:
    qs = st["query"]
    if "error" not in qs:
        console.print(f"flowlake query: engine {qs['engine']}" + (f" (DuckDB in the command, {qs['threads']} threads now)" if qs["engine"] == "local" else "")
                      + f"; the lake holds {qs['hours']} hours in {qs['files']} files (at most {qs['max_files_per_hour']} an hour); "
                      f"index {qs['index_hours']} hours, {qs['index_bytes']:,} bytes (last {qs['index_days']} days)")
        console.print(f"flowlake query start: fast path {'on' if qs['fast_start'] else 'off ([query] fast_start)'}, "
                      f"{qs['parser']} filter parser; cache {qs['cache_files']} files, {qs['cache_bytes']:,} bytes "
                      f"in {qs['cache_dir']} (parsed config files, at most 8)")
        if "engines" in qs:
            console.print(engines.status_line(qs["engines"]), markup=False)
        sv = qs["server"]
        console.print("flowlake query server: " + (
            f"running, {sv['answered'] or 0:,} questions taken (help and errors go back to the command), "
            f"{sv['busy'] or 0:,} left to the command "
            f"(busy: at most {sv['max_clients']} at once), {sv['bad_requests'] or 0} bad requests; {sv['socket']}"
            if sv["running"] else ("not running: commands start cold (`flowlake up` starts it)" if sv["enabled"]
                                   else "off ([query] server = false)")))
    console.print(pinger_regions.status_line(st["pinger"]))
    _print_rdns(console, st["rdns"])
    if "border" in st:
        _print_border(console, st["border"])
