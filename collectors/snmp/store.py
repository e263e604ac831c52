"""What the poller writes, all atomically (a temporary file, then rename):

- `state/snmp/interfaces.json`: the contract with the enricher (pipelines/enrich):
  {"version": 1, "exporters": {"<exporter>": {"sys_name", "polled" (ISO-8601 UTC of the
  last successful poll), "error" ("" or the last poll's error), "interfaces":
  {"<ifIndex>": {"name", "description" (ifAlias), "speed_mbps", "oper_status"}}}}}.
  An exporter whose agent fails keeps its last known interfaces, with the error.
- `state/snmp/refresh/<exporter>` (':' as '_'): empty files the enricher creates for an
  unknown ifIndex; the poller polls that exporter soon and deletes the file.
- `state/snmp/poller.json`: per exporter the last attempts and errors (for `flowlake status`).
- `lake/interface_counters/date=D/<exporter>-<time_ms>.parquet`: one file per exporter
  and poll. Written here directly rather than through Kafka like exporter health: the
  poller is the rows' only source and the file's rename is the commit, so a crash leaves a
  poll either whole or absent; the previous raw values are read back from the newest file
  at start (the lake is the state), so a restart neither loses nor double-counts a delta.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

from flowlake.schemas.messages import arrow_schema
from flowlake.schemas.snmp import COUNTERS, INTERFACE_COUNTERS

from .deltas import unsigned64

VERSION = 1


def snmp_dir(cfg) -> Path:
    return cfg.path("state", "snmp")


def interfaces_file(cfg) -> Path:
    return snmp_dir(cfg) / "interfaces.json"


def refresh_dir(cfg) -> Path:
    return snmp_dir(cfg) / "refresh"


def poller_file(cfg) -> Path:
    return snmp_dir(cfg) / "poller.json"


def counters_dir(cfg) -> Path:
    return cfg.lake / "interface_counters"


def safe_name(exporter: str) -> str:
    """An exporter address as a file name (IPv6 ':' as '_'), as the refresh contract says."""
    return exporter.replace(":", "_")


def iso(ms: int | None) -> str:
    if not ms:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
    tmp.replace(path)


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def interfaces_doc(exporters: dict[str, dict]) -> dict:
    """The enricher's document from the poller's cache {exporter: {sys_name, polled_ms, error, interfaces}}."""
    return {"version": VERSION, "exporters": {
        addr: {"sys_name": e.get("sys_name", ""), "polled": iso(e.get("polled_ms")), "error": e.get("error", ""),
               "interfaces": {str(idx): dict(i) for idx, i in sorted(e.get("interfaces", {}).items())}}
        for addr, e in sorted(exporters.items())}}


def load_interfaces(cfg) -> dict[str, dict]:
    """interfaces.json back into the cache (a restarted poller starts from what it knew)."""
    out = {}
    for addr, e in (read_json(interfaces_file(cfg)).get("exporters") or {}).items():
        polled = e.get("polled") or ""
        ms = int(dt.datetime.fromisoformat(polled.replace("Z", "+00:00")).timestamp() * 1000) if polled else 0
        out[addr] = {"sys_name": e.get("sys_name", ""), "polled_ms": ms, "error": e.get("error", ""),
                     "interfaces": {int(k): v for k, v in (e.get("interfaces") or {}).items()}}
    return out


def refresh_requests(cfg, exporters) -> list[str]:
    """Exporters with a pending refresh request (files named by safe_name)."""
    d = refresh_dir(cfg)
    if not d.is_dir():
        return []
    wanted = {safe_name(a): a for a in exporters}
    return sorted(wanted[p.name] for p in d.iterdir() if p.name in wanted)


def unknown_requests(cfg, exporters) -> list[Path]:
    """Refresh requests for exporters the poller does not poll (status shows them)."""
    d = refresh_dir(cfg)
    names = {safe_name(a) for a in exporters}
    return sorted(p for p in d.iterdir() if p.name not in names and not p.name.startswith(".")) if d.is_dir() else []


def done_refresh(cfg, exporter: str) -> None:
    (refresh_dir(cfg) / safe_name(exporter)).unlink(missing_ok=True)


# ---- counters in the lake ---------------------------------------------------------

def file_schema():
    """The Parquet files' schema: the table's, without the partition column (its folder says it)."""
    schema = arrow_schema(INTERFACE_COUNTERS)
    return schema.remove(schema.get_field_index("date"))


def write_counters(cfg, exporter: str, time_ms: int, rows: list[dict]) -> Path | None:
    """One poll of one exporter as one Parquet file, committed by its rename."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    if not rows:
        return None
    day = dt.datetime.fromtimestamp(time_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d")
    folder = counters_dir(cfg) / f"date={day}"
    folder.mkdir(parents=True, exist_ok=True)
    schema = file_schema()
    unknown = {"if_name": "", "speed_mbps": 0, "oper_status": 0}  # before the first inventory answer
    table = pa.Table.from_pylist([{**unknown, **r, "time": dt.datetime.fromtimestamp(time_ms / 1000, dt.timezone.utc),
                                   "exporter": exporter} for r in rows], schema=schema)
    path = folder / f"{safe_name(exporter)}-{time_ms}.parquet"
    tmp = folder / f".{path.name}.tmp"  # hidden: readers' *.parquet globs skip it
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(path)
    return path


FILE_NAME = re.compile(r"^(?P<exporter>.+)-(?P<ms>\d{10,})\.parquet$")


def last_samples(cfg, exporters) -> dict[str, dict]:
    """Per exporter, the raw values of its newest counter file (the previous poll after a
    restart): {"time_ms", "sys_uptime_cs", "counters": {ifIndex: {counter: raw}}}."""
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    root = counters_dir(cfg)
    if not root.is_dir():
        return {}
    wanted = {safe_name(a): a for a in exporters}
    newest: dict[str, tuple[int, Path]] = {}
    days = sorted((p for p in root.iterdir() if p.name.startswith("date=")), reverse=True)
    for day in days[:2]:  # today's and yesterday's files hold every exporter polled lately
        for f in day.glob("*.parquet"):
            m = FILE_NAME.match(f.name)
            if m and m["exporter"] in wanted and int(m["ms"]) > newest.get(m["exporter"], (0, None))[0]:
                newest[m["exporter"]] = (int(m["ms"]), f)
    out = {}
    for name, (ms, f) in newest.items():
        t = pq.read_table(f).to_pylist()
        if not t:
            continue
        out[wanted[name]] = {
            "time_ms": ms, "sys_uptime_cs": int(t[0]["sys_uptime_cs"]),
            "counters": {int(r["if_index"]): {c: (unsigned64(r[f"{c}_counter"]) if bits == 64 else r[f"{c}_counter"])
                                              for c, _oid, bits in COUNTERS} for r in t}}
    return out


def compact_old_days(cfg, today: dt.date | None = None) -> list[str]:
    """Merge each day's per-poll files into one, for days before yesterday (the poller
    writes only today's; yesterday's stay as they are for last_samples): 1,440 files per
    exporter and day would otherwise pile up for [retention] interface_counters_days.
    The partition is swapped whole (jobs.context.replace_partition): readers see the poll
    files or the merged one, never both. Returns the days merged."""
    from flowlake.base.lake_files import merge_old_days  # noqa: PLC0415  (start-up: flowlake status)

    today = today or dt.datetime.now(dt.timezone.utc).date()
    return merge_old_days(counters_dir(cfg), file_schema(), ["exporter", "if_index", "time"], today)
