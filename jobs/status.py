"""The reports' part of `flowlake status`: `flowlake query` (engine, files, index, server),
the PingER regions, reverse DNS. `sections()` feeds `status --json` and `/metrics`;
`render()` prints."""
from __future__ import annotations

from . import engines, pinger_regions, rdns
from .query.status import status as query_status


def sections(cfg) -> dict:
    out = {"pinger": pinger_regions.status(cfg)}
    for key, fn in (("query", query_status), ("rdns", rdns.status)):
        try:
            out[key] = fn(cfg)
        except (OSError, ValueError) as exc:  # status must never crash on a bad config, cache or lake
            out[key] = {"error": str(exc)}
    return out


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
