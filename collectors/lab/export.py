"""Each run's traffic as real NetFlow into the running stack: softflowd on the client's
end of every path exports IPFIX with millisecond stamps (`-v 10 -A milli`; v9's stamps
are whole header seconds plus uptime offsets, up to ~1 s before the packets, which put a
run's first flows in the previous run's window) to a relay (relay.py) that carries it out of the namespace
to the stack's nfcapd from a loopback address unique to this lab. After each run its
flows are expired (softflowctl expire-all) and the run is registered: exporter address
+ time window -> run_id, which the ingest uses to tag the run's flows (collectors/lab/tag.py).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from flowlake.collectors.lab.tag import registry_path

from .netns import in_ns, sh

log = logging.getLogger("flowlake.lab")
FILLER_FRAMES = 300  # ~420 kB of non-IP frames: more than one capture-ring block here


def lab_address() -> str:
    """127.88.x.y from the pid: unique among the labs running on this host."""
    pid = os.getpid()
    return f"127.88.{(pid >> 8) & 255}.{pid & 255 or 1}"


def register(cfg, window: dict, end_ms: int) -> None:
    """A run's window (run_id, study, exporter, start) with its end, as a registry line."""
    path = registry_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps({**window, "end": end_ms}) + "\n")


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
        lab.adopt(relay)
        if "ready" not in relay.stdout.readline():
            raise RuntimeError(f"NetFlow relay did not start: {relay.stderr.read().strip()}")
        for path, (dev, _) in self.topo.devs.items():
            ctl = self.work / f"softflowd-{dev}.ctl"
            ctl.unlink(missing_ok=True)
            p = lab.spawn(self.topo.client, "softflowd", "-i", dev, "-n", f"127.0.0.1:{port}", "-v", 10, "-A", "milli", "-d",
                          "-c", ctl, "-p", self.work / f"softflowd-{dev}.pid", "-t", "maxlife=3600",
                          "-t", "expint=1")
            self.ctls.append(ctl)
            time.sleep(0.3)
            if p.poll() is not None:
                raise RuntimeError(f"softflowd on {dev} exited: {p.stderr.read().strip()}")

    def begin(self, run, t0: float) -> None:
        """Register the run open-ended before its first packet (its flows may ship early);
        the owner record keeps the open window, which a clean-up after a kill closes."""
        self.topo.lab.note(open_window={"run_id": run.run_id, "study": run.study, "exporter": self.address,
                                        "start": int(t0 * 1000)})
        self._write(run, t0, t0 + 86400)

    def register(self, run, t0: float, t1: float) -> None:
        """Expire the run's flows now (they leave with this run's window) and close its window."""
        self.flush()
        self._write(run, t0, t1)
        self.topo.lab.note(open_window=None)

    def _behind(self, ctl: Path) -> int:
        return softflowd_backlog(self.topo.client, ctl)

    def flush(self, limit_s: float = 20.0) -> None:
        """Wait until softflowd has read every captured packet (on a busy host it lags by
        seconds: a flow expired before then leaves its tail for a later export, or none if
        the lab stops), then expire every flow."""
        for ctl in self.ctls:
            deadline = time.time() + limit_s
            # Unread packets are the newest: once no more are unread than the filler frames
            # sent after the run, every packet of the run has been read.
            dev = ctl.name[len("softflowd-"):-len(".ctl")]
            filled = 0
            while (behind := self._behind(ctl)) > filled and time.time() < deadline:
                log.debug("softflowd %s: %d packets not read yet", ctl.name, behind)
                sh(*in_ns(self.topo.client, sys.executable, "-m", "flowlake.collectors.lab.endpoint", "filler",
                          dev, FILLER_FRAMES), check=False, timeout=20)
                filled += FILLER_FRAMES
                time.sleep(0.2)
            sh(*in_ns(self.topo.client, "softflowctl", "-c", ctl, "expire-all"), check=False, timeout=10)
        time.sleep(0.3)

    def interrupted(self, run, t0: float) -> None:
        """Close a killed attempt's window now: its flows (some may be in the lake already,
        tagged while the window was open) all carry that attempt's run_id, which no result
        row has; the rerun is another attempt with an id of its own (Run.run_id)."""
        self._write(run, t0, time.time())
        self.topo.lab.note(open_window=None)

    def void(self, run, t0: float) -> None:
        """An empty window (end before start): the interrupted attempt's flows match no run."""
        self._write(run, t0, t0 - 10)  # beyond the tagging slack

    def _write(self, run, t0: float, t1: float) -> None:
        register(self.cfg, {"run_id": run.run_id, "study": run.study, "exporter": self.address,
                            "start": int(t0 * 1000)}, int(t1 * 1000))

    def stop(self) -> None:
        self.flush(limit_s=5.0)
        time.sleep(0.5)  # the relay passes the last export on before it is stopped


def softflowd_backlog(ns: str, ctl: Path) -> int:
    """Packets the kernel captured that the softflowd behind control socket `ctl` (in
    namespace `ns`) has not read yet (0 if it cannot say)."""
    res = sh(*in_ns(ns, "softflowctl", "-c", ctl, "statistics"), check=False, timeout=10)
    stats = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition(":")
        first = value.split()[0] if value.split() else ""
        if first.isdigit():
            stats[key.strip()] = int(first)
    try:
        read = stats["Packets processed"] + stats["Ignored packets"]
        return max(0, stats["Packets received by libpcap"] - stats["Packets dropped by libpcap"] - read)
    except KeyError:
        return 0
