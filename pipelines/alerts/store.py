"""The alerts table: lake/alerts/date=D/alerts.parquet, one row per alert (its latest
state), D = the UTC day it started. Small (bounded by [alerts] max_open and [retention]
alerts_days), so a changed day is rewritten whole: written beside and renamed over, so a
reader (DuckDB, Superset) sees the old file or the new one. The service and the CLI
(ack, snooze) change it under the table's lock (pipelines/lake_lock.table_lock)."""
from __future__ import annotations

import datetime as dt
import os
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from flowlake.pipelines.lake_lock import table_lock
from flowlake.schemas.alerts import ALERTS
from flowlake.schemas.messages import arrow_schema

COLUMNS = [n for n in ALERTS.names if n != "date"]
TIMES = [f.name for f in ALERTS.fields if f.type == "timestamp_ms"]
FILE = "alerts.parquet"


def day_of(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).date().isoformat()


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


class AlertStore:
    def __init__(self, lake: Path):
        self.root = Path(lake) / "alerts"
        self.schema = pa.schema([f for f in arrow_schema(ALERTS) if f.name != "date"])
        self._cache: dict[str, tuple[int, list[dict]]] = {}  # day -> (file mtime_ns, rows): re-read only when changed

    @classmethod
    def from_config(cls, cfg) -> "AlertStore":
        return cls(cfg.lake)

    @contextmanager
    def lock(self):
        with table_lock(self.root):
            yield

    def days(self) -> list[str]:
        if not self.root.exists():
            return []
        return sorted(p.name[5:] for p in self.root.glob("date=*") if (p / FILE).exists())

    def read_day(self, day: str) -> list[dict]:
        path = self.root / f"date={day}" / FILE
        try:
            mtime = path.stat().st_mtime_ns
            cached = self._cache.get(day)
            if cached and cached[0] == mtime:
                return [dict(r) for r in cached[1]]
            table = pq.read_table(path, schema=self.schema)
        except FileNotFoundError:
            return []
        cols = {n: (table[n].cast(pa.int64()) if n in TIMES else table[n]).to_pylist() for n in COLUMNS}
        rows = [dict(zip(COLUMNS, vals)) for vals in zip(*cols.values())]
        self._cache[day] = (mtime, rows)
        return [dict(r) for r in rows]

    def changed_since_read(self, day: str) -> bool:
        """Was the day's file written by someone else since this store last read or wrote it?"""
        try:
            mtime = (self.root / f"date={day}" / FILE).stat().st_mtime_ns
        except FileNotFoundError:
            return False
        return self._cache.get(day, (None,))[0] != mtime

    def read(self, days=None) -> list[dict]:
        out = []
        for day in (self.days() if days is None else days):
            out += self.read_day(day)
        return out

    def write_day(self, day: str, rows: list[dict]) -> None:
        """Replace one day's alerts (call under lock())."""
        part = self.root / f"date={day}"
        part.mkdir(parents=True, exist_ok=True)
        rows = sorted(rows, key=lambda r: (r["started"], r["id"]))
        table = pa.table({n: pa.array([r.get(n) for r in rows], self.schema.field(n).type) for n in COLUMNS},
                         schema=self.schema)
        tmp = part / f".{FILE}.{os.getpid()}.tmp"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, part / FILE)
        self._cache[day] = ((part / FILE).stat().st_mtime_ns, [dict(r) for r in rows])

    def save(self, alerts: list[dict]) -> None:
        """Merge these alerts (by id) into their days (call under lock())."""
        by_day: dict[str, list[dict]] = {}
        for a in alerts:
            by_day.setdefault(day_of(a["started"]), []).append(a)
        for day, changed in by_day.items():
            ids = {a["id"] for a in changed}
            self.write_day(day, [r for r in self.read_day(day) if r["id"] not in ids] + changed)

    def find(self, alert_id: str) -> dict | None:
        for row in self.read():
            if row["id"] == alert_id or (len(alert_id) >= 4 and row["id"].startswith(alert_id)):
                return row
        return None

    def size(self) -> dict:
        files = list(self.root.glob(f"date=*/{FILE}")) if self.root.exists() else []
        return {"days": len(files), "bytes": sum(f.stat().st_size for f in files)}
