"""The lake's reader scratch space as retention tiers: lake/.retired and lake/.snapshots.

  retired    hour folders the compactor swapped out (pipelines/compact.py), kept
             [compaction] retired_grace_minutes after the swap: a reader that opened the
             hour just before it links its files from there (pipelines/lake_snapshot.py).
             Expired after the grace. The disk guard takes them first, at any age: once
             every pin in progress has finished (lake_snapshot.pins_settled) no reader can
             reach a retired folder, so nothing anyone reads goes with them.
  snapshots  lake/.snapshots/<pid>-<id>: a reader's hard links, removed by the reader when it
             closes. Those of processes that died are expired; a live reader's never.
Sizes count what removing frees: files linked nowhere else (a file carried over into the
compacted hour, or pinned by a live snapshot, costs nothing more here).
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import time
from pathlib import Path

from flowlake.pipelines import compact, lake_snapshot

from .tiers import Tier, Unit

log = logging.getLogger("flowlake.retention")
RETIRED, SNAPSHOTS = "retired", "snapshots"
PIN_WAIT_S = 10.0  # how long a pass waits for pins in progress before leaving retired folders be


def freed_bytes(path: Path) -> int:
    """Bytes removing `path` frees: files with no other link (du of those), plus folders."""
    total = 0
    for base, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(base, name))
            except OSError:
                continue
            if name in dirs or st.st_nlink == 1:
                total += st.st_blocks * 512
    return total


def _day(ts: float) -> dt.date:
    return dt.datetime.fromtimestamp(ts, dt.UTC).date()


def grace_s(cfg) -> float:
    minutes = float(cfg.compaction.retired_grace_minutes)
    if minutes < 0:
        raise ValueError("config [compaction] retired_grace_minutes must be >= 0")
    return minutes * 60.0


def reader_tiers(cfg, now: float | None = None) -> list[Tier]:
    """The two tiers with what expires now (nothing is touched)."""
    now = time.time() if now is None else now
    lake, grace = Path(cfg.lake), grace_s(cfg)
    retired = Tier(RETIRED, f"{grace / 60:g} min after the swap",
                   note="hours swapped out by compaction; the disk guard takes them first")
    for path, at in compact.retired_folders(lake):
        u = Unit(RETIRED, path, _day(at), freed_bytes(path))
        retired.units.append(u)
        if now - at >= grace:
            u.why = f"swapped out more than {grace / 60:g} min ago"
            retired.expire.append(u)
    snaps = Tier(SNAPSHOTS, "while the reader runs")
    for path, alive in lake_snapshot.snapshots(lake):
        try:
            day = _day(path.stat().st_mtime)
        except OSError:
            continue
        u = Unit(SNAPSHOTS, path, day, freed_bytes(path))
        snaps.units.append(u)
        if not alive:
            u.why = "its reader's process has exited"
            snaps.expire.append(u)
    return [retired, snaps]


def guard_candidates(all_tiers: list[Tier]) -> list[Unit]:
    """Retired folders still in their grace, oldest first: what the disk guard frees first."""
    for t in all_tiers:
        if t.name == RETIRED:
            gone = {id(u) for u in t.expire}
            return [u for u in t.units if id(u) not in gone]
    return []


def removable(units: list[Unit], lake: Path) -> list[Unit]:
    """The units that may go now: retired folders only once no pin in progress can reach
    them (they stay for the next pass otherwise)."""
    if any(u.tier == RETIRED for u in units) and not lake_snapshot.pins_settled(lake, PIN_WAIT_S):
        log.warning("retention: readers kept pinning for %g s; retired folders stay until the next pass", PIN_WAIT_S)
        return [u for u in units if u.tier != RETIRED]
    return units
