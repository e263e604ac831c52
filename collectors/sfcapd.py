"""sfcapd (nfdump 1.7.1's sFlow v5 collector, Debian `nfdump-sflow`) supervision (issue 35).

sfcapd listens on `[collector] sflow_port` and writes the same nfcapd files as nfcapd, into
the spool's `sflow/` directory: the shipper walks the whole spool, so its files ship exactly
once like nfcapd's, under ledger keys `sflow/nfcapd.YYYYMMDDhhmm[ss]` that cannot collide
with nfcapd's `nfcapd.YYYYMMDDhhmm[ss]`. It rotates its own files every `rotate_seconds`
and prints nfcapd's statistics line after each rotation (read here as for nfcapd).

What the shipper makes of its records (collectors/shipper/nffile.go `sflowFixup`): bytes
brought from the sampled frame length to layer 3, ICMP type/code to dst_port; packets and
bytes were scaled once by sfcapd by each sample's own rate, and the resolver keeps that rate
(docs/guide/collection.md, "sFlow").
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flowlake.base import config as _config
from flowlake.base.component import Component, ModuleComponent
from flowlake.base.gobuild import SHIPPER
from flowlake.base.process import Managed, udp_bound, wait_until

from . import nfcapd

SUBDIR = "sflow"
IDENT = "flowlake-sflow"


def spool_dir(cfg=None) -> Path:
    cfg = cfg or _config.get()
    return nfcapd.spool_dir(cfg) / SUBDIR


def managed(cfg=None) -> Managed:
    cfg = cfg or _config.get()
    return Managed("sfcapd", cfg.path("run"), cfg.path("log"))


def argv(cfg=None) -> list[str]:
    cfg = cfg or _config.get()
    exe = shutil.which("sfcapd")
    if exe is None:
        raise RuntimeError("sfcapd is not installed (Debian package nfdump-sflow): run `make setup`")
    c = cfg.collector
    # like nfcapd (collectors/nfcapd.py): same bind address, rotation, socket buffer and spool
    # compression (sfcapd 1.7.1 takes nfcapd's -y/-j); no -s: sfcapd scales by each sample's
    # own rate, flowlake never again
    return [exe, "-b", c.bind, "-p", str(c.sflow_port), "-w", str(spool_dir(cfg)),
            "-t", str(c.rotate_seconds), "-B", str(c.socket_buffer), "-I", IDENT,
            *nfcapd.compression_flags(cfg)]


def start(cfg=None, timeout: float = 20.0) -> int | None:
    cfg = cfg or _config.get()
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    spool = spool_dir(cfg)
    spool.mkdir(parents=True, exist_ok=True)
    nfcapd.recover_orphans(spool)
    port = cfg.collector.sflow_port
    if udp_bound(port):
        raise RuntimeError(
            f"UDP port {port} ([collector] sflow_port) is already bound by another process: "
            "set FLOWLAKE_COLLECTOR_SFLOW_PORT to a free port, or FLOWLAKE_COLLECTOR_SFLOW_ENABLED=false"
        )
    pid = proc.start(argv(cfg))
    wait_until(lambda: udp_bound(port), timeout, "sfcapd to bind its UDP port", proc=proc)
    return pid


def _log_text(cfg) -> str:
    try:
        return managed(cfg).logfile.read_text(errors="replace")
    except OSError:
        return ""


def received(cfg=None) -> dict:
    """Flows (= flow samples)/packets/bytes sfcapd reported, summed over its log (all runs).
    Packets and bytes as sfcapd counts them: scaled by the sampling rate, bytes as frames."""
    cfg = cfg or _config.get()
    totals = {"flows": 0, "packets": 0, "bytes": 0, "sequence_errors": 0, "bad_packets": 0}
    for m in nfcapd.STAT_LINE.finditer(_log_text(cfg)):
        totals["flows"] += int(m["flows"])
        totals["packets"] += int(m["packets"])
        totals["bytes"] += int(m["bytes"])
        totals["sequence_errors"] += int(m["seq"])
        totals["bad_packets"] += int(m["bad"])
    return totals


# sfcapd's words for a datagram it gave up on: "SFLOW: caught exception: N" with sflowtool's
# abort codes (sflow_nfdump.c SF_ABORT_*), and its other "SFLOW: ..." complaints.
SFLOW_LINE = re.compile(r"^SFLOW: (?!New exporter)(?P<what>.+)$", re.M)
ABORTS = {"1": "datagram ended before its contents (truncated, or a length pointing past its end)",
          "2": "decode error (not sFlow v5, or a field sFlow does not allow)",
          "3": "length error (a record's length disagrees with its contents)"}


def rejected(cfg=None) -> dict:
    """Datagrams sfcapd rejected, each logged reason counted: its abort codes in words, its
    other complaints with numbers folded ('Bad Packets' of its statistics line too, which
    sfcapd 1.7.1 leaves at 0 for sFlow). Each abort is one datagram whose samples were lost
    from the one that failed on: sfcapd owns the socket, the datagram itself is not kept."""
    cfg = cfg or _config.get()
    text = _log_text(cfg)
    reasons: dict[str, int] = {}
    for m in SFLOW_LINE.finditer(text):
        what = m["what"].strip()
        code = re.fullmatch(r"caught exception: (\d+)", what)
        key = ABORTS.get(code[1], what) if code else re.sub(r"\d+", "N", what)
        reasons[key] = reasons.get(key, 0) + 1
    for m in nfcapd.ERROR_LINE.finditer(text):
        line = m["line"].strip()
        if line.startswith(("===", "SFLOW:")) or nfcapd.STAT_LINE.search(line):
            continue
        key = re.sub(r"\d+", "N", line)
        reasons[key] = reasons.get(key, 0) + 1
    bad = sum(int(m["bad"]) for m in nfcapd.STAT_LINE.finditer(text))
    return {"bad_packets": bad, "errors": sum(reasons.values()), "reasons": reasons}


AGENT_LINE = re.compile(
    r"SFLOW: New exporter: SysID: (?P<sysid>\d+), agentSubId: (?P<sub>\d+), "
    r"MeanSkipCount: (?P<rate>\d+), IP: (?P<ip>\S+)")


def agents(cfg=None) -> dict:
    """sFlow agents sfcapd announced (its log, all runs): per exporter address and
    sub-agent id, the sampling rates it started with. sfcapd names the UDP sender here."""
    cfg = cfg or _config.get()
    out: dict[str, dict] = {}
    for m in AGENT_LINE.finditer(_log_text(cfg)):
        key = f"{m['ip']}/{m['sub']}"
        entry = out.setdefault(key, {"exporter": m["ip"], "sub_agent": int(m["sub"]), "rates": []})
        rate = int(m["rate"])
        if rate not in entry["rates"]:
            entry["rates"].append(rate)
    return out


# ---- the sFlow tap: what sfcapd does not keep of the datagrams (collectors/shipper/sflowtap.go)

def tap_state_file(cfg) -> Path:
    return cfg.path("state", "sampling", "sflow.json")


def tap_managed(cfg) -> Managed:
    return Managed("sflow-tap", cfg.path("run"), cfg.path("log"))


DROPS_SUBDIR = "sflow-drops"


def drops_dir(cfg=None) -> Path:
    """Where the sFlow tap writes discarded packet samples (0:5) as flow records: nfcapd files
    in the spool, shipped once under `sflow-drops/nfcapd.*` and deleted by the spool's
    retention like nfcapd's (collectors/shipper/sflowdrops.go)."""
    cfg = cfg or _config.get()
    return nfcapd.spool_dir(cfg) / DROPS_SUBDIR


