"""iputils `ping` and `fping` (-c / -C) text output -> one rtt record per target."""
from __future__ import annotations

import re

from .. import pinger
from ..result import ParseError, file_mtime_ms, make

_TS = r"(?:\[(?P<ts>\d+\.\d+)\]\s+)?"
PING_HEADER = re.compile(r"^PING (?P<host>\S+) \((?P<addr>[^)]+)\)(?: from (?P<src>\S+))?.*?(?P<size>\d+)\(\d+\) bytes")
PING_REPLY = re.compile(_TS + r"^(?P<bytes>\d+) bytes from (?P<from>[^:]+): icmp_seq=(?P<seq>\d+)"
                        r"(?: ttl=(?P<ttl>\d+))? time=(?P<rtt>[\d.]+) ms(?P<dup> \(DUP!\))?")
PING_STATS = re.compile(r"^(?P<sent>\d+) packets transmitted, (?P<recv>\d+) (?:packets )?received"
                        r"(?:, \+(?P<dups>\d+) duplicates)?")
PING_TIME = re.compile(r"time (?P<ms>\d+)ms")

FPING_EACH = re.compile(_TS.replace("^", "") + r"^(?P<host>\S+)\s+: \[(?P<seq>\d+)\], (?:(?P<bytes>\d+) bytes, "
                        r"(?P<rtt>[\d.]+) ms|timed out)")
FPING_SUMMARY = re.compile(r"^(?P<host>\S+)\s+: xmt/rcv/%loss = (?P<sent>\d+)/(?P<recv>\d+)/")
FPING_C = re.compile(r"^(?P<host>\S+)\s+: (?P<vals>(?:[\d.]+|-)(?: (?:[\d.]+|-))*)\s*$")


def _strip_ts(line: str) -> tuple[float | None, str]:
    m = re.match(r"^\[(\d+\.\d+)\]\s+", line)
    if m:
        return float(m.group(1)), line[m.end():]
    return None, line


def parse_ping(path, text: str) -> list[dict]:
    lines = text.splitlines()
    header = None
    replies, stamps = [], []
    stats = None
    elapsed_ms = None
    for no, raw in enumerate(lines, 1):
        ts, line = _strip_ts(raw.strip())
        if not line:
            continue
        if line.startswith("PING "):
            header = PING_HEADER.match(line)
            if not header:
                raise ParseError(path, no, f"unreadable ping header: {line!r}")
            continue
        if " bytes from " in line:
            m = PING_REPLY.match(line)
            if not m:
                raise ParseError(path, no, f"unreadable ping reply: {line!r}")
            replies.append((int(m["seq"]), float(m["rtt"])))
            if ts is not None:
                stamps.append(ts)
            continue
        if "packets transmitted" in line:
            stats = PING_STATS.match(line)
            if not stats:
                raise ParseError(path, no, f"unreadable ping statistics: {line!r}")
            t = PING_TIME.search(line)
            elapsed_ms = int(t["ms"]) if t else None
    if header is None:
        raise ParseError(path, 1, "not iputils ping output: no 'PING host (addr)' header")
    if stats is None:
        raise ParseError(path, len(lines), "truncated ping output: no 'packets transmitted' statistics line")
    sent = int(stats["sent"])
    if len({s for s, _ in replies}) != int(stats["recv"]):
        raise ParseError(path, None, f"{len(replies)} reply lines but statistics say {stats['recv']} received")
    if stamps:
        start = int(stamps[0] * 1000 - replies[0][1])
        end = int(stamps[-1] * 1000)
    else:  # no -D timestamps: the file's mtime is the end of the run
        end = file_mtime_ms(path)
        start = end - (elapsed_ms or 0)
    m = pinger.metrics(replies, sent)
    params = {"packet_size": header["size"], "count": sent, "host": header["host"],
              "time_source": "ping -D" if stamps else "file mtime"}
    return [make("rtt", header["src"] or "", header["addr"], start, end, params, m, "ping", path)]


def parse_fping(path, text: str) -> list[dict]:
    per_host: dict[str, dict] = {}
    order: list[str] = []
    for no, raw in enumerate(text.splitlines(), 1):
        ts, line = _strip_ts(raw.strip())
        if not line:
            continue
        m = FPING_EACH.match(line)
        if m:
            h = per_host.setdefault(m["host"], {"replies": [], "sent": None, "stamps": [], "n": 0})
            if m["host"] not in order:
                order.append(m["host"])
            h["n"] = max(h["n"], int(m["seq"]) + 1)
            if m["rtt"] is not None:
                h["replies"].append((int(m["seq"]), float(m["rtt"])))
            if ts is not None:
                h["stamps"].append(ts)
            continue
        m = FPING_SUMMARY.match(line)
        if m:
            h = per_host.setdefault(m["host"], {"replies": [], "sent": None, "stamps": [], "n": 0})
            h["sent"] = int(m["sent"])
            if m["host"] not in order:
                order.append(m["host"])
            continue
        m = FPING_C.match(line)
        if m:  # -C: the final per-host line lists every RTT, '-' for a lost probe
            h = per_host.setdefault(m["host"], {"replies": [], "sent": None, "stamps": [], "n": 0})
            if m["host"] not in order:
                order.append(m["host"])
            vals = m["vals"].split()
            h["sent"] = len(vals)
            if not h["replies"]:
                h["replies"] = [(i, float(v)) for i, v in enumerate(vals) if v != "-"]
            continue
        raise ParseError(path, no, f"unreadable fping line: {line!r}")
    if not per_host:
        raise ParseError(path, 1, "no fping results found")
    out = []
    for host in order:
        h = per_host[host]
        sent = h["sent"] or h["n"]
        if not sent:
            raise ParseError(path, None, f"fping: no probe count for {host} (missing summary line)")
        if h["stamps"]:
            start, end = int(h["stamps"][0] * 1000), int(h["stamps"][-1] * 1000)
        else:
            end = file_mtime_ms(path)
            start = end
        params = {"count": sent, "time_source": "fping -D" if h["stamps"] else "file mtime"}
        out.append(make("rtt", "", host, start, end, params, pinger.metrics(h["replies"], sent), "fping", path))
    return out
