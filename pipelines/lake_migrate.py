"""`flowlake lake migrate`: a lake of the older Parquet layout made Delta tables in place
(issue 38, docs/design/delta-lake.md "flowlake lake migrate").

Per table of TABLES (`lake/flows` and the streams the ingest writes as Delta tables,
lake_writer.DELTA_STREAMS; the others follow when their writers do):

1. refused while a batch is pending (`state/ingest/<table>/*.pending`: a batch that died
   mid-move, whose placed files would become table rows; `flowlake up` then `down`
   replays and clears it). The caller (flowlake/lake_cli.py) refuses first while the
   stack's writers run;
2. `delta.convert_in_place`: one first commit lists the files that are there (nothing is
   moved or rewritten) and carries the ingest's last done batch as its transaction, so a
   replay of an older batch is a no-op as the done-marker made it; rows are counted per
   date before (the Parquet files) and after (the table), unequal counts undo it;
3. a rerun finds the table and only counts it again;
4. then the old layer's hidden folders for that table go: `lake/.staging/<table>`,
   `lake/.compact/<table>`, `lake/.retired/<table>`, the snapshots of readers that are
   gone (`lake/.snapshots`), and `state/ingest/<table>/*.done`.

`needs_migration(cfg)` is what `flowlake up` asks: a table folder with `date=` folders and
no `_delta_log/`.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from . import lake_tables
from .lake_read import is_delta

# table -> (partition columns with their Delta types, the ingest's app id)
TABLES = {"flows": ([("date", "string"), ("hour", "integer")], "ingest-flows"),
          # the streams lake_writer.DELTA_STREAMS writes as Delta tables
          "active": ([("date", "string")], "ingest-active"),
          "exporter_health": ([("date", "string")], "ingest-exporter_health"),
          "experiments": ([("date", "string")], "ingest-experiments")}


class MigrateError(RuntimeError):
    """The lake cannot be migrated now; the message says why and what to do."""


def _state_dir(cfg, table: str) -> Path:
    return Path(cfg.path("state", "ingest", table))


def needs_migration(cfg, table: str = "flows") -> bool:
    """lake/<table> holds data of the older Parquet layout (date= folders, no _delta_log/)."""
    folder = Path(cfg.lake) / table
    return folder.is_dir() and not is_delta(folder) and any(folder.glob("date=*"))


def last_done_batch(cfg, table: str) -> int | None:
    """The highest batch id with a done-marker (BatchWriter's `<id>.done`), or None."""
    ids = [int(p.stem) for p in _state_dir(cfg, table).glob("*.done") if p.stem.isdigit()]
    return max(ids) if ids else None


def old_layer(cfg, table: str) -> list[Path]:
    """The hidden folders and markers of the older layer that a Delta table makes unneeded."""
    from . import lake_snapshot  # noqa: PLC0415  (only for the sweep of dead readers' pins)

    lake = Path(cfg.lake)
    out = [p for p in (lake / ".staging" / table, lake / ".compact" / table, lake / ".retired" / table)
           if p.exists()]
    out += [d for d, alive in lake_snapshot.snapshots(lake) if not alive]
    out += sorted(_state_dir(cfg, table).glob("*.done"))
    return out


def migrate_table(cfg, table: str, log=print) -> dict:
    """Make lake/<table> a Delta table in place (see the module's doc); returns
    convert_in_place's record plus "removed": the old layer's paths removed."""
    from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

    from .lake_lock import table_lock  # noqa: PLC0415  (start-up: the lock only here)

    if table not in TABLES:
        raise MigrateError(f"lake/{table}: not a table flowlake keeps as Delta yet (tables: {', '.join(TABLES)})")
    columns, app = TABLES[table]
    folder = Path(cfg.lake) / table
    pending = sorted(_state_dir(cfg, table).glob("*.pending"))
    if pending:
        raise MigrateError(f"lake/{table}: batch {pending[0].stem} died while it was moved into the lake "
                           f"({pending[0]}): run `flowlake up` (the ingest replays and clears it), then "
                           "`flowlake down`, then migrate")
    if not folder.is_dir() or (not is_delta(folder) and not any(folder.rglob("*.parquet"))):
        return {"converted": False, "files": 0, "rows": 0, "by": {}, "version": None, "removed": [],
                "empty": True}
    last = last_done_batch(cfg, table)
    if table != "flows" and last is not None:  # the done-markers' counters: `flowlake status` keeps its totals
        _keep_totals(cfg, table)
    with table_lock(folder):
        out = delta.convert_in_place(folder, columns, {app: last} if last is not None else None,
                                     lake_tables.table_properties(cfg))
    removed = []
    for path in old_layer(cfg, table):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(str(path))
    return {**out, "removed": removed, "transaction": {app: last} if last is not None else {}}


def _keep_totals(cfg, table: str) -> None:
    """state/ingest/<table>.json (what DeltaBatchWriter.totals reads) from the done-markers
    about to go, unless it exists (a rerun)."""
    from .lake_writer import BatchWriter, add_totals, totals_path  # noqa: PLC0415  (only when migrating)

    if totals_path(cfg, table).exists():
        return
    lake = Path(cfg.lake)
    tot = BatchWriter(lake / table, _state_dir(cfg, table), lake / ".staging" / table).totals()
    add_totals(cfg, table, tot)


def summary(table: str, out: dict) -> str:
    if out.get("empty"):
        return f"lake/{table}: no data, nothing to migrate"
    what = "converted" if out["converted"] else "already a Delta table, counted again"
    lines = [f"lake/{table}: {what} (version {out['version']}, {out['files']} files, {out['rows']:,} rows; "
             f"rows per date equal in the Parquet files and the table)"]
    lines += [f"  date={d}: {n:,} rows" for d, n in sorted(out["by"].items())]
    if out.get("transaction"):
        lines.append(f"  ingest's last batch recorded: {json.dumps(out['transaction'])}")
    if out["removed"]:
        lines.append(f"  removed the old layer: {len(out['removed'])} paths ({', '.join(out['removed'][:3])}"
                     f"{', ...' if len(out['removed']) > 3 else ''})")
    return "\n".join(lines)
