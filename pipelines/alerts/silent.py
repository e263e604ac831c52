"""An exporter gone silent: no flow from a router that exported before, for [alerts]
silent_after_seconds of flow time (the intervals keep coming while nfcapd rotates, so
silence is seen even when nothing at all arrives). Exporters silent for [health]
forget_after_seconds are forgotten, as the health view forgets them."""
from __future__ import annotations

import pyarrow.compute as pc

from .base import Detector, Finding, Interval, severity


class SilentDetector(Detector):
    name = "exporter_silent"

    def __init__(self, silent_after_seconds: float, forget_after_seconds: float, critical_factor: float = 4.0):
        self.after_ms, self.forget_ms = silent_after_seconds * 1000, forget_after_seconds * 1000
        self.critical_factor = critical_factor
        self.last_seen: dict[str, int] = {}

    @classmethod
    def from_config(cls, cfg) -> "SilentDetector":
        return cls(float(cfg.alerts.silent_after_seconds), float(cfg.health.forget_after_seconds),
                   float(cfg.alerts.critical_factor))

    def evaluate(self, iv: Interval) -> list[Finding]:
        f = iv.flows
        if f.num_rows:
            last = f.group_by("exporter").aggregate([("time_end", "max")])
            ends = pc.cast(last["time_end_max"], "int64").to_pylist()
            for exporter, end in zip(last["exporter"].to_pylist(), ends):
                self.last_seen[exporter] = max(self.last_seen.get(exporter, 0), min(end, iv.end_ms))
        out = []
        for exporter, seen in list(self.last_seen.items()):
            gap = iv.end_ms - seen
            if gap >= self.forget_ms:
                del self.last_seen[exporter]
            elif gap >= self.after_ms:
                s = gap / 1000
                out.append(Finding(self.name, exporter, f"exporter {exporter} silent: no flow for {s:.0f} s "
                                   f"(threshold {self.after_ms / 1000:g} s)", s, self.after_ms / 1000,
                                   {"last_flow_end_ms": seen, "silent_seconds": s},
                                   severity(s, self.after_ms / 1000, self.critical_factor)))
        return out

    def state(self) -> dict:
        return {"last_seen": self.last_seen}

    def restore(self, state: dict) -> None:
        self.last_seen = {k: int(v) for k, v in (state.get("last_seen") or {}).items()}
