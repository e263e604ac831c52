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
import math
import os
from pathlib import Path

from flowlake.pipelines import lake_snapshot

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
    """Replaced files of the Delta tables waiting for VACUUM (lake/flows: hours a
    compaction replaced, days a DELETE removed), and readers' pins; what expires now
    (nothing is touched). The replaced files go at the compactor's VACUUM after the
    grace; the disk guard takes them first."""
    lake, grace = Path(cfg.lake), grace_s(cfg)
    replaced = Tier(RETIRED, f"{grace / 60:g} min after a commit replaced them",
                    note="files compaction and retention replaced; the disk guard takes them first")
    table = lake / "flows"
    if (table / "_delta_log").is_dir():
        from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

        def size(files) -> int:
            total = 0
            for f in files:
                try:
                    total += os.stat(f if os.path.isabs(f) else table / f).st_size
                except OSError:
                    continue
            return total

        def present(files) -> set:  # the log keeps listing removed files a VACUUM already deleted
            return {f for f in files if os.path.exists(f if os.path.isabs(f) else table / f)}

        waiting = present(delta.vacuum(table, 0, dry_run=True))
        past = present(delta.vacuum(table, math.ceil(grace / 3600), dry_run=True))
        if past:  # replaced longer ago than the grace: the pass vacuums them
            u = Unit(RETIRED, table, None, size(past), f"replaced more than {math.ceil(grace / 3600)} h ago")
            replaced.units.append(u)
            replaced.expire.append(u)
        if waiting - past:  # still in the grace: the disk guard's first candidates
            replaced.units.append(Unit(RETIRED, table, None, size(waiting - past)))
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
    return [replaced, snaps]


def guard_candidates(all_tiers: list[Tier]) -> list[Unit]:
    """Retired folders still in their grace, oldest first: what the disk guard frees first."""
    for t in all_tiers:
        if t.name == RETIRED:
            gone = {id(u) for u in t.expire}
            return [u for u in t.units if id(u) not in gone]
    return []


def removable(units: list[Unit], lake: Path) -> list[Unit]:
    """The units that may go now (all of them: a Delta table's older versions stay readable
    until their files are vacuumed, and only the disk guard vacuums at once)."""
    return units
