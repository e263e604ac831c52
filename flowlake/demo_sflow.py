"""The demo's sFlow agents (issues 35 and 37): two modelled access switches that speak only
sFlow v5, sending to the stack's sfcapd while the demo closes its hours and runs its jobs,
so the Collection dashboard's sFlow charts (lake/sflow_agent_health, written by the sFlow
tap) and the agents' interface counters have data. Their flow samples are an hour of the
traffic model up to now (collectors/traffic/sflow.py), sampled 1:256 and 1:1024; they land
in lake/flows as today's flows of exporters 10.255.0.1 and 10.255.0.2 (the modelled day's
reports do not read them). One sampled flow in DROP_EVERY is also reported discarded (sFlow
drop notifications: ACL, TTL, policer): the tap's drop records, in `flowlake status` ("sFlow
drop samples") and in the lake as flows with forwarding_status 129/137/138."""
from __future__ import annotations

import threading
import time

AGENTS = (("10.255.0.1", 0, 256), ("10.255.0.2", 1, 1024))  # address, sub-agent, sampling rate
PORTS = (49, 1, 2, 3, 4)  # uplink first, then four access ports
SECONDS = 90.0            # spread over the demo's steps 4-5 (they take longer)
FLOWS = 6000
DROP_EVERY = 10           # of the sampled flows, one in 10 also a discarded packet sample (~40 in a demo)


class Sender:
    """The agents sending in a background thread; wait() before Superset reads the lake."""

    def __init__(self, cfg, console):
        self.cfg, self.console = cfg, console
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        self.sent: dict = {}
        self.started = time.time()

    def start(self) -> Sender:
        from flowlake import components  # noqa: PLC0415  (hub: the registry)

        if not (components.get(self.cfg, "sfcapd").enabled() and components.get(self.cfg, "sflow-tap").enabled()):
            self.console.print("[yellow]sFlow: sfcapd or the sFlow tap is off here: the demo sends no sFlow "
                               "(the Collection dashboard's sFlow charts stay empty)")
            return self
        from .collectors.traffic import api, model  # noqa: PLC0415  (start-up: numpy, scipy)
        from .collectors.traffic import sflow as encoder  # noqa: PLC0415  (start-up: numpy)

        c = self.cfg.collector
        target = (c.bind if c.bind not in ("0.0.0.0", "::") else "127.0.0.1", int(c.sflow_port))
        now_ms = int(time.time() * 1000)
        flows, _ = model.generate(api.params_for("ipfix", self.cfg), now_ms - 3_600_000, 3_600_000, FLOWS, seed=35)
        agents = [encoder.Agent(a, sub, rate, PORTS, drop_every=DROP_EVERY) for a, sub, rate in AGENTS]

        def run():
            self.sent = encoder.send(target, agents, flows, SECONDS, stop=self.stop)

        self.thread = threading.Thread(target=run, name="demo-sflow", daemon=True)
        self.thread.start()
        self.console.print(f"sFlow: agents {', '.join(a for a, _, _ in AGENTS)} send to sfcapd "
                           f"(port {target[1]}) for {SECONDS:.0f} s in the background")
        return self

    def wait(self, timeout: float = 300.0) -> None:
        """The sending done and the tap's health rows of it in the lake (it writes every
        [collector] sflow_flush_seconds)."""
        if self.thread is None:
            return
        self.thread.join(timeout)
        health = self.cfg.lake / "sflow_agent_health"
        deadline = time.monotonic() + float(self.cfg.collector.sflow_flush_seconds) + 60
        while time.monotonic() < deadline:
            if any(p.stat().st_mtime > self.started + SECONDS for p in health.glob("date=*/*.parquet")):
                break
            time.sleep(2)
        else:
            self.console.print("[yellow]sFlow: no agent health rows written after the sending (see "
                               "`flowlake status`, sflow-tap)")
        got = {a: f"{s['datagrams']:,} datagrams, {s['flow_samples']:,} flow samples, "
                  f"{s['discard_samples']:,} discarded packet samples, {s['counter_samples']:,} counter samples"
               for a, s in self.sent.items()}
        for agent, text in got.items():
            self.console.print(f"sFlow agent {agent}: {text}")
