"""Retention per tier and the disk guard (issue 23).

Tiers and what bounds them ([retention] in flowlake.toml):
  spool       nfcapd files: deleted once the ledger shows them shipped AND the ingest has
              committed their Kafka offsets to the lake, spool_grace_hours after shipping
  kafka       topic retention.ms / retention.bytes (the broker deletes)
  flows       lake/flows/date=D           flows_days
  quarantine  lake/quarantine/...         quarantine_days
  rollup_*    lake/rollups/<res>/date=D   rollup_1m_days, rollup_5m_days, rollup_1h_days
  reports, active                          kept
  retired     lake/.retired/<table>/...   [compaction] retired_grace_minutes after the swap;
                                          the disk guard takes them first (readers.py)
  snapshots   lake/.snapshots/<pid>-...   while their reader runs (dead readers' go)
Age is the flows' own time (the date= partition), never a file's mtime.

`expired_dates(cfg, dates)` is the one rule other commands (e.g. `flowlake import`) use to
say which days would outlive their raw flows.
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable


def today_utc() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def as_date(value) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).date() if value.tzinfo else value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value).removeprefix("date="))


def is_expired(day: dt.date, keep_days: int, today: dt.date | None = None) -> bool:
    """A day goes once all its flows are older than keep_days (day < today - keep_days);
    keep_days 0 keeps it forever."""
    if keep_days <= 0:
        return False
    return day < (today or today_utc()) - dt.timedelta(days=keep_days)


def expired_dates(cfg, dates: Iterable, today: dt.date | None = None) -> list[dt.date]:
    """The dates (date, datetime or 'YYYY-MM-DD') whose raw flows retention would remove
    now under [retention] flows_days: they survive as rollups only. Sorted, unique."""
    keep = int(cfg.retention.flows_days)
    return sorted({d for d in map(as_date, dates) if is_expired(d, keep, today)})
