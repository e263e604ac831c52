"""One retention pass: plan every tier (what goes and why), then remove it.

`plan()` touches nothing but retention's own state file; `execute()` removes exactly the
plan's units, so `flowlake retention --dry-run` and `flowlake retention` list the same.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from flowlake.collectors import kafka_retention as topics

from .. import lake_tables
from . import disk, readers, spool, tiers, today_utc
from .tiers import Tier, Unit

log = logging.getLogger("flowlake.retention")


@dataclass
class Plan:
    tiers: list[Tier]
    usage: disk.Usage
    guard: list[Unit] = field(default_factory=list)     # chosen by the disk guard, beyond the keys
    kafka: dict = field(default_factory=dict)           # topic -> retention configs (set / was)
    kafka_error: str = ""

    @property
    def expire(self) -> list[Unit]:
        return [u for t in self.tiers for u in t.expire]

    def as_json(self) -> dict:
        return {"disk": self.usage.as_json(), "tiers": [t.summary() for t in self.tiers],
                "remove": [u.as_json() for u in self.expire], "guard": [u.as_json() for u in self.guard],
                "remove_bytes": sum(u.bytes for u in self.expire), "kafka": self.kafka,
                "kafka_error": self.kafka_error}


def guard_candidates(cfg, all_tiers: list[Tier], today: dt.date) -> list[Unit]:
    """Expendable beyond the keys, in the order they go: files of lake/flows a commit
    replaced (compaction, retention) waiting for VACUUM, spool files already in the lake (still in
    their grace), then raw flow days that have rollups, oldest first. Today's flows,
    unshipped files and anything without a second copy never appear here."""
    by = {t.name: t for t in all_tiers}
    out = readers.guard_candidates(all_tiers)
    out += sorted(spool.within_grace(by["spool"]), key=lambda u: (u.day or today, str(u.path)))
    rolled = tiers.rolled_up_days(cfg, today)
    flows = by["flows"]
    gone = {id(u) for u in flows.expire}
    out += [u for u in flows.units if id(u) not in gone and u.day in rolled and u.day < today]
    return out


def plan(cfg, today: dt.date | None = None, now: float | None = None, ledger: dict | None = None,
         kafka_apply: bool = False) -> Plan:
    today = today or today_utc()
    all_tiers = [spool.spool_tier(cfg, now, ledger), kafka_tier(cfg), *tiers.lake_tiers(cfg, today),
                 *readers.reader_tiers(cfg, now)]
    p = Plan(all_tiers, disk.usage(cfg))
    need = p.usage.over_high_water() - sum(u.bytes for u in p.expire)
    if need > 0:
        by = {t.name: t for t in all_tiers}
        for unit in guard_candidates(cfg, all_tiers, today):
            if need <= 0:
                break
            unit.why = f"disk above {p.usage.high_water_pct:g}% used: " + {
                "spool": "spool file already in the lake", readers.RETIRED: "replaced by a commit, waiting for VACUUM",
            }.get(unit.tier, "raw flows of a day kept as rollups")
            by[unit.tier].expire.append(unit)
            p.guard.append(unit)
            need -= unit.bytes
    try:
        p.kafka = topics.apply(cfg, dry_run=not kafka_apply) if spool.broker_up(cfg) else {}
    except Exception as exc:  # an unreachable broker must not stop the lake's retention
        p.kafka_error = str(exc)
    return p


def kafka_tier(cfg) -> Tier:
    t = Tier("kafka", topics.limit_text(cfg))
    t.units = [Unit("kafka", cfg.path("kafka", "data", topic), None, size)
               for topic, size in topics.local_bytes(cfg).items()]
    return t


def execute(cfg, p: Plan) -> dict:
    """Remove the plan's units; returns what went per tier and records the run."""
    lake = Path(cfg.lake)
    tiers.clear_trash(lake)
    gone: dict[str, dict] = {}
    delta_units = [u for u in p.expire if u.tier in ("flows", readers.RETIRED)
                   and (lake / "flows" / "_delta_log").is_dir()]
    if delta_units:  # DELETE of the expired days, then VACUUM (at once when the disk guard chose any)
        now = any(u in p.guard for u in delta_units)
        retain = 0 if now else math.ceil(readers.grace_s(cfg) / 3600)
        from flowlake.pipelines.hour_close import single_runner  # noqa: PLC0415  (start-up: click)

        try:
            with single_runner(cfg):  # one writer of the table's replaces and deletes: not beside a compaction
                tiers.remove_table_days([u for u in delta_units if u.tier == "flows"] or
                                        [Unit("flows", lake / "flows" / "date=none", None, 0)], lake, retain)
        except Exception as exc:  # noqa: BLE001  (a failed commit must not stop the other tiers)
            log.error("retention: lake/flows: %s", exc)
            delta_units = []
        for unit in delta_units:
            g = gone.setdefault(unit.tier, {"units": 0, "bytes": 0})
            g["units"] += 1
            g["bytes"] += unit.bytes
            log.info("retention: removed %s %s (%d bytes): %s", unit.tier, unit.path, unit.bytes, unit.why)
    # the other Delta tables (lake_writer.DELTA_STREAMS): their expired days by DELETE + VACUUM
    # (their writers only append: no compactor to serialise with)
    # (their writers only append: no compactor to serialise with); every pass VACUUMs each of
    # them: files of days deleted a grace ago go
    others = [u for u in p.expire if u not in delta_units and u.tier not in ("flows", readers.RETIRED)
              and u.day is not None and (u.path.parent / "_delta_log").is_dir()]
    for name in lake_tables.delta_tables(lake):
        table = lake / name
        if name == "flows":
            continue
        units = [u for u in others if u.path.parent == table]
        retain = 0 if any(u in p.guard for u in units) else math.ceil(readers.grace_s(cfg) / 3600)
        try:
            tiers.remove_table_days(units or [Unit(name, table / "date=none", None, 0)], lake, retain)
        except Exception as exc:  # noqa: BLE001  (a failed commit must not stop the other tiers; next pass retries)
            log.error("retention: %s: %s", table, exc)
            continue
        delta_units += units
        for unit in units:
            g = gone.setdefault(unit.tier, {"units": 0, "bytes": 0})
            g["units"] += 1
            g["bytes"] += unit.bytes
            log.info("retention: removed %s %s (%d bytes): %s", unit.tier, unit.path, unit.bytes, unit.why)
    for unit in readers.removable([u for u in p.expire if u not in delta_units], lake):
        try:
            tiers.remove(unit, lake)
        except OSError as exc:
            log.error("retention: cannot remove %s: %s", unit.path, exc)
            continue
        g = gone.setdefault(unit.tier, {"units": 0, "bytes": 0})
        g["units"] += 1
        g["bytes"] += unit.bytes
        log.info("retention: removed %s %s (%d bytes): %s", unit.tier, unit.path, unit.bytes, unit.why)
    record = {"at": time.time(), "removed": gone, "guard_units": len(p.guard),
              "disk_before": p.usage.as_json(), "disk_after": disk.usage(cfg).as_json()}
    path = cfg.path("state", "retention", "last.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError as exc:  # a full disk must not make a pass that freed space fail
        log.warning("retention: cannot record the run in %s: %s", path, exc)
    return record


def last_run(cfg) -> dict | None:
    try:
        return json.loads(cfg.path("state", "retention", "last.json").read_text())
    except (OSError, ValueError):
        return None
