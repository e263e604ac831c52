"""One run of the grid on a built topology: start the server side, run the client,
read both ends, compute the figures. Paced, probe and split runs use our endpoint
(endpoint.py); bulk TCP/UDP runs use iperf3 -J, bulk MPTCP our endpoint's bulk mode
(iperf3 3.12 has no --mptcp)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from flowlake.base import faultpoints as faults

from . import metrics
from .endpoint import unsupported
from .metrics import split
from .spec import Run, Spec
from .topology import Topology

PORT = 7000        # inside the lab's own namespaces: no other process can hold it
IPERF_PORT = 5201


class Skip(Exception):
    """The run cannot happen on this machine (the reason says why); it is not a failure."""


def _endpoint(*args) -> list[str]:
    return [sys.executable, "-m", "flowlake.collectors.lab.endpoint", *map(str, args)]


class Runner:
    def __init__(self, spec: Spec, topo: Topology, work: Path, mss: int = 1460, zero_loss_rule: str = "upper_bound"):
        self.spec, self.topo, self.work = spec, topo, work
        self.mss, self.zero_loss_rule = mss, zero_loss_rule
        self.flapper = None  # the condition's Flapper during a run under a flapping link
        self.models: dict[str, tuple[float, float]] = {}   # path -> (a ms/byte, l ms), from probe runs

    def run(self, run: Run) -> dict:
        """-> {"metrics": {...}, "probes": [...] (probe runs), "flaps": [...]}"""
        p = run.params
        reason = unsupported(p["protocol"])
        if reason:
            raise Skip(reason)
        if p["congestion_control"]:
            avail = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
            if p["congestion_control"] not in avail:
                raise Skip(f"congestion control {p['congestion_control']} is not offered by this kernel "
                           f"(available: {' '.join(avail)})")
        folder = self.work / run.run_id
        folder.mkdir(parents=True, exist_ok=True)
        with self.topo.condition(run.condition) as flapper:
            self.flapper = flapper
            if flapper is not None and run.kind != "paced":
                flapper.begin()  # a paced run begins the flapping once its stream is sending
            try:
                out = getattr(self, f"_{run.kind}")(run, folder)
            finally:
                self.flapper = None
        self.topo.check_delay()
        if flapper is not None:
            out["flaps"] = [b - a for a, b in flapper.downs]
            out["flap_windows"] = [list(w) for w in flapper.windows]
        return out

    # -- servers ---------------------------------------------------------------------------
    def _server(self, proto: str, out: Path) -> subprocess.Popen:
        srv = self.topo.lab.spawn(self.topo.server, *_endpoint("server", "--proto", proto, "--bind", "0.0.0.0",
                                                               "--port", PORT, "--out", out), stdout=subprocess.PIPE)
        line = srv.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"endpoint server ({proto}) did not start: {srv.stderr.read().strip()}")
        faults.point("lab.server_up")  # tests: a kill mid-run, with servers and clients about
        return srv

    def _finish(self, srv: subprocess.Popen, out: Path) -> dict:
        time.sleep(0.3)  # the last frames in flight
        self.topo.lab.stop(srv)
        return json.loads(out.read_text())

    def _client(self, *args, timeout: float) -> None:
        cmd = ["ip", "netns", "exec", self.topo.client, *_endpoint(*args)]
        if self.flapper is not None and args[0] == "paced":
            # the stream's start is the flapper's clock: the client says "sending" first
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                proc.stdout.readline()
                self.flapper.begin()
                _, err = proc.communicate(timeout=timeout)
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            if proc.returncode != 0:
                raise RuntimeError(f"endpoint {args[0]} failed: {err.strip()[-400:]}")
            return
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise RuntimeError(f"endpoint {args[0]} failed: {res.stderr.strip()[-400:]}")

    # -- kinds -------------------------------------------------------------------------------
    def _paced(self, run: Run, folder: Path) -> dict:
        p = run.params
        srv = self._server(p["protocol"], folder / "server.json")
        try:
            self._client("paced", "--proto", p["protocol"], "--cc", p["congestion_control"], "--to",
                         self.topo.server_addr(p["path"]), "--port", PORT, "--rate", p["rate"], "--frame-size",
                         p["frame_size"], "--duration", self.spec.duration_s, "--out", folder / "client.json",
                         timeout=self.spec.duration_s * 3 + 30)
        finally:
            server = self._finish(srv, folder / "server.json")
        client = json.loads((folder / "client.json").read_text())
        deadline = self.spec.deadline_ms or 1000.0 / p["rate"]
        return {"metrics": {**metrics.paced(client, server, deadline),
                            "bytes_sent": float(len(client["sent"]) * max(p["frame_size"], 25))}}

    def _bulk(self, run: Run, folder: Path) -> dict:
        p = run.params
        if p["protocol"] in ("mptcp", "sctp"):
            return self._own_bulk(run, folder)
        srv = self.topo.lab.spawn(self.topo.server, "iperf3", "-s", "-1", "-p", IPERF_PORT)
        time.sleep(0.4)
        cmd = ["iperf3", "-c", self.topo.server_addr(p["path"]), "-p", IPERF_PORT, "-t",
               max(1, int(round(self.spec.duration_s))), "-J"]
        if p["protocol"] == "udp":
            cmd += ["-u", "-b", int(p["rate"] or 10e6)]
        else:
            cmd += ["-C", p["congestion_control"]]
        if p["streams"]:
            cmd += ["-P", p["streams"]]
        if p["window"]:
            cmd += ["-w", p["window"]]
        if p["frame_size"]:
            cmd += ["-l", p["frame_size"]]
        drops = self.topo.queue_drops(p["path"]), self.topo.receiver_drops()
        recoveries = self.topo.tcp_recoveries()
        res = subprocess.run(["ip", "netns", "exec", self.topo.client, *map(str, cmd)], capture_output=True,
                             text=True, timeout=self.spec.duration_s * 3 + 30)
        drops = self.topo.queue_drops(p["path"]) - drops[0], self.topo.receiver_drops() - drops[1]
        recoveries = self.topo.tcp_recoveries() - recoveries
        self.topo.lab.stop(srv)
        (folder / "iperf3.json").write_text(res.stdout)
        try:
            doc = json.loads(res.stdout)
        except ValueError:
            raise RuntimeError(f"iperf3 printed no JSON: {res.stderr.strip()[-300:]}") from None
        # loss = the configured drop + the bottleneck queue's drops (a sender stalled by a busy
        # host catches up in a burst) + the receiver's (a stalled iperf3 server's full buffer)
        # loss_events (TCP): the sender's fast recoveries, the congestion signals Mathis' p counts
        # (`loss` counts retransmitted segments); not a published metric
        extra = {"loss_events": float(recoveries)} if p["protocol"] == "tcp" else {}
        return {"metrics": {**metrics.iperf3(doc, self.mss, self.zero_loss_rule), "queue_drops": float(drops[0]),
                            "receiver_drops": float(drops[1]), **extra}}

    def _own_bulk(self, run: Run, folder: Path) -> dict:
        p = run.params
        srv = self._server(p["protocol"], folder / "server.json")
        try:
            self._client("bulk", "--proto", p["protocol"], "--cc", p["congestion_control"], "--to",
                         self.topo.server_addr(p["path"]), "--port", PORT, "--duration", self.spec.duration_s,
                         "--out", folder / "client.json", timeout=self.spec.duration_s * 3 + 30)
        finally:
            server = self._finish(srv, folder / "server.json")
        span = (server["last"] or 0) - (server["first"] or 0)
        client = json.loads((folder / "client.json").read_text())
        return {"metrics": {"throughput": server["bytes"] * 8 / span if span > 0 else 0.0,
                            "bytes_sent": float(client["bytes"])}}

    def _probe(self, run: Run, folder: Path) -> dict:
        p = run.params
        srv = self._server(p["protocol"], folder / "server.json")
        try:
            self._client("probe", "--proto", p["protocol"], "--cc", p["congestion_control"], "--to",
                         self.topo.server_addr(p["path"]), "--port", PORT, "--sizes", p["message_size"],
                         "--count", self.spec.probe_count, "--out", folder / "client.json",
                         timeout=self.spec.probe_count * 30 + 30)
        finally:
            self._finish(srv, folder / "server.json")
        lat = [ms for _, ms in json.loads((folder / "client.json").read_text())["probes"]]
        return {"metrics": {"latency": metrics.quantile(lat, 0.5), "latency_p50": metrics.quantile(lat, 0.5),
                            "latency_p99": metrics.quantile(lat, 0.99)},
                "probes": lat}

    def _split(self, run: Run, folder: Path) -> dict:
        """tcp: the message split over both paths in proportion to the paths' models (fitted
        from this study's probe runs); mptcp: one MPTCP connection, subflows on both paths."""
        p = run.params
        size = int(p["message_size"])
        names = list(self.spec.paths)
        srv = self._server(p["protocol"], folder / "server.json")
        predicted = None
        try:
            if p["protocol"] == "mptcp":
                parts = [f"{self.topo.server_addr(names[0])}:{size}"]
            else:
                missing = [n for n in names if n not in self.models]
                if missing:
                    raise Skip(f"no delay model for path {', '.join(missing)}: the spec needs probe runs "
                               "over both paths (two message sizes or more) before split runs")
                (aa, la), (ab, lb) = self.models[names[0]], self.models[names[1]]
                xa, xb, predicted = split(aa, la, ab, lb, float(size))
                parts = [f"{self.topo.server_addr(names[0])}:{int(round(xa))}",
                         f"{self.topo.server_addr(names[1])}:{size - int(round(xa))}"]
            self._client("split", "--proto", p["protocol"], "--cc", p["congestion_control"], "--port", PORT,
                         "--parts", *parts, "--count", self.spec.probe_count, "--out", folder / "client.json",
                         timeout=self.spec.probe_count * 30 + 30)
        finally:
            self._finish(srv, folder / "server.json")
        lat = json.loads((folder / "client.json").read_text())["latencies_ms"]
        return {"metrics": {"latency": metrics.quantile(lat, 0.5), "latency_p50": metrics.quantile(lat, 0.5),
                            "latency_p99": metrics.quantile(lat, 0.99), "predicted_latency": predicted}}
