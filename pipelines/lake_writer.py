"""Idempotent, reader-safe writes of one micro-batch into the lake.

Spark's streaming file sink leaves task files in partition folders that only its
_spark_metadata log disowns; DuckDB/pyarrow globs would see them. Instead each batch is
written to a staging folder outside the table, and its files are renamed into place
(atomic on one filesystem) with names carrying the batch id. A replayed batch (crash
after the write, before Spark committed the batch) is recognised by its done-marker and
skipped, or, if it crashed mid-move, its partial files are removed first.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

from .lake_lock import table_lock

log = logging.getLogger(__name__)


class BatchWriter:
    def __init__(self, table_dir: Path, state_dir: Path, staging_dir: Path):
        self.table_dir = table_dir
        self.state_dir = state_dir
        self.staging_dir = staging_dir
        for d in (table_dir, state_dir, staging_dir):
            d.mkdir(parents=True, exist_ok=True)

    def _done(self, batch_id: int) -> Path:
        return self.state_dir / f"{batch_id:012d}.done"

    def _pending(self, batch_id: int) -> Path:
        return self.state_dir / f"{batch_id:012d}.pending"

    def already_done(self, batch_id: int) -> bool:
        return self._done(batch_id).exists()

    def staging(self, batch_id: int) -> Path:
        path = self.staging_dir / f"b{batch_id:012d}"
        shutil.rmtree(path, ignore_errors=True)
        return path

    def publish(self, batch_id: int, staged: Path, info: dict) -> list[Path]:
        """Move staged part files into the table; write the done marker last. Under the
        table's lock: compaction never swaps an hour while a batch lands in it."""
        with table_lock(self.table_dir):
            return self._publish(batch_id, staged, info)

    def _publish(self, batch_id: int, staged: Path, info: dict) -> list[Path]:
        pending = self._pending(batch_id)
        if pending.exists():  # an earlier attempt died mid-move: undo what it placed
            for rel in json.loads(pending.read_text()):
                (self.table_dir / rel).unlink(missing_ok=True)
        moves = []
        if staged.exists():
            for i, src in enumerate(sorted(staged.rglob("*.parquet"))):
                rel_dir = src.parent.relative_to(staged)
                rel = rel_dir / f"b{batch_id:012d}-{i:05d}.zstd.parquet"
                moves.append((src, rel))
        _atomic_write(pending, json.dumps([str(rel) for _, rel in moves]))
        for src, rel in moves:
            dst = self.table_dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        _atomic_write(self._done(batch_id), json.dumps({**info, "files": len(moves), "at": time.time()}))
        pending.unlink(missing_ok=True)
        shutil.rmtree(staged, ignore_errors=True)
        return [self.table_dir / rel for _, rel in moves]

    def totals(self) -> dict:
        out: dict = {}
        for marker in self.state_dir.glob("*.done"):
            try:
                info = json.loads(marker.read_text())
            except ValueError:
                continue
            for key, value in info.items():
                if isinstance(value, (int, float)) and key != "at":
                    out[key] = out.get(key, 0) + value
        return out


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class DeltaBatchWriter:
    """A stream's micro-batches into a Delta table (issue 38): the same calls as
    BatchWriter (already_done, staging, publish, totals), so the ingest's handler is
    unchanged. Spark writes a batch into a staging folder outside the table; publish moves
    its files into the table's partition folders under names carrying the batch id and
    commits them in one commit with the transaction (app id, batch id): readers see the
    batch whole or not at all, and a replayed batch finds its id committed (no-op). A batch
    that died between the move and its commit left files no version lists: invisible, a
    replay overwrites them (same names), VACUUM removes the rest."""

    def __init__(self, cfg, table: str, partition_by: list[str] | None = None):
        lake = Path(cfg.lake)
        self.cfg = cfg
        self.table = table
        self.table_dir = lake / table
        self.staging_dir = lake / ".staging" / table
        self.app_id = f"ingest-{table}"
        self.partition_by = partition_by or ["date"]
        for d in (self.table_dir, self.staging_dir):
            d.mkdir(parents=True, exist_ok=True)

    def already_done(self, batch_id: int) -> bool:
        from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

        last = delta.committed_version(self.table_dir, self.app_id)
        return last is not None and batch_id <= last

    def staging(self, batch_id: int) -> Path:
        path = self.staging_dir / f"b{batch_id:012d}"
        shutil.rmtree(path, ignore_errors=True)
        return path

    def publish(self, batch_id: int, staged: Path, info: dict) -> list[Path]:
        from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

        from . import lake_tables  # noqa: PLC0415  (the table's properties, at its first commit)

        placed: list[tuple[Path, dict]] = []
        for i, src in enumerate(sorted(staged.rglob("*.parquet")) if staged.exists() else []):
            rel_dir = src.parent.relative_to(staged)
            partition = partition_values(rel_dir)
            if sorted(partition) != sorted(self.partition_by):
                raise ValueError(f"lake/{self.table} batch {batch_id}: staged file {src} is not in a "
                                 f"{'/'.join(self.partition_by)} partition folder")
            dst = self.table_dir / rel_dir / f"b{batch_id:012d}-{i:05d}.zstd.parquet"
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
            placed.append((dst, partition))
        if placed:  # an empty batch commits nothing (its id is recorded by the next batch's commit)
            schema = staged_schema([p for p, _ in placed], self.partition_by)
            delta.ensure_table(self.table_dir, schema, self.partition_by, lake_tables.table_properties(self.cfg))
            if delta.commit_batch_files(self.table_dir, placed, schema, self.partition_by, self.app_id, batch_id,
                                        {**info, "files": len(placed)}):
                add_totals(self.cfg, self.table, {**info, "files": len(placed)})
        shutil.rmtree(staged, ignore_errors=True)
        return [p for p, _ in placed]

    def totals(self) -> dict:
        try:
            return json.loads(totals_path(self.cfg, self.table).read_text())
        except (OSError, ValueError):
            return {}


