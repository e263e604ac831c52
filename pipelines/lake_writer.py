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
        BatchWriter(lake / stream.table, cfg.path("state", "ingest", stream.table),
                    lake / ".staging" / stream.table),
        BatchWriter(lake / "quarantine" / "ingest" / stream.table,
                    cfg.path("state", "ingest", f"{stream.table}-quarantine"),
                    lake / ".staging" / f"quarantine-{stream.table}"),
    )
