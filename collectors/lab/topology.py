"""A spec's topology made real: a client and a server namespace joined by one veth pair
per path, each shaped by tbf in both directions; conditions (random drop, flapping)
applied around a run and removed after it.

Path i uses 10.77.i.0/24 (client .1, server .2): the namespaces are private, so the
addresses never meet another lab's. With two paths, MPTCP may open a second subflow
from the client's address on path b.
"""
from __future__ import annotations

import contextlib

from .netns import Flapper, Namespaces, in_ns, sh
from .spec import Condition, Spec


class Topology:
    def __init__(self, spec: Spec, lab: Namespaces):
        self.spec, self.lab = spec, lab
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
        for ns in (self.client, self.server):
            sh(*in_ns(ns, "sysctl", "-q", "-w", "net.mptcp.enabled=1"), check=False)
            sh(*in_ns(ns, "ip", "mptcp", "limits", "set", "subflows", "2", "add_addr_accepted", "2"), check=False)
        if len(self.devs) == 2:  # a second MPTCP subflow from the client's address on the second path
            second = list(self.devs)[1]
            sh(*in_ns(self.client, "ip", "mptcp", "endpoint", "add", self.addrs[second][0],
                      "dev", self.devs[second][0], "subflow"))

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
