"""The security rules shared by the daily jobs (scanners, fan_in, new_talkers, on Spark)
and the live detectors (pipelines/alerts/, on each rotated interval): one definition of
what a scan, a fan-in and a new talker are, whatever engine counts the flows."""
from __future__ import annotations

from dataclasses import dataclass

MAD_TO_SIGMA = 1.4826     # MAD of a normal distribution * 1.4826 = sigma
MEANAD_TO_SIGMA = 1.2533  # mean absolute deviation * sqrt(pi/2) = sigma (when MAD is 0)


@dataclass(frozen=True)
class ScanRule:
    """[security] scan_*: a probe is a flow of at most small_packets packets as the router
    counted them (the lake's packets / sampling_rate: a sampled router's 1-packet record
    is a probe, not the 1000 packets it stands for); a source scans
    when its probes reach min_destinations hosts (horizontal) or min_ports ports of one host
    (vertical) and at least min_small_share of its flows are probes."""
    small_packets: int = 3
    min_destinations: int = 20
    min_ports: int = 20
    min_small_share: float = 0.8

    @classmethod
    def from_config(cls, cfg) -> ScanRule:
        s = cfg.security
        return cls(int(s.scan_small_packets), int(s.scan_min_destinations), int(s.scan_min_ports),
                   float(s.scan_min_small_share))

    def kind(self, destinations: int, max_ports_per_destination: int, small_share: float) -> str | None:
        """horizontal, vertical, both, or None (not a scan)."""
        if small_share < self.min_small_share:
            return None
        h, v = destinations >= self.min_destinations, max_ports_per_destination >= self.min_ports
        return "both" if h and v else "horizontal" if h else "vertical" if v else None


@dataclass(frozen=True)
class FanInRule:
    """[security] fan_in_*: a destination whose distinct-source count is at least min_sources
    and whose robust z-score against all destinations' counts is at least min_z."""
    min_sources: int = 10
    min_z: float = 3.5

    @classmethod
    def from_config(cls, cfg) -> FanInRule:
        return cls(int(cfg.security.fan_in_min_sources), float(cfg.security.fan_in_min_z))


def robust_scale(mad: float, meanad: float) -> float:
    """Median and MAD instead of mean and standard deviation: one huge fan-in (the thing we
    look for) would otherwise inflate the spread and hide itself. MAD 0: mean abs deviation."""
    return MAD_TO_SIGMA * mad if mad > 0 else MEANAD_TO_SIGMA * meanad