def partition_values(rel_dir: Path) -> dict:
    """{"date": "2026-11-20"} of a folder path `date=2026-11-20` (hive `k=v` parts)."""
    out = {}
    for part in Path(rel_dir).parts:
        key, sep, value = part.partition("=")
        if sep:
            out[key] = int(value) if key == "hour" else value
    return out


def staged_schema(files: list[Path], partition_by: list[str]):
    """The table's Arrow schema for files Spark wrote: their columns (union by name), times
    as microsecond UTC (Delta's timestamp; Spark's INT96 files read as the same instants),
    then the partition columns as strings ("hour" an integer)."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    merged = pa.unify_schemas([pq.read_schema(f) for f in files])
    fields = []
    for f in merged:
        if f.name in partition_by:
            continue
        if pa.types.is_timestamp(f.type):
            f = f.with_type(pa.timestamp("us", tz="UTC"))
        elif pa.types.is_dictionary(f.type):
            f = f.with_type(f.type.value_type)
        fields.append(f)
    fields += [pa.field(c, pa.int32() if c == "hour" else pa.string()) for c in partition_by]
    return pa.schema(fields)


def totals_path(cfg, table: str) -> Path:
    return cfg.path("state", "ingest", f"{table}.json")


def add_totals(cfg, table: str, counters: dict) -> None:
    """A committed batch's counters summed into state/ingest/<table>.json (`flowlake status`)."""
    path = totals_path(cfg, table)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        tot = json.loads(path.read_text())
    except (OSError, ValueError):
        tot = {}
    for key, value in counters.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "at":
            tot[key] = tot.get(key, 0) + value
    _atomic_write(path, json.dumps(tot))


# the streams whose tables are Delta tables (flows has its own writer, flow_ingest)
DELTA_STREAMS = ("active", "exporter_health", "experiments")


def quarantine_writer_for(cfg, stream) -> BatchWriter:
    """The stream's quarantine writer alone (the flows table itself is a Delta table,
    written by flow_ingest's commit)."""
    lake = Path(cfg.lake)
    return BatchWriter(lake / "quarantine" / "ingest" / stream.table,
                       cfg.path("state", "ingest", f"{stream.table}-quarantine"),
                       lake / ".staging" / f"quarantine-{stream.table}")


def writer_for(cfg, stream):
    """The stream's lake writer and its quarantine writer (staging beside the lake)."""
    lake = Path(cfg.lake)
    return (
        DeltaBatchWriter(cfg, stream.table) if stream.table in DELTA_STREAMS else
        BatchWriter(lake / stream.table, cfg.path("state", "ingest", stream.table),
                    lake / ".staging" / stream.table),
        BatchWriter(lake / "quarantine" / "ingest" / stream.table,
                    cfg.path("state", "ingest", f"{stream.table}-quarantine"),
                    lake / ".staging" / f"quarantine-{stream.table}"),
    )
