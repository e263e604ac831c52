"""Network-namespace plumbing shared by the labs: commands, namespaces, veth links,
tbf, random drop, processes, and clean-up on every exit path.

Namespaces are named PREFIX-<pid>-<role> so parallel labs (other developers, other test
runs) never collide, and `Namespaces.close()` deletes exactly the ones it made. With an
owner record (a JSON file: pid, process start time, namespaces, veths, processes), what a
SIGKILLed lab left can be found and removed later (leftovers.py); the record is written
before each thing is made and removed by close().
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import click

from .procs import process_start


def sh(*cmd, check=True, timeout: float = 60.0) -> subprocess.CompletedProcess:
    try:
        res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise click.ClickException(f"`{' '.join(map(str, cmd))}` did not finish in {timeout:g}s") from None
    if check and res.returncode != 0:
        raise click.ClickException(f"`{' '.join(map(str, cmd))}` failed ({res.returncode}): {res.stderr.strip()}")
    return res


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tc_rate_bps(rate: str, hint: str = "--rate") -> float:
    """tc rate text ('50mbit', '1gbit', '800kbit', '10mbps') -> bit/s."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([kmgt]?)(bit|bps)?\s*", str(rate).lower())
    if not m:
        raise click.BadParameter(f"{rate!r}: expected a tc rate such as 50mbit", param_hint=hint)
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m[2]]
    return float(m[1]) * scale * (8 if m[3] == "bps" else 1)


def in_ns(ns: str, *cmd) -> list[str]:
    return ["ip", "netns", "exec", ns, *map(str, cmd)]


