"""The engine: every detector on each interval, findings into the lifecycle, and what
the detectors learnt (baselines, exporters last seen, talkers) saved under
$FLOWLAKE_HOME/state/alerts/detectors.json so a restart neither forgets nor re-learns."""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .base import Detector, Finding, Interval
from .blocklist import BlocklistDetector
from .fan_in import FanInDetector
from .lifecycle import Lifecycle
from .scans import ScanDetector
from .silent import SilentDetector
from .store import AlertStore
from .talkers import NewTalkerDetector
from .volume import ExporterVolumeDetector, InterfaceVolumeDetector

log = logging.getLogger(__name__)


def detectors_from_config(cfg) -> list[Detector]:
    out = [] if not cfg.alerts.enabled else [
        ScanDetector.from_config(cfg), FanInDetector.from_config(cfg), InterfaceVolumeDetector.from_config(cfg),
        ExporterVolumeDetector.from_config(cfg), SilentDetector.from_config(cfg),
        NewTalkerDetector.from_config(cfg), BlocklistDetector.from_config(cfg)]
    if cfg.ddos.enabled:  # issue 36: volumetric attacks, on the same decoded stream (ddos.py)
        from .ddos import DdosDetector  # noqa: PLC0415  (only with [ddos] enabled)

        out.append(DdosDetector.from_config(cfg))
    return out


def sinks_from_config(cfg) -> list:
    """The notifier of pipelines/alerts/notify.py when this install has it (issue 24's
    webhook and e-mail), else none: the engine only calls submit(alert) on each sink."""
    try:
        from .notify import build_notifier  # noqa: PLC0415  (optional: only where the notifier is installed)
    except ImportError:
        return []
    notifier = build_notifier(cfg)
    return [notifier] if notifier is not None else []


class Clock:
    """Interval bounds in the flows' own time: an interval ends at the 99th percentile of its
    flows' ends and starts where the previous one ended; an empty one lasts a rotation."""

    def __init__(self, rotate_seconds: float):
        self.rotate_ms = int(rotate_seconds * 1000)
        self.last_end: int | None = None

    def interval(self, source_file: str, flows: pa.Table) -> Interval:
        if flows.num_rows:
            ends = pc.cast(flows["time_end"], pa.int64()).to_numpy(zero_copy_only=False)
            end = int(np.percentile(ends, 99, method="higher"))
        else:
            end = (self.last_end or int(time.time() * 1000)) + self.rotate_ms
        start = self.last_end if self.last_end is not None and self.last_end < end else end - self.rotate_ms
        end = max(end, self.last_end or end)
        self.last_end = end
        return Interval(source_file, start, end, flows)


class Engine:
    def __init__(self, detectors: list[Detector], lifecycle: Lifecycle, clock: Clock, state_file: Path | None = None):
        self.detectors, self.lifecycle, self.clock, self.state_file = detectors, lifecycle, clock, state_file
        self.intervals = self.flows = 0
        self.findings = {d.name: 0 for d in detectors}
        self.errors = {d.name: 0 for d in detectors}
        self.last_interval: dict = {}
        self._saved_at = 0.0

    @classmethod
    def from_config(cls, cfg, sinks=None, detectors=None) -> "Engine":
        store = AlertStore.from_config(cfg)
        sinks = sinks_from_config(cfg) if sinks is None else sinks
        engine = cls(detectors or detectors_from_config(cfg), Lifecycle.from_config(cfg, store, sinks),
                     Clock(float(cfg.collector.rotate_seconds)), cfg.path("state", "alerts", "detectors.json"))
        engine.load()
        return engine

    def load(self) -> None:
        self.lifecycle.load()
        if self.state_file is None:
            return
        try:
            doc = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return
        self.clock.last_end = doc.get("clock")
        for d in self.detectors:
            d.restore(doc.get("detectors", {}).get(d.name, {}))

    def save(self, force: bool = True) -> None:
        """What the detectors learnt, at most once a minute unless forced (and at exit)."""
        if self.state_file is None or (not force and time.monotonic() - self._saved_at < 60):
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"clock": self.clock.last_end, "detectors": {d.name: d.state() for d in self.detectors}}))
        os.replace(tmp, self.state_file)
        self._saved_at = time.monotonic()

    def process(self, source_file: str, flows: pa.Table, now_ms: int | None = None) -> list[dict]:
        """One rotated interval (its flows, any wire format decoded) -> alerts changed."""
        return self.process_interval(self.clock.interval(source_file, flows), now_ms)

    def process_interval(self, iv: Interval, now_ms: int | None = None) -> list[dict]:
        findings: list[Finding] = []
        for d in self.detectors:
            try:
                got = d.evaluate(iv)
            except Exception:  # one broken detector must not silence the others
                self.errors[d.name] += 1
                log.exception("detector %s failed on %s", d.name, iv.source_file)
                continue
            self.findings[d.name] += len(got)
            findings += got
        changed = self.lifecycle.apply(iv.end_ms, findings, now_ms)
        self.intervals += 1
        self.flows += iv.flows.num_rows
        done = int(time.time() * 1000)
        self.last_interval = {"file": iv.source_file, "start_ms": iv.start_ms, "end_ms": iv.end_ms,
                              "flows": iv.flows.num_rows, "findings": len(findings), "processed_ms": done,
                              "latency_s": round((done - iv.end_ms) / 1000, 3)}
        self.save(force=False)
        # The interval's tables are gone: hand their memory back to the system, or the pool
        # keeps it (RSS grew by ~100 MB a minute at 200k flows/s; flat with this)
        pa.default_memory_pool().release_unused()
        return changed
