"""The lake's tiers as folders of dated units, and which units their keys expire.

A unit is what retention removes in one step: a `date=D` partition folder (flows,
rollups, reports, bad Parquet in quarantine) or one file whose day comes from its name
(an nfcapd file in quarantine) or, for undecodable messages that carry no trustworthy
flow time, from when they were quarantined.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from flowlake.base.disk import disk_bytes  # noqa: F401  (re-exported: tiers.disk_bytes)

from . import as_date, is_expired

DATE_DIR = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
NFCAPD_STAMP = re.compile(r"^nfcapd\.(\d{8})(\d{4,6})?")
ROLLUPS = ("1m", "5m", "1h")


@dataclass
class Unit:
    tier: str
    path: Path
    day: dt.date | None
    bytes: int
    why: str = ""

    def as_json(self) -> dict:
        d = asdict(self)
        d["path"], d["day"] = str(self.path), self.day.isoformat() if self.day else None
        return d


@dataclass
class Tier:
    name: str
    limit: str                      # the rule, as an operator reads it
    units: list[Unit] = field(default_factory=list)
    expire: list[Unit] = field(default_factory=list)
    note: str = ""

    @property
    def bytes(self) -> int:
        return sum(u.bytes for u in self.units)

    @property
    def oldest(self) -> dt.date | None:
        days = [u.day for u in self.units if u.day]
        return min(days) if days else None

    def summary(self) -> dict:
        return {"tier": self.name, "limit": self.limit, "units": len(self.units), "bytes": self.bytes,
                "oldest": self.oldest.isoformat() if self.oldest else None,
                "expire_units": len(self.expire), "expire_bytes": sum(u.bytes for u in self.expire),
                "note": self.note}




def dated_units(tier: str, root: Path) -> list[Unit]:
    """Every date=D folder directly below root, oldest first."""
    out = []
    if root.is_dir():
        for entry in os.scandir(root):
            m = DATE_DIR.match(entry.name)
            if m and entry.is_dir():
                out.append(Unit(tier, Path(entry.path), dt.date.fromisoformat(m[1]), disk_bytes(Path(entry.path))))
    return sorted(out, key=lambda u: u.day)


def table_units(tier: str, table: Path) -> list[Unit]:
    """A Delta table's days in its newest version, oldest first: a unit's bytes are its
    files' (what a DELETE and the VACUUM after it free). A folder that is no Delta table
    (none written yet) has none."""
    if not (table / "_delta_log").is_dir():
        return dated_units(tier, table)
    from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

    by: dict[str, int] = {}
    for f in delta.version_files(table)[1]:
        m = next((m for m in map(DATE_DIR.match, reversed(Path(f).parent.parts)) if m), None)  # date=D[/hour=H]
        if m:
            try:
                size = os.stat(f).st_size
            except OSError:
                size = 0
            by[m[1]] = by.get(m[1], 0) + size
    return [Unit(tier, table / f"date={d}", dt.date.fromisoformat(d), n) for d, n in sorted(by.items())]


def nfcapd_day(name: str) -> dt.date | None:
    m = NFCAPD_STAMP.match(name)
    if not m:
        return None
    try:
        return dt.datetime.strptime(m[1], "%Y%m%d").date()
    except ValueError:
        return None


def quarantine_units(root: Path) -> list[Unit]:
    """Everything in lake/quarantine: date=D folders as units; other files one by one,
    dated by their nfcapd name or else by when they were quarantined."""
    out = []
    if not root.is_dir():
        return out
    for base, dirs, files in os.walk(root):
        for d in list(dirs):
            m = DATE_DIR.match(d)
            if m:
                p = Path(base, d)
                out.append(Unit("quarantine", p, dt.date.fromisoformat(m[1]), disk_bytes(p)))
                dirs.remove(d)  # the whole partition is one unit
        for f in files:
            p = Path(base, f)
            day = nfcapd_day(f)
            if day is None:
                try:
                    day = dt.datetime.fromtimestamp(p.stat().st_mtime, dt.UTC).date()
                except OSError:
                    continue
            out.append(Unit("quarantine", p, day, disk_bytes(p)))
    return sorted(out, key=lambda u: (u.day, str(u.path)))


def limit_text(days: int) -> str:
    return "forever" if days <= 0 else f"{days} days"


def lake_tiers(cfg, today: dt.date | None = None) -> list[Tier]:
    """The lake's tiers with what their keys expire today (nothing is touched)."""
    r, lake = cfg.retention, Path(cfg.lake)
    keyed = [("flows", table_units("flows", lake / "flows"), int(r.flows_days))]
    keyed.append(("quarantine", quarantine_units(lake / "quarantine"), int(r.quarantine_days)))
    for res in ROLLUPS:
        keyed.append((f"rollup_{res}", dated_units(f"rollup_{res}", lake / "rollups" / res),
                      int(getattr(r, f"rollup_{res}_days"))))
    # the daily interface summary (mean/peak/p95 per day) is the 1h rollup's companion
    keyed.append(("rollup_1d", dated_units("rollup_1d", lake / "rollups" / "1d"), int(r.rollup_1h_days)))
    # exporter health history (a row per exporter and nfcapd file): a series like the 5m rollups
    keyed.append(("exporter_health", table_units("exporter_health", lake / "exporter_health"),
                  int(r.rollup_5m_days)))
    # SNMP interface counters (collectors/snmp): a row per interface and poll
    keyed.append(("interface_counters", dated_units("interface_counters", lake / "interface_counters"),
                  int(r.interface_counters_days)))
    keyed.append(("alerts", dated_units("alerts", lake / "alerts"), int(r.alerts_days)))  # by the day an alert started
    # DDoS attacks (by the day they started) and the mitigation's events (issue 36): Delta tables
    for name in ("attacks", "mitigations"):
        keyed.append((name, table_units(name, lake / name), int(getattr(r, f"{name}_days"))))
    # the sFlow tap's agent health rows (collectors/shipper/sflowlake.go); its counters are interface_counters'
    keyed.append(("sflow_agent_health", dated_units("sflow_agent_health", lake / "sflow_agent_health"),
                  int(r.sflow_agent_health_days)))
    tiers = []
    for name, units, keep in keyed:
        t = Tier(name, limit_text(keep), units)
        t.expire = [u for u in units if u.day and is_expired(u.day, keep, today)]
        for u in t.expire:
            u.why = f"older than {keep} days"
        tiers.append(t)
    # Reports and active results are small and are what people read: kept.
    reports = [u for table in sorted((lake / "reports").glob("*")) if table.is_dir()
               for u in dated_units("reports", table)]
    tiers.append(Tier("reports", "kept", reports))
    tiers.append(Tier("active", "kept", table_units("active", lake / "active")))
    return tiers


