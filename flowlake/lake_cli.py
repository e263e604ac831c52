"""`flowlake lake`: the lake's own maintenance. `flowlake lake migrate` turns a lake of the
older Parquet layout into Delta tables in place (pipelines/lake_migrate.py)."""
from __future__ import annotations

import fcntl
import os

import click

from flowlake import components
from flowlake.base import config
from flowlake.pipelines import lake_migrate

# the stack's components that write the lake's tables: none may run during a migration
WRITERS = ("ingest", "compactor", "retention")

UPGRADE_HINT = ("lake/flows is a Parquet lake of an older flowlake: run `flowlake lake migrate` "
                "(stack down; counts are checked before and after)")


def running_writers(cfg) -> list[str]:
    """The lake's writers that run now: the stack's ingest, compactor and retention, and a
    manual `flowlake compact` (it holds run/compaction.lock)."""
    out = [c.name for c in components.all_components(cfg)
           if c.name in WRITERS and c.state()["state"] in ("running", "starting")]
    lock = cfg.path("run", "compaction.lock")
    if lock.exists():
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.append("a compaction pass (run/compaction.lock held)")
        finally:
            os.close(fd)
    return out


def check_up(cfg) -> None:
    """What `flowlake up` asks before it starts the ingest: RuntimeError with what to run
    when lake/flows is a Parquet lake of an older flowlake."""
    for table in lake_migrate.TABLES:
        if lake_migrate.needs_migration(cfg, table):
            raise RuntimeError(UPGRADE_HINT.replace("lake/flows", f"lake/{table}"))


@click.group("lake")
def lake() -> None:
    """The lake's tables: migrate an older Parquet lake to Delta Lake tables."""


@lake.command("migrate")
def migrate() -> None:
    """Turn lake/flows of an older flowlake (plain Parquet, date=/hour= folders) and the
    streams' tables (lake/active, exporter_health, experiments; date= folders) into Delta
    Lake tables in place.

    \b
    Nothing is moved or rewritten: a first commit (_delta_log/) lists the files that are
    there and records the ingest's last done batch, so a replayed batch stays a no-op.
    Rows are counted per date before (the Parquet files) and after (the table); unequal
    counts undo the conversion and name the date. Safe to rerun (a table is only counted
    again). Then the old layer's hidden folders (lake/.staging, .compact, .retired of the
    table, pins of readers that are gone) and its done-markers are removed.
    Refused while the ingest, the compactor or retention runs (`flowlake down` first), and
    while a batch is pending (a batch that died mid-move: `flowlake up`, then `down`).
    """
    cfg = config.get()
    busy = running_writers(cfg)
    if busy:
        raise click.ClickException(f"the stack writes the lake now ({', '.join(busy)}): run `flowlake down` "
                                   "first, then `flowlake lake migrate`")
    for table in lake_migrate.TABLES:
        try:
            out = lake_migrate.migrate_table(cfg, table)
        except (lake_migrate.MigrateError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(lake_migrate.summary(table, out))
