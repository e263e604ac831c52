"""Sampling, per exporter and per sampler (issue 20): the tap service, the settings the
shipper resolves rates with, and the figures `flowlake status` shows.

What nfcapd 1.7.1 does with each form (measured with real nfcapd, tests/collectors/test_sampling.py
repeats the measurements that matter):

| form                                                    | nfcapd 1.7.1 records        | applies        |
|---------------------------------------------------------|-----------------------------|----------------|
| v5 header sampling_interval                             | generic sampler             | yes            |
| v9 options 34+35, scope system                          | nothing                     | no             |
| v9 options 48+49+50                                     | nothing                     | no             |
| v9 options 48+34, 48 in the data records                | first sampler only          | to its flows only (of 4000/2000 only 4000) |
| IPFIX options 302+305+306 / 302+309+310 / 48+34         | one sampler, id 0           | no             |
| IPFIX options 149+305+304, 302+311                      | nothing                     | no             |
| data-record fields 34 / 305 (v9, IPFIX)                 | nothing                     | no             |
| rate changed mid-file (v9 34)                           | nothing                     | no             |
| `-s -1` (force 1:1)                                     | overwrite sampler           | v5/v9 x1, IPFIX x(2^32-1) (a bug) |

So flowlake decides: nfcapd keeps its default `-s 1`, the Go tap (`flowlake-shipper tap`,
collectors/shipper/tap.go) reads a copy of every datagram on the collector port through
a raw socket (nfcapd's `-R` repeater was tried: its copies all come from 127.0.0.1, so
routers cannot be told apart), and the shipper divides out what nfcapd applied (its own
sampler records, its own uint32 arithmetic) and multiplies by flowlake's rate, once.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flowlake.base import config as _config
from flowlake.base.component import ModuleComponent
from flowlake.base.gobuild import SHIPPER
from flowlake.base.process import Managed, wait_until

KEYS = ("sampling", "force_sampling")
log = logging.getLogger("flowlake.sampling")


def tap_dir(cfg) -> Path:
    return cfg.path("state", "sampling")


def settings_file(cfg) -> Path:
    return cfg.path("state", "sampling-settings.json")


def legacy_rate(cfg) -> int:
    """collector.sampling (before issue 20 it was nfcapd -s): N > 1 is the default rate of
    every exporter, -N forces N on every exporter; 1 is the default (nothing)."""
    return int(cfg.collector.sampling)


def legacy_warning(cfg) -> str | None:
    n = legacy_rate(cfg)
    if n == 1:
        return None
    table = '[exporters."*"]'
    key = f"force_sampling = {-n}" if n < 0 else f"sampling = {n}"
    return (f"collector.sampling = {n} is deprecated (nfcapd no longer applies it): read as {table} {key}; "
            f"move it there, or to [exporters.\"ROUTER-ADDRESS\"] for one router")


def settings(cfg=None) -> dict:
    """[exporters."ADDR"] tables ("*" = every exporter) as the shipper reads them.
    Other keys in an exporter's table (names, for enrichment) are left to their owners."""
    cfg = cfg or _config.get()
    exporters: dict[str, dict] = {}
    n = legacy_rate(cfg)
    if n > 1:
        exporters["*"] = {"sampling": n, "force_sampling": 0}
    elif n < 0:
        exporters["*"] = {"sampling": 0, "force_sampling": -n}
    for addr, table in (cfg.data.get("exporters") or {}).items():
        if not isinstance(table, dict):
            raise _config.ConfigError(f'[exporters] {addr} = {table!r}: expected a table [exporters."{addr}"]')
        row = {}
        for key in KEYS:
            v = table.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise _config.ConfigError(f'[exporters."{addr}"] {key} = {v!r}: expected a whole number >= 1 (1:N)')
            row[key] = v
        exporters[addr] = row
    unannounced = int(cfg.sampling.unannounced)
    if unannounced < 0:
        raise _config.ConfigError(f"[sampling] unannounced = {unannounced}: expected 1 (unsampled) or 0 (unknown)")
    return {"exporters": exporters, "unannounced": unannounced}


