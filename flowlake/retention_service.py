"""The retention service `flowlake up` starts (`flowlake retention --serve`).

Every CHECK_SECONDS it reads the filesystem's usage (one statvfs): below the floor it
pauses the shipper and the ingest, with space back it starts them again. A full retention
pass runs at start, every PASS_SECONDS, and at most every GUARD_PASS_SECONDS while the
disk stays above the high-water mark.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import time
from dataclasses import dataclass

from flowlake import components
from flowlake.base.component import Component
from flowlake.base.process import python_argv, wait_until
from flowlake.pipelines.retention import disk, report, run

log = logging.getLogger("flowlake.retention")
CHECK_SECONDS = 2.0
PASS_SECONDS = 600.0
GUARD_PASS_SECONDS = 30.0


def heartbeat_file(cfg):
    return cfg.path("state", "retention", "daemon.json")


def pause(cfg, u: disk.Usage) -> None:
    managed = {name: components.get(cfg, name).managed() for name in disk.PAUSABLE}
    running = [name for name in disk.PAUSABLE if managed[name].running()]
    prior = disk.paused(cfg)
    if prior:
        running = sorted(set(running) | set(prior.get("components", [])), key=disk.PAUSABLE.index)
    disk.mark_paused(cfg, running, u.alarm() or "below the floor")
    log.warning("%s: pausing %s", u.alarm(), ", ".join(running) or "nothing (already stopped)")
    for name in disk.PAUSABLE:
        if name in running:
            managed[name].stop(timeout=90)


def resume(cfg, u: disk.Usage) -> None:
    state = disk.paused(cfg) or {}
    names = [n for n in reversed(disk.PAUSABLE) if n in state.get("components", [])]
    log.warning("disk %s: %.1f%% free again: resuming %s", u.path, u.free_pct, ", ".join(names) or "nothing")
    for name in names:
        components.get(cfg, name).start()
    disk.clear_pause(cfg)


def one_pass(cfg) -> None:
    try:
        p = run.plan(cfg, kafka_apply=True)
        if p.expire:
            run.execute(cfg, p)
    except Exception:  # one bad pass must not end the service
        log.exception("retention pass failed")
    merge_sflow_days(cfg)


def merge_sflow_days(cfg) -> None:
    """The sFlow tap's files merged per day (sflow_agent_health; interface_counters where
    no SNMP poller runs to merge them: an sFlow-only site)."""
    from flowlake.collectors import sfcapd  # noqa: PLC0415  (start-up: only the pass needs it)

    try:
        merged = sfcapd.compact_old_days(cfg, counters=not components.get(cfg, "snmp").enabled())
        for table, days in merged.items():
            for day in days:
                log.info("merged the files of %s, %s", table, day)
    except Exception:  # one bad merge must not end the service
        log.exception("merging the sFlow tap's daily files failed")


def serve(cfg) -> None:
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    beat = heartbeat_file(cfg)
    beat.parent.mkdir(parents=True, exist_ok=True)
    beat.write_text(json.dumps({"pid": os.getpid(), "started": time.time()}))
    log.info("retention service: check every %.0fs, pass every %.0fs", CHECK_SECONDS, PASS_SECONDS)
    next_pass = 0.0
    while not stopping:
        u = disk.usage(cfg)
        now = time.monotonic()
        if u.over_high_water() > 0 and next_pass - now > GUARD_PASS_SECONDS:
            next_pass = now  # above the mark: free space now, not at the next scheduled pass
        if now >= next_pass:
            one_pass(cfg)
            u = disk.usage(cfg)
            next_pass = time.monotonic() + (GUARD_PASS_SECONDS if u.level != "ok" else PASS_SECONDS)
        try:
            if u.level == "floor" and not _paused_all(cfg):
                pause(cfg, u)
            elif disk.paused(cfg) and disk.can_resume(u):
                resume(cfg, u)
        except Exception:
            log.exception("disk guard failed")
        time.sleep(CHECK_SECONDS)
    log.info("retention service stopping")


def _paused_all(cfg) -> bool:
    """Paused, and nothing pausable has been started since (e.g. by hand)."""
    if not disk.paused(cfg):
        return False
    return not any(components.get(cfg, name).managed().running() for name in ("shipper", "ingest"))


@dataclass(frozen=True)
class RetentionSettings:
    """[retention] bounds the service enforces (the tiers read the rest)."""
    flows_days: int
    spool_grace_hours: int
    disk_high_water_pct: int
    disk_floor_pct: int


class Retention(Component):
    """The retention service: scheduled passes and the disk guard (pipelines/retention/)."""
    name = "retention"
    settings_type = RetentionSettings
    section = "retention"

    def start(self) -> int:
        proc = self.managed()
        if proc.running():
            return proc.pid()
        heartbeat_file(self.cfg).unlink(missing_ok=True)
        pid = proc.start(python_argv("retention", "--serve"))
        wait_until(heartbeat_file(self.cfg).exists, 60, "the retention service to start", interval=0.5, proc=proc)
        return pid

    def status(self) -> dict:
        return report.status_summary(self.cfg)
