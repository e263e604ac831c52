"""What every detector takes and gives: an Interval of flows, Findings."""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass
class Interval:
    """The flows of one rotated nfcapd file. end_ms is the flows' own clock (the 99th
    percentile of their ends, so one router with a skewed clock does not move it); the
    interval starts where the previous one ended, so rates are per second of flow time."""
    source_file: str
    start_ms: int
    end_ms: int
    flows: pa.Table
    _scaled: dict = field(default_factory=dict, repr=False, compare=False)  # in_interval's columns, once each

    @property
    def seconds(self) -> float:
        return max(1.0, (self.end_ms - self.start_ms) / 1000.0)

    def in_interval(self, column: str) -> pa.Array:
        """A counter (bytes, packets) of each flow scaled to the share of the flow that fits
        in the interval: a 5-minute flow ending now adds a rotation's worth of its bytes,
        not all of them (rates would jump 30-fold at its end)."""
        import pyarrow.compute as pc  # noqa: PLC0415  (start-up: pyarrow)

        if column in self._scaled:  # several detectors scale bytes and packets: computed once an interval
            return self._scaled[column]
        f = self.flows
        dur = pc.divide(pc.cast(pc.subtract(pc.cast(f["time_end"], pa.int64()), pc.cast(f["time_start"], pa.int64())),
                                pa.float64()), 1000.0)
        share = pc.min_element_wise(pc.divide(self.seconds, pc.max_element_wise(dur, self.seconds)), 1.0)
        out = self._scaled[column] = pc.multiply(pc.cast(f[column], pa.float64()), share)
        return out


@dataclass
class Finding:
    """A detector's verdict on one subject in one interval: the condition holds."""
    detector: str
    subject: str
    summary: str
    value: float
    threshold: float
    details: dict = field(default_factory=dict)
    severity: str = ""


def severity(value: float, threshold: float, critical_factor: float) -> str:
    """critical when the measure is critical_factor times its threshold, else warning."""
    return "critical" if threshold > 0 and value >= critical_factor * threshold else "warning"


def si(v: float, unit: str = "") -> str:
    for e, p in ((12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if abs(v) >= 10 ** e:
            return f"{v / 10 ** e:.3g} {p}{unit}"
    return f"{v:.3g} {unit}".rstrip()


class Detector:
    """A detector: evaluate(Interval) -> [Finding]; state()/restore() for what it learnt."""
    name = ""

    def evaluate(self, iv: Interval) -> list[Finding]:
        raise NotImplementedError

    def state(self) -> dict:
        return {}

    def restore(self, state: dict) -> None:
        pass