def write_settings(cfg=None) -> Path:
    """Write the settings where the shipper reads them (atomically); return the path."""
    cfg = cfg or _config.get()
    path = settings_file(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(settings(cfg), indent=1, sort_keys=True)
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def shipper_args(cfg) -> list[str]:
    return ["--sampling-settings", str(write_settings(cfg)), "--tap-dir", str(tap_dir(cfg))]


def managed(cfg=None) -> Managed:
    cfg = cfg or _config.get()
    return Managed("sampling-tap", cfg.path("run"), cfg.path("log"))


def tap_argv(cfg=None) -> list[str]:
    cfg = cfg or _config.get()
    return [str(SHIPPER.binary), "tap", "--bind", cfg.collector.bind, "--port", str(cfg.collector.port),
            "--dir", str(tap_dir(cfg)), "--keep", f"{int(cfg.sampling.keep_minutes)}m"]


def start(cfg=None, timeout: float = 20.0) -> int | None:
    """Start the tap before nfcapd, so no announcement is missed. None when switched off."""
    cfg = cfg or _config.get()
    warning = legacy_warning(cfg)
    if warning:
        log.warning(warning)
    if not cfg.sampling.tap:
        return None
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    SHIPPER.build()
    state = tap_dir(cfg) / "tap.json"
    before = state.stat().st_mtime if state.exists() else 0
    pid = proc.start(tap_argv(cfg))
    wait_until(lambda: state.exists() and state.stat().st_mtime > before, timeout,
               "the sampling tap to open its raw socket", proc=proc)
    return pid


def stop(cfg=None) -> bool:
    return managed(cfg).stop(timeout=10)


def status(cfg=None) -> dict:
    """Per exporter: samplers and rates announced (tap), flows shipped by how their rate
    was decided, flows whose rate is unknown; the settings in force."""
    cfg = cfg or _config.get()
    out: dict = {"settings": settings(cfg), "warning": legacy_warning(cfg), "tap": {}, "exporters": {}}
    try:
        out["tap"] = json.loads((tap_dir(cfg) / "tap.json").read_text())
    except (OSError, ValueError):
        pass
    fp = list((tap_dir(cfg) / "fp").glob("*.bin"))
    out["tap_disk"] = {"fingerprint_files": len(fp), "bytes": sum(p.stat().st_size for p in fp),
                       "keep_minutes": int(cfg.sampling.keep_minutes)}
    try:
        shipper = json.loads(cfg.path("state", "shipper.json").read_text())
    except (OSError, ValueError):
        shipper = {}
    shipped = shipper.get("sampling") or {}
    # the shipper waits for the tap to read a file's datagrams before resolving its flows
    # (collectors/shipper/watermark.go); files shipped before it caught up may hold unknown rates
    out["tap_wait"] = shipper.get("tap_wait") or {}
    try:
        out["tap_watermark_age_s"] = round(time.time() - int((tap_dir(cfg) / "tap.watermark").read_text()) / 1000, 1)
    except (OSError, ValueError):
        out["tap_watermark_age_s"] = None
    for addr, c in shipped.items():
        out["exporters"][addr] = {"flows": c.get("flows", 0), "unknown_rate_flows": c.get("unknown", 0),
                                  "decided_by": c.get("sources", {}), "rates": c.get("rates", {}), "samplers": {}}
    for e in (out["tap"].get("exporters") or {}).values():
        row = out["exporters"].setdefault(e["address"], {"flows": 0, "unknown_rate_flows": 0, "decided_by": {},
                                                          "rates": {}, "samplers": {}})
        for sid, rate in (e.get("samplers") or {}).items():
            row["samplers"][f"domain {e['domain']} sampler {sid}"] = {"rate": rate, "form": e["forms"].get(sid, "")}
    out["unknown_rate_flows"] = sum(e["unknown_rate_flows"] for e in out["exporters"].values())
    out["times"] = times_status(cfg)
    out["own_decode"] = own_decode_status(cfg, out["tap"])
    return out


def own_decode_status(cfg, tap: dict) -> dict:
    """Per exporter, what nfcapd 1.7.1 lost and flowlake decoded itself (docs/design/nfcapd-gaps.md):
    records completed, by what, and records with the symptom but no tap record (the
    shipper's counters); records the tap could not decode, by reason (tap.json)."""
    try:
        per = json.loads(cfg.path("state", "shipper.json").read_text()).get("own_decode") or {}
    except (OSError, ValueError):
        per = {}
    out = {addr: {"completed": dict(c.get("completed") or {}), "not_completed": dict(c.get("not_completed") or {}),
                  "undecodable": {}} for addr, c in per.items()}
    for e in (tap.get("exporters") or {}).values():
        for reason, n in (e.get("undecodable") or {}).items():
            row = out.setdefault(e["address"], {"completed": {}, "not_completed": {}, "undecodable": {}})
            row["undecodable"][reason] = row["undecodable"].get(reason, 0) + n
    return out


def times_status(cfg) -> dict:
    """Per exporter: flows whose times were corrected or quarantined, by reason (the
    shipper's counters), and the quarantined flows on disk (lake/quarantine/flows/)."""
    try:
        per = json.loads(cfg.path("state", "shipper.json").read_text()).get("times") or {}
    except (OSError, ValueError):
        per = {}
    qdir = cfg.lake / "quarantine" / "flows"
    on_disk = sum(sum(1 for _ in p.open()) for p in qdir.glob("*.jsonl")) if qdir.exists() else 0
    return {"exporters": per, "quarantined_flows": on_disk,
            "corrected_flows": sum(sum(c.get("corrected", {}).values()) for c in per.values())}


def print_status(console, st: dict) -> None:
    """The sampling table of `flowlake status`."""
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    t = Table(title="sampling per exporter")
    for col in ("exporter", "flows", "unknown rate", "rates in use (rate: flows)", "announced samplers"):
        t.add_column(col)
    for addr, e in sorted(st["exporters"].items()):
        rates = ", ".join(f"1:{r}: {n:,}" for r, n in sorted(e["rates"].items(), key=lambda kv: int(kv[0])))
        samplers = "; ".join(f"{k} 1:{v['rate']}" for k, v in sorted(e["samplers"].items())) or "-"
        unk = f"[bold red]{e['unknown_rate_flows']:,}[/]" if e["unknown_rate_flows"] else "0"
        t.add_row(addr, f"{e['flows']:,}", unk, rates or "-", samplers)
    console.print(t)
    if st["unknown_rate_flows"]:
        console.print(f"[bold red]{st['unknown_rate_flows']:,} flows have an unknown sampling rate "
                      "(sampling_rate 0 in the lake, wire counts): set [exporters.\"ADDR\"] sampling = N[/]")
    if st.get("warning"):
        console.print(f"[yellow]{st['warning']}[/]")
    tap, disk = st.get("tap") or {}, st.get("tap_disk") or {}
    if tap:
        console.print(f"sampling tap: {tap.get('datagrams', 0):,} datagrams read, {tap.get('malformed', 0):,} malformed; "
                      f"{disk.get('bytes', 0):,} bytes of record fingerprints (kept {disk.get('keep_minutes')} min)"
                      + (f"; read up to {st['tap_watermark_age_s']:.1f} s ago" if st.get("tap_watermark_age_s") is not None else ""))
    wait = st.get("tap_wait") or {}
    if wait.get("files"):
        console.print(f"the shipper waited for the tap on {wait['files']:,} files ({wait.get('wait_ms', 0) / 1000:,.1f} s in all)")
    if wait.get("late"):
        console.print(f"[bold red]{wait['late']:,} files shipped before the sampling tap caught up (their flows' rates "
                      f"came from the rate history): {wait.get('last_lag', '')}[/]")
    times = st.get("times") or {}
    if times.get("exporters"):
        tt = Table(title="flow times per exporter (corrected / quarantined to lake/quarantine/flows/)")
        for col in ("exporter", "what", "reason", "flows"):
            tt.add_column(col)
        for addr, c in sorted(times["exporters"].items()):
            for what, key in (("corrected", "corrected"), ("[red]quarantined[/]", "quarantined")):
                for reason, n in sorted((c.get(key) or {}).items()):
                    tt.add_row(addr, what, reason, f"{n:,}")
        console.print(tt)
    own = st.get("own_decode") or {}
    if own:
        ot = Table(title="records nfcapd could not decode, decoded by flowlake (per exporter)")
        for col in ("exporter", "what", "element / reason", "records"):
            ot.add_column(col)
        for addr, c in sorted(own.items()):
            for what, k in (("completed", "completed"), ("[yellow]not completed[/]", "not_completed"),
                            ("[red]could not decode[/]", "undecodable")):
                for reason, n in sorted((c.get(k) or {}).items()):
                    ot.add_row(addr, what, reason, f"{n:,}")
        console.print(ot)


def main() -> None:  # pragma: no cover - debugging aid: python -m flowlake.collectors.sampling
    json.dump(status(), sys.stdout, indent=1)


@dataclass(frozen=True)
class TapSettings:
    """[sampling] as the tap uses it."""
    tap: bool
    keep_minutes: int
    unannounced: int


class SamplingTap(ModuleComponent):
    """A copy of every datagram nfcapd receives: sampler announcements, exporter health."""
    name = "sampling-tap"
    stop_timeout = 10.0
    settings_type = TapSettings
    section = "sampling"
    functions = sys.modules[__name__]

    def enabled(self) -> bool:
        return True  # start() itself returns None when [sampling] tap is off (and logs legacy settings)
