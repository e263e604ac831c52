"""`flowlake compact`: close the lake's hours — compaction, then the rollups.

For every hour of `lake/flows` that holds files not yet compacted and is closed (its end
and its newest file are `[compaction] settle_minutes` old), `compact.compact_hour`
rewrites it and `rollups.update_hour` recomputes that hour's rows of the 1m/5m/1h
rollups. A late batch for a compacted hour makes it "not compacted" again, so the next
pass redoes both. The stack's compactor (`flowlake up`) runs a pass every
`[compaction] interval_seconds`; `flowlake status` shows what it did.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click

from flowlake.base import config as _config
from flowlake.base.component import Component
from flowlake.base.process import python_argv

from . import compact, lake_snapshot

log = logging.getLogger("flowlake.hour_close")
TABLE = "flows"


def _state_file(cfg) -> Path:
    return cfg.path("state", "compaction", f"{TABLE}.json")


def read_state(cfg) -> dict:
    try:
        return json.loads(_state_file(cfg).read_text())
    except (OSError, ValueError):
        return {"hours": {}, "runs": 0, "errors": 0}


def _write_state(cfg, state: dict) -> None:
    path = _state_file(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)


@contextmanager
def single_runner(cfg):
    """One pass at a time per home (the compactor and a manual `flowlake compact`)."""
    path = cfg.path("run", "compaction.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def vacuum(cfg, s, table_dir: Path) -> dict:
    """Files no table version younger than the grace needs go: hours replaced by a
    compaction (kept that long for readers of older versions) and files of batches or
    compactions that died before their commit. The grace in whole hours (delta-rs)."""
    if not (table_dir / "_delta_log").is_dir():
        return {"removed": 0}
    from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

    retain = math.ceil(s.retired_grace_s / 3600)
    return {"removed": len(delta.vacuum(table_dir, retain, full=True)), "retain_hours": retain}


def run(cfg=None, date: str | None = None, settle: bool = True, now: float | None = None,
        rollups: bool = True, force: bool = False) -> list[dict]:
    """One pass; returns a record per hour compacted. settle=False compacts hours that
    have ended without waiting for them to settle (`--date`, benchmarks, tests); force
    rewrites hours already compacted."""
    cfg = cfg or _config.get()
    s = compact.Settings.from_config(cfg)
    table_dir = cfg.lake / TABLE
    out = []
    with single_runner(cfg):
        state = read_state(cfg)
        # Bounded: replaced files past their grace, snapshots of (other tables') readers that died.
        now = time.time() if now is None else now
        state["vacuum"] = vacuum(cfg, s, table_dir)
        lake_snapshot.sweep(cfg.lake)
        for hour in compact.hours(table_dir, date):
            if not (force or hour.needs_compaction()):
                continue
            if now < hour.end or (settle and not hour.closed(now, s.settle_s)):
                continue
            key = f"{hour.date}/{hour.path.name}"
            try:
                res = compact.compact_hour(cfg, table_dir, hour, s, force=force)
                if res is None:
                    continue
                if rollups:
                    from . import rollups as rollups_mod  # noqa: PLC0415  (start-up: flowlake status)

                    res["rollup_rows"] = rollups_mod.update_hour(cfg, hour.date, hour.hour, hour.path)
            except Exception as exc:  # one bad hour must not stop the others
                log.error("hour %s: %s", key, str(exc)[:500])
                state["errors"] = state.get("errors", 0) + 1
                state["last_error"] = f"{key}: {exc}"
                continue
            log.info("hour %s: %d rows, %d files -> %d (%d carried), %.1f -> %.1f bytes/flow, %.1fs",
                     key, res["rows"], res["files_before"], res["files_after"], res["carried"],
                     res["bytes_before"] / max(1, res["rows"]), res["bytes_after"] / max(1, res["rows"]),
                     res["seconds"])
            state["hours"][key] = res
            out.append(res)
        # Bounded: forget hours that no longer exist (retention expired them).
        state["hours"] = {k: v for k, v in state["hours"].items()
                          if (table_dir / f"date={k[:10]}" / k[11:]).exists()}
        state["runs"] = state.get("runs", 0) + 1
        state["last_run"] = time.time()
        _write_state(cfg, state)
    return out


def status(cfg) -> dict:
    """For `flowlake status`: hours compacted and waiting, bytes per flow, last pass."""
    state = read_state(cfg)
    hours = state.get("hours", {})
    table_dir = cfg.lake / TABLE
    waiting = sum(1 for h in compact.hours(table_dir) if h.needs_compaction())
    rows = sum(h["rows"] for h in hours.values())
    size = sum(h["bytes_after"] for h in hours.values())
    roll = {}
    for res in ("1m", "5m", "1h", "1d"):
        dates = sorted(p.name[5:] for p in (cfg.lake / "rollups" / res).glob("date=*"))
        roll[res] = {"dates": len(dates), "first": dates[0] if dates else None, "last": dates[-1] if dates else None}
    return {"hours_compacted": len(hours), "hours_waiting": waiting, "rows": rows, "bytes": size, "rollups": roll,
            "bytes_per_flow": round(size / rows, 2) if rows else None,
            "last_run": state.get("last_run"), "runs": state.get("runs", 0),
            "errors": state.get("errors", 0), "last_error": state.get("last_error"),
            "vacuum": state.get("vacuum")}


@click.command("compact")
@click.option("--date", "day", default=None, metavar="YYYY-MM-DD",
              help="Only this UTC day; its ended hours are closed now, without waiting to settle.")
@click.option("--watch", is_flag=True, help="Run a pass every [compaction] interval_seconds until stopped (the stack's compactor).")
@click.option("--force", is_flag=True, help="Rewrite hours already compacted too (after changing [compaction] settings).")
@click.option("--no-rollups", is_flag=True, help="Compact only; leave the rollups as they are.")
def compact_cmd(day: str | None, watch: bool, force: bool, no_rollups: bool) -> None:
    """Close the lake's hours: compact each into a few large sorted Parquet files
    (swapped in atomically: readers never see a row twice or missing) and update the
    1m/5m/1h rollups under lake/rollups/.

    An hour is closed when its end and its newest file are [compaction] settle_minutes
    old; a batch arriving later for a compacted hour reopens it for the next pass.

    \b
    Examples:
      flowlake compact                     # every closed hour not yet compacted
      flowlake compact --date 2026-11-20   # that day now (e.g. after an import)
      flowlake status                      # hours compacted / waiting, bytes per flow
    """
    cfg = _config.get()
    if day is not None:
        try:
            dt.date.fromisoformat(day)
        except ValueError:
            raise click.BadParameter(f"{day!r} is not a date like 2026-11-20", param_hint="--date") from None
    try:
        compact.Settings.from_config(cfg)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    while True:
        results = run(cfg, date=day, settle=day is None and not force, rollups=not no_rollups, force=force)
        if results or not watch:
            rows = sum(r["rows"] for r in results)
            after = sum(r["bytes_after"] for r in results)
            click.echo(f"compacted {len(results)} hours, {rows:,} flows"
                       + (f", {after / rows:.1f} bytes/flow" if rows else ""), err=True)
        if not watch:
            return
        time.sleep(cfg.compaction.interval_seconds)


@dataclass(frozen=True)
class CompactorSettings:
    """[compaction] as the service uses it."""
    enabled: bool
    interval_seconds: int
    settle_minutes: int


class Compactor(Component):
    """Hour close (`flowlake compact --watch`): compaction and rollups as hours close."""
    name = "compactor"
    stop_timeout = 60.0
    pausable = True
    settings_type = CompactorSettings
    section = "compaction"

    def enabled(self) -> bool:
        return self.settings.enabled

    def start(self) -> int | None:
        if not self.enabled():
            return None
        proc = self.managed()
        if proc.running():
            return proc.pid()
        return proc.start(python_argv("compact", "--watch"))

    def status(self) -> dict:
        try:
            return status(self.cfg)
        except Exception as exc:  # status must never crash on a damaged state file
            return {"error": str(exc)}