def rolled_up_days(cfg, today: dt.date | None = None) -> set[dt.date]:
    """Days whose rollups answer for them: some resolution holds the day, and every
    resolution whose key still keeps the day holds it."""
    lake, r = Path(cfg.lake), cfg.retention
    held = {}
    for res in ROLLUPS:
        held[res] = {u.day for u in dated_units("", lake / "rollups" / res)
                     if any(p.is_file() for p in u.path.rglob("*"))}
    days = set().union(*held.values())
    out = set()
    for day in days:
        needed = [res for res in ROLLUPS if not is_expired(day, int(getattr(r, f"rollup_{res}_days")), today)]
        if all(day in held[res] for res in needed):
            out.add(day)
    return out


def remove(unit: Unit, lake: Path) -> None:
    """Remove one unit. A folder is first renamed out of its table (atomic: readers see
    the whole partition or none of it), then deleted."""
    path = unit.path
    if not path.exists():
        return
    if path.is_dir():
        trash = lake / ".expired"
        trash.mkdir(parents=True, exist_ok=True)
        target = trash / f"{unit.tier}-{path.name}-{time.time_ns()}"
        try:
            os.replace(path, target)
        except OSError:
            target = path  # another filesystem: delete in place
        shutil.rmtree(target, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def remove_table_days(units: list[Unit], lake: Path, retain_hours: int) -> None:
    """Retention of a Delta table (lake/flows): the units' days deleted in one commit
    (readers of the older version keep reading it), then VACUUM: files no version younger
    than `retain_hours` needs go (0: the disk guard, now)."""
    from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

    by: dict[Path, list[Unit]] = {}
    for u in units:
        by.setdefault(u.path.parent, []).append(u)
    for table, days in by.items():
        dated = [u for u in days if u.day is not None]
        if dated:
            delta.delete_partitions(table, [{"date": u.day.isoformat()} for u in dated])
        delta.vacuum(table, retain_hours)
        recent = (dt.datetime.now(dt.UTC) - dt.timedelta(days=2)).date().isoformat()
        for d in table.glob("date=*"):  # partition folders the VACUUM emptied (not the ingest's current days)
            if d.name[5:] >= recent:
                continue
            for base, _dirs, _files in sorted(os.walk(d), reverse=True):
                try:
                    os.rmdir(base)  # only if empty
                except OSError:
                    pass


def clear_trash(lake: Path) -> None:
    """Folders left in lake/.expired by a run that died mid-delete."""
    shutil.rmtree(lake / ".expired", ignore_errors=True)


__all__ = ["Unit", "Tier", "lake_tiers", "table_units", "remove_table_days", "rolled_up_days", "remove",
           "clear_trash", "disk_bytes", "nfcapd_day", "as_date"]
