"""A spec's topology made real: a client and a server namespace joined by one veth pair
per path, each shaped by tbf in both directions and, with `delay_ms`, delayed by that
much each way after the bottleneck (delay.py: NFQUEUE on what each end receives, as a
long wire would after the sender's queue); conditions (random drop, flapping) applied
around a run and removed after it.

Path i uses 10.77.i.0/24 (client .1, server .2): the namespaces are private, so the
addresses never meet another lab's. With two paths, MPTCP may open a second subflow
from the client's address on path b.
"""
from __future__ import annotations

import contextlib
import re
import subprocess
import sys

import click

from .netns import Flapper, Namespaces, in_ns, sh
from .spec import Condition, Spec


class Topology:
    def __init__(self, spec: Spec, lab: Namespaces, delay_queue_packets: int = 10000):
        self.spec, self.lab = spec, lab
        self.delay_queue_packets = delay_queue_packets
        self.delay_lines: list[subprocess.Popen] = []
        self.client = self.server = ""
        self.devs: dict[str, tuple[str, str]] = {}   # path -> (client dev, server dev)
        self.addrs: dict[str, tuple[str, str]] = {}  # path -> (client addr, server addr)

    def build(self) -> None:
        self.client, self.server = self.lab.add("c"), self.lab.add("s")
        for i, (name, p) in enumerate(self.spec.paths.items(), start=1):
            ca, sa = f"10.77.{i}.1", f"10.77.{i}.2"
            dc, ds = self.lab.link(self.client, self.server, ca, sa)
            burst = p.burst
            self.lab.tbf(self.client, dc, p.rate, burst, f"{p.queue_ms:g}ms")
            self.lab.tbf(self.server, ds, p.rate, burst, f"{p.queue_ms:g}ms")
            self.devs[name], self.addrs[name] = (dc, ds), (ca, sa)
        self._delay()
        for ns in (self.client, self.server):
            sh(*in_ns(ns, "sysctl", "-q", "-w", "net.mptcp.enabled=1"), check=False)
            sh(*in_ns(ns, "ip", "mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "2"), check=False)
        if len(self.devs) == 2:  # a second MPTCP subflow from the client's address on the second path
            second = list(self.devs)[1]
            sh(*in_ns(self.client, "ip", "mptcp", "endpoint", "add", self.addrs[second][0],
                      "dev", self.devs[second][0], "subflow"))

    def _delay(self) -> None:
        """Each delayed path: its packets queued (NFQUEUE number = path index) on arrival at
        either end, released by one delay line per namespace after `delay_ms`. No
        --queue-bypass: if a delay line died, its path would carry nothing rather than
        quietly carry undelayed traffic (and `check_delay` says so)."""
        queues: dict[str, list[str]] = {self.client: [], self.server: []}
        for i, (name, p) in enumerate(self.spec.paths.items(), start=1):
            if not p.delay_ms:
                continue
            for ns, dev in zip((self.client, self.server), self.devs[name]):
                sh(*in_ns(ns, "iptables", "-t", "mangle", "-A", "PREROUTING", "-i", dev, "-j", "NFQUEUE",
                          "--queue-num", i))
                queues[ns].append(f"{i}:{p.delay_ms:g}")
        for ns, qs in queues.items():
            if not qs:
                continue
            args = [a for q in qs for a in ("--queue", q)]
            proc = self.lab.spawn(ns, sys.executable, "-m", "flowlake.collectors.lab.delay", *args,
                                  "--maxlen", self.delay_queue_packets, stdout=subprocess.PIPE)
            if "ready" not in proc.stdout.readline():
                raise click.ClickException(f"the delay line in {ns} did not start: {proc.stderr.read().strip()}")
            self.delay_lines.append(proc)

    def check_delay(self) -> None:
        """A run on a path whose delay line died would measure nothing true: stop the lab."""
        for proc in self.delay_lines:
            if proc.poll() is not None:
                raise click.ClickException(f"a delay line exited ({proc.returncode}): {proc.stderr.read().strip()}")

    def queue_drops(self, path: str) -> int:
        """Packets the client side's tbf of `path` has dropped so far (queue full): loss
        that is the bottleneck's, not the configured random drop's."""
        out = sh(*in_ns(self.client, "tc", "-s", "qdisc", "show", "dev", self.devs[path][0]), check=False).stdout
        return sum(int(n) for n in re.findall(r"dropped (\d+)", out))

    def tcp_recoveries(self) -> int:
        """Fast recoveries the client namespace's TCP has entered so far (TcpExt
        TCPSackRecovery + TCPRenoRecovery in its /proc/net/netstat): congestion signals, each
        one window reduction however many segments it lost (a dropped GSO packet loses several)."""
        out = sh(*in_ns(self.client, "cat", "/proc/net/netstat"), check=False).stdout
        rows = [line.split() for line in out.splitlines() if line.startswith("TcpExt:")][:2]
        if len(rows) < 2:
            return 0
        ext = dict(zip(*rows))
        return int(ext.get("TCPSackRecovery", 0)) + int(ext.get("TCPRenoRecovery", 0))

    def receiver_drops(self) -> int:
        """UDP datagrams the server namespace's sockets dropped so far (receive buffer
        full: a receiver stalled by a busy host), from its /proc/net/snmp."""
        out = sh(*in_ns(self.server, "cat", "/proc/net/snmp"), check=False).stdout
        heads, values = [line.split() for line in out.splitlines() if line.startswith("Udp:")][:2]
        return int(dict(zip(heads, values)).get("RcvbufErrors", 0))

    def server_addr(self, path: str) -> str:
        return self.addrs[path.split("+")[0]][1]

    @contextlib.contextmanager
    def condition(self, cond: Condition):
        """Apply a condition for the duration of a run; undo it afterwards."""
        tables = []
        flapper = None
        try:
            if cond.loss_percent:
                for _, ds in self.devs.values():  # the client -> server direction
                    tables.append((ds, self.lab.random_drop(self.server, ds, cond.loss_percent)))
            if cond.flap_down_s:
                # the server's end goes down: the client's end (where softflowd captures)
                # only loses its carrier, so the capture survives the flapping
                _, ds = self.devs[cond.flap_path]
                flapper = Flapper(self.lab, [(self.server, ds)], cond.flap_down_s, cond.flap_up_s)
                flapper.start()
            yield flapper
        finally:
            if flapper:
                flapper.stop()
            for dev, how in tables:
                self.lab.clear_drop(self.server, dev, how)
