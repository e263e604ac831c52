"""nfcapd (nfdump 1.7) supervision: the collector routers export to.

nfcapd writes `nfcapd.current.<pid>` and renames it to `nfcapd.YYYYMMDDhhmmss` every
`rotate_seconds`; the shipper only ever reads renamed (closed) files. After each
rotation nfcapd prints one line of statistics, which `received()` sums for status.
"""
from __future__ import annotations

import re
import shutil
import struct
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


# [collector] spool_compression -> nfcapd 1.7.1's flag (nfcapd(1): -y LZ4, -j bz2; its -z is
# LZO, and 1.7.1 writes no zstd). The shipper and `flowlake import` read all of them
# (collectors/shipper/nffile.go). LZ4 keeps the spool at about a fifth of its plain size
# (~22 against ~110 bytes per flow, tests/collectors/test_spool_compression.py).
SPOOL_COMPRESSION = {"none": (), "lz4": ("-y",), "bz2": ("-j",)}


def compression_flags(cfg=None) -> list[str]:
    cfg = cfg or _config.get()
    value = cfg.collector.spool_compression
    if value not in SPOOL_COMPRESSION:
        raise _config.ConfigError(
            f"config [collector] spool_compression = {value!r}: expected one of "
            f"{', '.join(repr(k) for k in SPOOL_COMPRESSION)} (what nfcapd 1.7.1 writes; it has no zstd)")
    return list(SPOOL_COMPRESSION[value])


def argv(cfg=None) -> list[str]:
    cfg = cfg or _config.get()
    flags = compression_flags(cfg)
    exe = shutil.which("nfcapd")
    if exe is None:
        raise RuntimeError("nfcapd is not installed (Debian package nfdump): run `make setup`")
    c = cfg.collector
    return [exe, "-b", c.bind, "-p", str(c.port), "-w", str(spool_dir(cfg)),
            "-t", str(c.rotate_seconds), "-B", str(c.socket_buffer), "-I", "flowlake", *flags]
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


# nfdump 1.7 file layout (nffileV2.h): a 40-byte header; the appendix block at offAppendix
# holds an ident record (0x8001) and the stat record (0x8002, numflows first), compressed
# like the data blocks unless its flags say otherwise.
_HEADER = struct.Struct("<HHIQBBHIQII")
_BLOCK = struct.Struct("<IIHH")
_COMPRESSION_NAMES = {0: "none", 1: "lzo", 2: "bz2", 3: "lz4", 4: "zstd"}
_TYPE_STAT = 0x8002


def _plain_block(data: bytes, method: int) -> bytes | None:
    """One appendix block decompressed; None for LZO (no Python codec here)."""
    if method == 0:
        return data
    if method == 2:
        import bz2  # noqa: PLC0415  (start-up: only for bz2 spool files)

        return bz2.decompress(data)
    if method in (3, 4):
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow only when status reads a compressed spool)

        return pa.decompress(data, decompressed_size=1 << 16, codec="lz4_raw" if method == 3 else "zstd", asbytes=True)
    return None


def file_summary(path: Path) -> dict:
    """{"compression", "flows"} of a closed nfcapd file from its header and its appendix's
    stat record (the file's own count, as `nfdump -I` prints it), without reading its
    flows. flows is None when the file has no readable appendix (unfinished, LZO, damaged)."""
    with open(path, "rb") as fh:
        head = fh.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return {"compression": "unknown", "flows": None}
        magic, version, _nfd, _created, method, _enc, appendix, _creator, off, _bs, _nb = _HEADER.unpack(head)
        if magic != 0xA50C or version != 2:
            return {"compression": "unknown", "flows": None}
        out = {"compression": _COMPRESSION_NAMES.get(method, f"method {method}"), "flows": None}
        if not appendix or not off:
            return out
        fh.seek(off)
        block = fh.read(_BLOCK.size)
        if len(block) < _BLOCK.size:
            return out
        records, size, _type, flags = _BLOCK.unpack(block)
        data = fh.read(size)
    try:
        plain = data if flags & 1 else _plain_block(data, method)
    except (OSError, ValueError, ArithmeticError):  # a damaged block: no count, never a crash
        return out
    pos = 0
    for _ in range(records if plain is not None else 0):
        if pos + 4 > len(plain):
            break
        rtype, rsize = struct.unpack_from("<HH", plain, pos)
        if rtype == _TYPE_STAT and pos + 12 <= len(plain):
            out["flows"] = struct.unpack_from("<Q", plain, pos + 4)[0]
            break
        if rsize < 4:
            break
        pos += rsize
    return out


def spool_stats(cfg=None, newest: int = 100) -> dict:
    """The spool's size per flow: bytes over flows of its newest `newest` closed files (the
    current setting's effect; reading every appendix of a day's spool would cost status
    seconds), the configured compression and what those files hold."""
    cfg = cfg or _config.get()
    spool = spool_dir(cfg)
    dated = []
    for p in spool.rglob("nfcapd.*"):
        if ".current." in p.name:
            continue
        try:
            dated.append((p.stat().st_mtime, p))
        except OSError:  # shipped and removed by retention meanwhile
            continue
    files = [p for _, p in sorted(dated, reverse=True)[:newest]]
    flows = size = read = unreadable = 0
    seen: dict[str, int] = {}
    for f in files:
        try:
            summary = file_summary(f)
            nbytes = f.stat().st_size
        except OSError:  # shipped and removed by retention meanwhile
            continue
        seen[summary["compression"]] = seen.get(summary["compression"], 0) + 1
        if summary["flows"] is None:
            unreadable += 1
            continue
        read += 1
        flows += summary["flows"]
        size += nbytes
    return {"compression": cfg.collector.spool_compression, "files_read": read,
            "files_unreadable": unreadable, "file_compression": seen, "flows": flows, "bytes": size,
            "bytes_per_flow": round(size / flows, 1) if flows else None}


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
    spool_compression: str


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
        return {"received": received(self.cfg), "spool": {**spool_usage(self.cfg), **_per_flow(self.cfg)},
                "rejected": rejected(self.cfg)}


def _per_flow(cfg) -> dict:
    st = spool_stats(cfg)
    return {"bytes_per_flow": st["bytes_per_flow"]}
