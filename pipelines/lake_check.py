"""Find Parquet files in the lake that readers would choke on (truncated, bad footer,
unreadable schema), move them to lake/quarantine/lake/ with the reason, and count them.

Jobs run this over the partitions they read, so one bad file costs its own rows (named
in the log and the quarantine) and never the whole report.

A Delta table (lake/flows) is different: its log lists the file, so moving it would break
every version that holds it. A bad file of the table's current version is reported with
the table, the version and the file (`CorruptLakeFile`): that table's read fails, the
rest of the lake stays readable. Files in its folders that no version lists (a batch that
died before its commit) are not the table's and are not checked."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger("flowlake.lake")


def problem(path: Path) -> str | None:
    """Why a Parquet file is unreadable, or None if its footer and row groups check out."""
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            fh.seek(max(0, path.stat().st_size - 4))
            tail = fh.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            return f"not a complete Parquet file (magic {head!r}...{tail!r}, {path.stat().st_size} bytes): truncated or foreign"
        meta = pq.ParquetFile(path).metadata
        if meta.num_rows < 0:
            return "negative row count in footer"
    except FileNotFoundError:  # gone since listed (a compaction swap renamed its hour): not broken
        return None
    except Exception as exc:  # pyarrow raises several types for broken footers
        return f"unreadable Parquet footer: {exc}"
    return None


class CorruptLakeFile(RuntimeError):
    """A file a Delta table's version lists is unreadable (named with table and version)."""


def check(lake: Path, table: str = "flows", under: str = "") -> list[tuple[Path, str]]:
    """Quarantine every bad *.parquet below lake/<table>/<under>; return (new path, reason).
    A Delta table: CorruptLakeFile naming table, version and file instead (see above)."""
    root = lake / table / under if under else lake / table
    moved = []
    if not root.exists():
        return moved
    if (lake / table / "_delta_log").is_dir():
        from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

        version, files = delta.version_files(lake / table)
        prefix = str((lake / table).resolve() / under) if under else str((lake / table).resolve())
        for f in files:
            if f == prefix or f.startswith(prefix.rstrip("/") + "/"):
                reason = problem(Path(f))
                if reason is not None:
                    log.error("lake/%s version %d: %s: %s", table, version, f, reason)
                    raise CorruptLakeFile(f"lake/{table} version {version}: {f}: {reason} (the table's other "
                                          "files and the rest of the lake stay readable)")
        return moved
    qroot = lake / "quarantine" / "lake" / table
    for path in sorted(root.rglob("*.parquet")):
        reason = problem(path)
        if reason is None:
            continue
        rel = path.relative_to(lake / table)
        target = qroot / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(path, target)
        except FileNotFoundError:  # swapped away between the check and the move: nothing to hold back
            continue
        target.with_name(target.name + ".reason").write_text(
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {table}/{rel}: {reason}\n")
        log.error("quarantined lake file %s/%s: %s", table, rel, reason)
        moved.append((target, reason))
    return moved


def quarantined(lake: Path) -> int:
    q = lake / "quarantine" / "lake"
    return len(list(q.rglob("*.reason"))) if q.exists() else 0
