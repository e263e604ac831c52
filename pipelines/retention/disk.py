"""The disk guard: how full the home's filesystem is, and the pause below the floor.

  used > disk_high_water_pct   status alarms; retention removes the oldest expendable data
                               (expired first, then spool files already in the lake still in
                               their grace, then the oldest raw flow days that have rollups)
                               until used is back under the mark. Unshipped files never go.
  free < disk_floor_pct        the shipper and the ingest are stopped (jobs refuse to start);
                               nfcapd keeps receiving into the spool, so nothing is lost and
                               no half-written Parquet or Kafka segment can come of a full disk.
  free >= floor + RESUME_MARGIN  they start again, in `flowlake up` order.
The pause is recorded in state/retention/paused.json so status and `up` know of it.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

RESUME_MARGIN_PCT = 1.0   # hysteresis: resume only this far above the floor
PAUSABLE = ("compactor", "shipper", "ingest")  # in stop order; started again in reverse
# (the compactor rewrites whole hours: it needs room it must not take below the floor)


@dataclass
class Usage:
    path: str
    total: int
    used: int
    avail: int
    high_water_pct: float
    floor_pct: float

    @property
    def used_pct(self) -> float:  # as df computes it: reserved blocks do not count as free
        return 100.0 * self.used / max(1, self.used + self.avail)

    @property
    def free_pct(self) -> float:
        return 100.0 - self.used_pct

    @property
    def level(self) -> str:
        if self.free_pct < self.floor_pct:
            return "floor"
        if self.used_pct > self.high_water_pct:
            return "high"
        return "ok"

    def over_high_water(self) -> int:
        """Bytes to free to get back under the high-water mark."""
        limit = self.high_water_pct / 100.0 * (self.used + self.avail)
        return max(0, int(self.used - limit))

    def as_json(self) -> dict:
        d = asdict(self)
        d.update(used_pct=round(self.used_pct, 2), free_pct=round(self.free_pct, 2), level=self.level,
                 over_high_water_bytes=self.over_high_water())
        return d

    def alarm(self) -> str | None:
        if self.level == "floor":
            return (f"disk {self.path}: only {self.free_pct:.1f}% free, below retention.disk_floor_pct="
                    f"{self.floor_pct:g}: shipper, ingest and jobs paused, nfcapd keeps spooling")
        if self.level == "high":
            return (f"disk {self.path}: {self.used_pct:.1f}% used, above retention.disk_high_water_pct="
                    f"{self.high_water_pct:g}: retention removes the oldest expendable data")
        return None


def usage(cfg) -> Usage:
    path = Path(cfg.home_dir)
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    r = cfg.retention
    return Usage(str(cfg.home_dir), st.f_blocks * st.f_frsize, (st.f_blocks - st.f_bfree) * st.f_frsize,
                 st.f_bavail * st.f_frsize, float(r.disk_high_water_pct), float(r.disk_floor_pct))


def pause_file(cfg) -> Path:
    return cfg.path("state", "retention", "paused.json")


def paused(cfg) -> dict | None:
    """The pause in force ({"since", "components", "reason"}) or None."""
    try:
        return json.loads(pause_file(cfg).read_text())
    except (OSError, ValueError):
        return None


def can_resume(u: Usage) -> bool:
    return u.free_pct >= u.floor_pct + RESUME_MARGIN_PCT


def mark_paused(cfg, components: list[str], reason: str) -> None:
    path = pause_file(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Tiny and written in place: a full disk must not stop us from recording the pause.
    path.write_text(json.dumps({"since": time.time(), "components": components, "reason": reason}))


def clear_pause(cfg) -> None:
    pause_file(cfg).unlink(missing_ok=True)


def refuse_below_floor(cfg, what: str) -> None:
    """For work that writes a lot (jobs): refuse to start while free space is below the floor."""
    import click  # noqa: PLC0415  (start-up: click)

    u = usage(cfg)
    if u.level == "floor":
        raise click.ClickException(f"{what} not started: {u.alarm()}. Free space on {u.path} "
                                   "(or let retention do it) and run it again.")
