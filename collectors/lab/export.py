"""Each run's traffic as real NetFlow into the running stack: softflowd on the client's
end of every path exports v9 to a relay (relay.py) that carries it out of the namespace
to the stack's nfcapd from a loopback address unique to this lab. After each run its
flows are expired (softflowctl expire-all) and the run is registered: exporter address
+ time window -> run_id, which the ingest uses to tag the run's flows (pipelines/lab_tag.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from flowlake.pipelines.lab_tag import registry_path

from .netns import in_ns, sh


def lab_address() -> str:
    """127.88.x.y from the pid: unique among the labs running on this host."""
    pid = os.getpid()
    return f"127.88.{(pid >> 8) & 255}.{pid & 255 or 1}"


class FlowExport:
    def __init__(self, cfg, topo, work: Path):
        self.cfg, self.topo, self.work = cfg, topo, work
        self.address = lab_address()
        self.ctls: list[Path] = []

    def prune(self) -> int:
        """Drop registry entries older than [lab] registry_days (their flows are long ingested)."""
        path = registry_path(self.cfg)
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return 0
        cutoff = (time.time() - float(self.cfg.lab.registry_days) * 86400) * 1000
        keep = []
        for line in lines:
            try:
                if json.loads(line)["end"] >= cutoff:
                    keep.append(line)
            except (ValueError, KeyError, TypeError):
                continue
        if len(keep) < len(lines):
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text("".join(k + "\n" for k in keep))
            os.replace(tmp, path)  # the ingest reads it whole: never half-written
        return len(lines) - len(keep)

    def start(self) -> None:
        self.prune()
        lab = self.topo.lab
        port = 9995
        target = f"{self.cfg.collector.bind}:{self.cfg.collector.port}"
        # the relay enters the namespace itself, so it starts in the host's namespace
        relay = subprocess.Popen([sys.executable, "-m", "flowlake.collectors.lab.relay", "--netns", self.topo.client,
                                  "--port", str(port), "--to", target, "--source", self.address],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lab.procs.append(relay)
        if "ready" not in relay.stdout.readline():
            raise RuntimeError(f"NetFlow relay did not start: {relay.stderr.read().strip()}")
        for path, (dev, _) in self.topo.devs.items():
            ctl = self.work / f"softflowd-{dev}.ctl"
            ctl.unlink(missing_ok=True)
            p = lab.spawn(self.topo.client, "softflowd", "-i", dev, "-n", f"127.0.0.1:{port}", "-v", 9, "-d",
                          "-c", ctl, "-p", self.work / f"softflowd-{dev}.pid", "-t", "maxlife=3600",
                          "-t", "expint=1")
            self.ctls.append(ctl)
            time.sleep(0.3)
            if p.poll() is not None:
                raise RuntimeError(f"softflowd on {dev} exited: {p.stderr.read().strip()}")

    def begin(self, run, t0: float) -> None:
        """Register the run open-ended before its first packet (its flows may ship early)."""
        self._write(run, t0, t0 + 86400)

    def register(self, run, t0: float, t1: float) -> None:
        """Expire the run's flows now (they leave with this run's window) and close its window."""
        for ctl in self.ctls:
            sh(*in_ns(self.topo.client, "softflowctl", "-c", ctl, "expire-all"), check=False, timeout=10)
        time.sleep(0.3)
        self._write(run, t0, t1)

    def _write(self, run, t0: float, t1: float) -> None:
        path = registry_path(self.cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            fh.write(json.dumps({"run_id": run.run_id, "study": run.study, "exporter": self.address,
                                 "start": int(t0 * 1000), "end": int(t1 * 1000)}) + "\n")

    def stop(self) -> None:
        for ctl in self.ctls:
            sh(*in_ns(self.topo.client, "softflowctl", "-c", ctl, "expire-all"), check=False, timeout=10)
        time.sleep(0.5)
