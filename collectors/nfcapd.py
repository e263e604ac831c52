"""nfcapd (nfdump 1.7) supervision: the collector routers export to.

nfcapd writes `nfcapd.current.<pid>` and renames it to `nfcapd.YYYYMMDDhhmmss` every
`rotate_seconds`; the shipper only ever reads renamed (closed) files. After each
rotation nfcapd prints one line of statistics, which `received()` sums for status.
"""
from __future__ import annotations

import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flowlake.base import config as _config
from flowlake.base.component import ModuleComponent
from flowlake.base.process import Managed, udp_bound, wait_until

STAT_LINE = re.compile(
    r"Ident: '(?P<ident>[^']*)' Flows: (?P<flows>\d+), Packets: (?P<packets>\d+), "
    r"Bytes: (?P<bytes>\d+), Sequence Errors: (?P<seq>\d+), Bad Packets: (?P<bad>\d+)"
)


def spool_dir(cfg=None) -> Path:
    cfg = cfg or _config.get()
    return cfg.path("nfcapd")


def managed(cfg=None) -> Managed:
    cfg = cfg or _config.get()
    return Managed("nfcapd", cfg.path("run"), cfg.path("log"))


def argv(cfg=None) -> list[str]:
    cfg = cfg or _config.get()
    exe = shutil.which("nfcapd")
    if exe is None:
        raise RuntimeError("nfcapd is not installed (Debian package nfdump): run `make setup`")
    c = cfg.collector
    return [exe, "-b", c.bind, "-p", str(c.port), "-w", str(spool_dir(cfg)),
            "-t", str(c.rotate_seconds), "-B", str(c.socket_buffer), "-I", "flowlake"]
    # no -s: nfcapd's default 1 leaves unannounced exporters alone; flowlake decides every
    # rate (collectors/sampling.py; -s -1 would multiply IPFIX counts by 2^32-1 in 1.7.1)


def start(cfg=None, timeout: float = 20.0) -> int:
    cfg = cfg or _config.get()
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    spool = spool_dir(cfg)
    spool.mkdir(parents=True, exist_ok=True)
    recover_orphans(spool)
    if udp_bound(cfg.collector.port):
        raise RuntimeError(
            f"UDP port {cfg.collector.port} is already bound by another process: "
            "set FLOWLAKE_COLLECTOR_PORT to a free port"
        )
    pid = proc.start(argv(cfg))
    wait_until(lambda: udp_bound(cfg.collector.port), timeout, "nfcapd to bind its UDP port", proc=proc)
    return pid


def recover_orphans(spool: Path) -> list[Path]:
    """A SIGKILLed nfcapd leaves nfcapd.current.<pid>; its written blocks are still flows
    that reached us. Rename it so the shipper takes it (the reader accepts an unfinished
    file up to its last complete block)."""
    out = []
    for orphan in spool.rglob("nfcapd.current.*"):
        pid = orphan.name.rsplit(".", 1)[-1]
        if pid.isdigit() and Path(f"/proc/{pid}").exists():
            continue  # a live nfcapd owns it
        stamp = orphan.stat().st_mtime
        name = "nfcapd." + time.strftime("%Y%m%d%H%M%S", time.gmtime(stamp)) + f".recovered{pid}"
        target = orphan.with_name(name)
        orphan.rename(target)
        out.append(target)
    return out


def received(cfg=None) -> dict:
    """Flows/packets/bytes nfcapd reported receiving, summed over its log (all runs)."""
    cfg = cfg or _config.get()
    totals = {"flows": 0, "packets": 0, "bytes": 0, "sequence_errors": 0, "bad_packets": 0}
    try:
        text = managed(cfg).logfile.read_text(errors="replace")
    except OSError:
        return totals
    for m in STAT_LINE.finditer(text):
        totals["flows"] += int(m["flows"])
        totals["packets"] += int(m["packets"])
        totals["bytes"] += int(m["bytes"])
        totals["sequence_errors"] += int(m["seq"])
        totals["bad_packets"] += int(m["bad"])
    return totals


# nfcapd's own words for input it rejected (garbage, truncated or malformed NetFlow).
ERROR_LINE = re.compile(
    r"^(?P<line>.*(?:error|Error|Unexpected|Not enough data|Abort|unknown template|Skip).*)$", re.M)


def rejected(cfg=None) -> dict:
    """Datagrams nfcapd rejected: its 'Bad Packets' counter plus each logged reason.

    nfcapd owns the socket, so the datagrams themselves are not kept; the reasons are
    (log lines name the problem and, where known, the exporter)."""
    cfg = cfg or _config.get()
    try:
        text = managed(cfg).logfile.read_text(errors="replace")
    except OSError:
        return {"bad_packets": 0, "errors": 0, "reasons": {}}
    reasons: dict[str, int] = {}
    for m in ERROR_LINE.finditer(text):
        line = m["line"].strip()
        if line.startswith("===") or STAT_LINE.search(line):
            continue
        key = re.sub(r"\d+", "N", line)
        reasons[key] = reasons.get(key, 0) + 1
    bad = sum(int(m["bad"]) for m in STAT_LINE.finditer(text))
    return {"bad_packets": bad, "errors": sum(reasons.values()), "reasons": reasons}


def spool_usage(cfg=None) -> dict:
    spool = spool_dir(cfg)
    files = [p for p in spool.rglob("nfcapd.*") if p.is_file() and ".current." not in p.name]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def stop(cfg=None) -> bool:
    # SIGTERM makes nfcapd flush and rename its current file.
    return managed(cfg).stop(timeout=20)


@dataclass(frozen=True)
class CollectorSettings:
    """[collector] as nfcapd uses it."""
    bind: str
    port: int
    rotate_seconds: int
    socket_buffer: int
    spool_warn_bytes: int


class Nfcapd(ModuleComponent):
    """nfdump's collector on the collector port, rotating files into the spool."""
    name = "nfcapd"
    settings_type = CollectorSettings
    section = "collector"
    functions = sys.modules[__name__]

    def port(self) -> int:
        return self.settings.port

    def stop(self) -> bool:
        stopped = stop(self.cfg)
        time.sleep(0.5)  # nfcapd wrote its last file on the way out: let the shipper see it
        return stopped

    def status(self) -> dict:
        return {"received": received(self.cfg), "spool": spool_usage(self.cfg), "rejected": rejected(self.cfg)}