def tap_argv(cfg) -> list[str]:
    c = cfg.collector
    return [str(SHIPPER.binary), "sflow-tap", "--bind", c.bind, "--port", str(c.sflow_port),
            "--dir", str(tap_state_file(cfg).parent), "--lake", str(cfg.lake),
            "--snmp-interfaces", str(cfg.path("state", "snmp", "interfaces.json")),
            "--flush", f"{int(c.sflow_flush_seconds)}s",
            "--keep", f"{int(cfg.sampling.keep_minutes)}m",  # its corrections (sflowfix/), as the sampling tap's
            "--drops-dir", str(drops_dir(cfg)), "--drops-rotate", f"{int(c.rotate_seconds)}s"]


def drops_usage(cfg=None) -> dict:
    """The tap's drop records: written (sflow.json, all agents), files and bytes in the spool
    (closed ones, shipped or not: the spool's retention deletes them once in the lake)."""
    cfg = cfg or _config.get()
    files = [p for p in drops_dir(cfg).glob("nfcapd.*") if p.is_file() and ".current." not in p.name]
    agents = tap_status(cfg).get("agents") or {}
    return {"records": sum(a.get("drop_records", 0) for a in agents.values()),
            "unwritten": sum(a.get("drop_records_unwritten", 0) for a in agents.values()),
            "files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def tap_status(cfg) -> dict:
    """sflow.json: per agent address and sub-agent, the UDP senders, datagrams, datagrams
    lost (sequence gaps), restarts, samples by kind, sampling rates, the agent's own drops,
    discards by forwarding_status, interface counter records, bad input by reason;
    malformed datagrams by reason. {} before the tap first ran. The tap's own bookkeeping
    (the counters' last raw values, rows not yet written, the open interval) is left out."""
    try:
        doc = json.loads(tap_state_file(cfg).read_text())
    except (OSError, ValueError):
        return {}
    doc.pop("counter_state", None)
    doc["pending_counter_rows"] = len(doc.get("pending_counter_rows") or [])
    for a in (doc.get("agents") or {}).values():
        a.pop("interval", None)
    return doc


def health_dir(cfg) -> Path:
    return Path(cfg.lake) / "sflow_agent_health"


def compact_old_days(cfg, *, counters: bool, today=None) -> dict[str, list[str]]:
    """The daily merge of what the sFlow tap writes (one file per flush: 1,440 a day with
    the default 60 s): each day before yesterday of lake/sflow_agent_health becomes one file
    (swapped whole, as the SNMP poller's merge does); with counters (an sFlow-only site:
    no SNMP poller, whose own daily merge would otherwise do it), lake/interface_counters
    too, by the SNMP poller's own merge (collectors/snmp/store.py compact_old_days). Run
    by every retention pass; a day already merged holds one file and is left alone.
    Returns the days merged per table."""
    import datetime as dt  # noqa: PLC0415  (only this pass)

    from flowlake.base.lake_files import merge_old_days  # noqa: PLC0415  (start-up: flowlake status)
    from flowlake.schemas.messages import arrow_schema  # noqa: PLC0415  (start-up: pyarrow)
    from flowlake.schemas.sflow import SFLOW_AGENT_HEALTH  # noqa: PLC0415  (start-up)

    from .snmp import store  # noqa: PLC0415  (start-up: pyarrow)

    today = today or dt.datetime.now(dt.UTC).date()
    schema = arrow_schema(SFLOW_AGENT_HEALTH)
    schema = schema.remove(schema.get_field_index("date"))
    done = {"sflow_agent_health": merge_old_days(health_dir(cfg), schema, ["agent", "sub_agent", "interval_start"],
                                                 today),
            "interface_counters": []}
    if counters:
        done["interface_counters"] = store.compact_old_days(cfg, today)
    return done


def spool_usage(cfg=None) -> dict:
    spool = spool_dir(cfg)
    files = [p for p in spool.rglob("nfcapd.*") if p.is_file() and ".current." not in p.name]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def stop(cfg=None) -> bool:
    # SIGTERM makes sfcapd flush and rename its current file, as nfcapd does.
    return managed(cfg).stop(timeout=20)


@dataclass(frozen=True)
class SflowSettings:
    """[collector] as sfcapd uses it."""
    bind: str
    sflow_port: int
    sflow_enabled: bool
    rotate_seconds: int
    socket_buffer: int


class Sfcapd(ModuleComponent):
    """nfdump's sFlow collector on the sFlow port, rotating files into the spool's sflow/."""
    name = "sfcapd"
    settings_type = SflowSettings
    section = "collector"
    functions = sys.modules[__name__]

    def enabled(self) -> bool:
        return self.settings.sflow_enabled

    def port(self) -> int:
        return self.settings.sflow_port

    def stop(self) -> bool:
        stopped = stop(self.cfg)
        time.sleep(0.5)  # sfcapd wrote its last file on the way out: let the shipper see it
        return stopped

    def status(self) -> dict:
        tap = tap_status(self.cfg)
        return {"received": received(self.cfg), "spool": spool_usage(self.cfg), "rejected": rejected(self.cfg),
                "announced": agents(self.cfg), "agents": tap.get("agents", {}),
                "tap": {"datagrams": tap.get("datagrams", 0), "malformed": tap.get("malformed", {})}}


@dataclass(frozen=True)
class SflowTapSettings:
    """[collector] and [sampling] as the sFlow tap uses them."""
    bind: str
    sflow_port: int
    sflow_enabled: bool


class SflowTap(Component):
    """A copy of every sFlow datagram sfcapd receives (raw socket, like the sampling tap):
    agent addresses, sequence gaps and restarts, sample kinds and rates per agent. Started
    before sfcapd so no datagram is missed; runs where the sampling tap runs ([sampling] tap)."""
    name = "sflow-tap"
    stop_timeout = 10.0
    settings_type = SflowTapSettings
    section = "collector"

    def enabled(self) -> bool:
        return self.settings.sflow_enabled and bool(self.cfg.sampling.tap)

    def managed(self) -> Managed:
        return tap_managed(self.cfg)

    def _start(self) -> int | None:
        proc = self.managed()
        if proc.running():
            return proc.pid()
        SHIPPER.build()
        state = tap_state_file(self.cfg)
        state.parent.mkdir(parents=True, exist_ok=True)
        before = state.stat().st_mtime if state.exists() else 0
        pid = proc.start(tap_argv(self.cfg))
        wait_until(lambda: state.exists() and state.stat().st_mtime > before, 20.0,
                   "the sFlow tap to open its raw socket", proc=proc)
        return pid

    def start(self) -> int | None:
        drops_dir(self.cfg).mkdir(parents=True, exist_ok=True)
        return self._start()

    def status(self) -> dict:
        tap = tap_status(self.cfg)
        return {"datagrams": tap.get("datagrams", 0), "malformed": tap.get("malformed", {}),
                "drops": drops_usage(self.cfg)}