class Namespaces:
    """Namespaces, veth links and processes of one lab; close() undoes all of it."""

    def __init__(self, prefix: str = "fl-lab", record: Path | None = None):
        self.prefix = f"{prefix}-{os.getpid()}"
        self.created: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self._n = 0
        self.record = record
        self.veths: list[str] = []
        self.notes: dict = {}  # more for the record (the export's open run window)

    def note(self, **kv) -> None:
        self.notes.update(kv)
        self._save()

    def _save(self) -> None:
        """Rewrite the owner record (atomically: a kill mid-write leaves the previous one)."""
        if self.record is None:
            return

        self.record.parent.mkdir(parents=True, exist_ok=True)
        doc = {"pid": os.getpid(), "started": process_start(os.getpid()), "prefix": self.prefix,
               "namespaces": self.created, "veths": self.veths,
               "procs": [[p.pid, process_start(p.pid)] for p in self.procs], **self.notes}
        tmp = self.record.with_name(self.record.name + ".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.record)

    def add(self, role: str) -> str:
        name = f"{self.prefix}-{role}"
        self.created.append(name)
        self._save()  # recorded before it exists: a kill in between leaves nothing unrecorded
        sh("ip", "netns", "add", name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def link(self, ns_a: str, ns_b: str, addr_a: str, addr_b: str, prefix_len: int = 24) -> tuple[str, str]:
        """A veth pair between two namespaces, addressed and up; returns the device names."""
        self._n += 1
        tag = f"{os.getpid() % 100000:05d}{self._n}"
        dev_a, dev_b = f"fa{tag}", f"fb{tag}"  # IFNAMSIZ is 15: keep names short
        self.veths += [dev_a, dev_b]  # a kill before they move leaves them in the host's namespace
        self._save()
        sh("ip", "link", "add", dev_a, "type", "veth", "peer", "name", dev_b)
        sh("ip", "link", "set", dev_a, "netns", ns_a)
        sh("ip", "link", "set", dev_b, "netns", ns_b)
        for ns, dev, addr in ((ns_a, dev_a, addr_a), (ns_b, dev_b, addr_b)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/{prefix_len}", "dev", dev)
            # an interface coming up announces itself (gratuitous ARP), as a router's does: without
            # it the peer's ARP retries (3 probes a second apart, then FAILED) decide when traffic
            # resumes after a flap, up to a second after the link is back (seen: nothing arrived
            # in the 0.8 s a stream ran after the outage)
            sh(*in_ns(ns, "sysctl", "-q", "-w", f"net.ipv4.conf.{dev}.arp_notify=1"))
            sh("ip", "-n", ns, "link", "set", dev, "up")
        return dev_a, dev_b

    def tbf(self, ns: str, dev: str, rate: str, burst: str = "32kbit", latency: str = "100ms") -> None:
        """The bottleneck: a token bucket; `latency` bounds how long a packet may queue."""
        sh(*in_ns(ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", burst,
                  "latency", latency))

    def random_drop(self, ns: str, dev: str, percent: float) -> str:
        """Drop `percent` % of the packets arriving on `dev` at random (netem is absent here),
        as a lossy wire would: on the receiving side, since a drop on the sender's output
        hook is reported to the sending socket (EPERM) instead of being lost silently.
        nftables if present (numgen random), else iptables' statistic match. Returns which."""
        per_mille = int(round(percent * 10))
        if _which("nft"):
            table = f"fl_drop_{dev}"
            sh(*in_ns(ns, "nft", "add", "table", "inet", table))
            sh(*in_ns(ns, "nft", "add", "chain", "inet", table, "in",
                      "{ type filter hook prerouting priority 0 ; }"))
            sh(*in_ns(ns, "nft", "add", "rule", "inet", table, "in", "iifname", dev,
                      "numgen", "random", "mod", "1000", "<", per_mille, "drop"))
            return "nftables"
        sh(*in_ns(ns, "iptables", "-t", "raw", "-A", "PREROUTING", "-i", dev, "-m", "statistic", "--mode", "random",
                  "--probability", f"{per_mille / 1000:.4f}", "-j", "DROP"))
        return "iptables"

    def clear_drop(self, ns: str, dev: str, how: str) -> None:
        if how == "nftables":
            sh(*in_ns(ns, "nft", "delete", "table", "inet", f"fl_drop_{dev}"), check=False)
        else:
            sh(*in_ns(ns, "iptables", "-t", "raw", "-F", "PREROUTING"), check=False)

    def set_link(self, ns: str, dev: str, up: bool) -> None:
        sh(*in_ns(ns, "ip", "link", "set", dev, "up" if up else "down"), check=False)

    def spawn(self, ns: str, *cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) -> subprocess.Popen:
        return self.adopt(subprocess.Popen(in_ns(ns, *cmd), stdout=stdout, stderr=stderr, text=True))

    def adopt(self, p: subprocess.Popen) -> subprocess.Popen:
        """A process of this lab: stopped by close(), recorded for a clean-up after a kill."""
        self.procs.append(p)
        self._save()
        return p

    def stop(self, p: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 5.0) -> None:
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.procs:
            self.procs.remove(p)

    def close(self) -> None:
        for p in reversed(list(self.procs)):
            self.stop(p)
        for ns in self.created:
            sh("ip", "netns", "del", ns, check=False)
        self.created.clear()
        if self.record is not None:
            self.record.unlink(missing_ok=True)


def _which(tool: str) -> bool:
    return shutil.which(tool) is not None


class Flapper(threading.Thread):
    """Takes a link down for `down_s`, up for `up_s`, repeatedly, until stopped; records
    the moments (CLOCK_MONOTONIC, as the paced endpoints stamp) it went down.

    The first outage comes `first_after_s` after `begin()`, not after the thread starts:
    the run calls it once its traffic flows (a paced stream: when the client says it is
    sending), so an outage cannot pass before the stream starts, however slowly the
    endpoints start on a loaded host."""

    def __init__(self, lab: Namespaces, ends: list[tuple[str, str]], down_s: float, up_s: float,
                 first_after_s: float = 1.0):
        super().__init__(daemon=True)
        self.lab, self.ends, self.down_s, self.up_s, self.first = lab, ends, down_s, up_s, first_after_s
        self.stopped = threading.Event()
        self.go = threading.Event()
        self.downs: list[tuple[float, float]] = []
        # per outage: (down called, down done, up called, up done); between the 2nd and the 3rd
        # the link was certainly down, outside the 1st and the 4th certainly up
        self.windows: list[tuple[float, float, float, float]] = []

    def begin(self) -> None:
        self.go.set()

    def run(self) -> None:
        self.go.wait()
        if self.stopped.wait(self.first):
            return
        while not self.stopped.is_set():
            t0 = time.monotonic()
            for ns, dev in self.ends:
                self.lab.set_link(ns, dev, False)
            t_down = time.monotonic()
            self.stopped.wait(self.down_s)
            t_up = time.monotonic()
            for ns, dev in self.ends:
                self.lab.set_link(ns, dev, True)
            t1 = time.monotonic()
            self.downs.append((t0, t1))
            self.windows.append((t0, t_down, t_up, t1))
            if self.stopped.wait(self.up_s):
                return

    def stop(self) -> None:
        self.stopped.set()
        self.go.set()
        self.join(self.down_s + 5)


@contextlib.contextmanager
def signals_raise():
    """SIGINT/SIGTERM raise KeyboardInterrupt in the main thread, so `finally` blocks run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for s in old:
        signal.signal(s, interrupted)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
