"""Send routers' datagrams over UDP, each router from its own source address, paced by
model time (speedup) and by a flow-rate ceiling so the collector's socket never overflows."""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .netflow import Datagram


def parse_target(text: str, default_port: int) -> tuple[str, int]:
    """'HOST:PORT', 'HOST', ':PORT' or '[v6]:PORT' -> (host, port); ValueError names the problem."""
    text = text.strip()
    if not text:
        raise ValueError("empty target: expected HOST:PORT")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        port_s = rest[1:] if rest.startswith(":") else ""
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r}: expected [IPv6]:PORT")
    elif text.count(":") == 1:
        host, port_s = text.split(":")
    else:
        host, port_s = text, ""
    host = host or "127.0.0.1"
    if port_s == "":
        port = default_port
    else:
        if not port_s.isdigit() or not 0 < int(port_s) < 65536:
            raise ValueError(f"{text!r}: port {port_s!r} is not a number in 1-65535")
        port = int(port_s)
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise ValueError(f"{text!r}: cannot resolve host {host!r} ({exc.strerror})") from None
    return host, port


def open_socket(source: str, target_host: str) -> socket.socket:
    """A UDP socket bound to the router's source address. Loopback targets need a loopback
    source (all of 127/8 is local on Linux); other targets send from the default address."""
    family = socket.AF_INET6 if ":" in target_host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    if family == socket.AF_INET and target_host.startswith("127."):
        sock.bind((source, 0))
    return sock


@dataclass
class SendStats:
    datagrams: int = 0
    flows: int = 0
    bytes: int = 0
    seconds: float = 0.0
    # with a speedup: how far behind its schedule the sender fell at worst (a starved
    # process sends late, and a collector then sees its routers fall silent meanwhile)
    max_late_s: float = 0.0

    @property
    def flows_per_s(self) -> float:
        return self.flows / self.seconds if self.seconds else 0.0


def send(streams: list[tuple[socket.socket, list[Datagram]]], target: tuple[str, int], start_ms: int,
         speedup: float | None, max_rate: float | None,
         progress: Callable[[int], None] | None = None) -> SendStats:
    """Send every router's datagrams in model-time order.

    speedup None: as fast as max_rate allows; else model second k is sent at wall second
    k/speedup. max_rate (flows/s) caps the burst rate whatever the speedup."""
    keys = np.concatenate([np.array([d.export_ms for d in dg], np.int64) for _, dg in streams]) \
        if streams else np.zeros(0, np.int64)
    who = np.concatenate([np.full(len(dg), i) for i, (_, dg) in enumerate(streams)]) if streams else keys
    idx = np.concatenate([np.arange(len(dg)) for _, dg in streams]) if streams else keys
    order = np.argsort(keys, kind="stable")  # stable: keeps each router's own order
    socks = [s for s, _ in streams]
    lists = [dg for _, dg in streams]
    stats = SendStats()
    t0 = time.perf_counter()
    last_report = 0
    for k, j in enumerate(order):
        d = lists[who[j]][idx[j]]
        if k % 16 == 0:
            due = 0.0
            if speedup:
                due = (d.export_ms - start_ms) / 1000.0 / speedup
            if max_rate:
                due = max(due, stats.flows / max_rate)
            ahead = due - (time.perf_counter() - t0)
            if ahead > 0:
                time.sleep(ahead)
            elif speedup:
                stats.max_late_s = max(stats.max_late_s, -ahead)
        while True:
            try:
                socks[who[j]].sendto(d.payload, target)
                break
            except BlockingIOError:  # pragma: no cover - only with a non-blocking socket
                time.sleep(0.001)
        stats.datagrams += 1
        stats.flows += d.flows
        stats.bytes += len(d.payload)
        if progress and stats.flows - last_report >= 20000:
            progress(stats.flows - last_report)
            last_report = stats.flows
    if progress:
        progress(stats.flows - last_report)
    stats.seconds = time.perf_counter() - t0
    return stats


def wait_drained(port: int, timeout: float = 20.0) -> bool:
    """Wait until the local UDP socket on `port` has no unread datagrams (Linux
    /proc/net/udp rx_queue), so a collector stopped right after an export loses nothing.
    Returns False on timeout."""
    hexport = f":{port:04X}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = 0
        for table in ("/proc/net/udp", "/proc/net/udp6"):
            try:
                lines = open(table).read().splitlines()[1:]
            except OSError:
                continue
            for ln in lines:
                cols = ln.split()
                if cols[1].endswith(hexport):
                    pending += int(cols[4].split(":")[1], 16)
        if pending == 0:
            time.sleep(0.2)  # the last datagram read may still be being written
            return True
        time.sleep(0.05)
    return False
