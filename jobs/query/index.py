"""The investigation index: each closed hour of lake/flows copied into a DuckDB file.

Why: DuckDB scans its own storage with ~4x less CPU than the ingest's plain zstd Parquet
(bench/query.py: a day's `-s srcip/bytes` top-N, 0.07 against 0.28 CPU-s). Hours the
compactor has rewritten (sorted, dictionary encodings) are not indexed: the index took
1.1x their CPU. So the index serves closed hours not compacted yet. The lake stays the truth:
- an hour's index file is named after the signature (names, sizes, mtimes) of the
  hour's Parquet files: when compaction or a late batch rewrites the hour, the name no
  longer matches and queries read that hour's Parquet until the index is rebuilt;
- files are written aside and renamed into place, so a query never sees half a file;
  one dropped between a query's lookup and its ATTACH is read from Parquet (duck.py);
- only the last `[query] index_days` days are kept (the bound; 0 turns the index off).
`flowlake query-index` builds what is missing (run it after an hour closes, e.g. from
cron or the hour-close job); `flowlake status` shows its size.
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from .lake import partitions

CLOSE_MARGIN = dt.timedelta(minutes=10)  # an hour is closed this long after its end (late files)


def root(cfg) -> Path:
    return cfg.path("query-index")


def signature(files: list[str]) -> str:
    import hashlib  # noqa: PLC0415  (start-up: flowlake query's fast path)

    h = hashlib.sha256()
    for f in sorted(files):
        st = os.stat(f)
        h.update(f"{Path(f).name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _hour_of(part: Path) -> dt.datetime:
    day = dt.datetime.strptime(part.parent.name[5:], "%Y-%m-%d").replace(tzinfo=dt.UTC)
    return day + dt.timedelta(hours=int(part.name[5:]))


def index_file(cfg, part: Path, files: list[str]) -> Path:
    return root(cfg) / part.parent.name / f"{part.name}-{signature(files)}.duckdb"


def lookup(cfg, part: Path, files: list[str]) -> Path | None:
    """The hour's index file if it matches the hour's Parquet files now, else None. A day
    without index folder costs one stat (no signature: compacted days have none)."""
    if not files or int(cfg.query.index_days) <= 0 or not (root(cfg) / part.parent.name).is_dir():
        return None
    try:
        path = index_file(cfg, part, files)
    except OSError:  # a file vanished while listed (compaction): read Parquet, it will fail loudly
        return None
    return path if path.exists() else None


def build(cfg, now: dt.datetime | None = None, log=None) -> dict:
    """Index every closed hour of the last index_days days that has no current index;
    drop index files of rewritten hours and of days past the bound."""
    now = now or dt.datetime.now(dt.UTC)
    days = int(cfg.query.index_days)
    oldest = (now - dt.timedelta(days=days)).replace(hour=0, minute=0, second=0, microsecond=0)
    out = {"built": 0, "fresh": 0, "removed": 0, "flows": 0}
    keep: set[Path] = set()
    if days > 0:
        try:
            parts = partitions(cfg.lake, oldest, now - CLOSE_MARGIN)
        except FileNotFoundError:
            parts = []
        from flowlake.pipelines.lake_read import LakeReader  # noqa: PLC0415  (start-up: flowlake query's fast path)

        with LakeReader(cfg.lake) as snap:
            _build_parts(cfg, parts, now, snap, keep, out, log)
    if root(cfg).exists():
        for f in root(cfg).rglob("*.duckdb"):
            if f not in keep and not _is_open_hour(f, now):
                f.unlink(missing_ok=True)
                out["removed"] += 1
    return out


def _build_parts(cfg, parts, now, snap, keep: set, out: dict, log) -> None:
    """Index the closed hours among `parts` that have no current index (see build)."""
    import duckdb  # noqa: PLC0415  (start-up: duckdb)

    from flowlake.pipelines.duck import sql_list  # noqa: PLC0415  (start-up: flowlake status)
    from flowlake.pipelines.lake_read import lake_files  # noqa: PLC0415  (start-up: flowlake status)

    for part in parts:
        if _hour_of(part) + dt.timedelta(hours=1) > now - CLOSE_MARGIN:
            continue  # still open: flows keep arriving
        files = snap.files("flows", [part])[1]  # one version / pinned: a compaction while we copy cannot fail the read
        if not files or compacted(files):
            continue
        target = index_file(cfg, part, files)
        keep.add(target)
        if target.exists():
            out["fresh"] += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        con = duckdb.connect(str(tmp))
        try:
            # time order: a time window then skips row groups by their min/max
            con.execute(f"CREATE TABLE flows AS SELECT * FROM read_parquet({sql_list(files)}, "
                        "union_by_name = true) ORDER BY time_start")
            n = con.execute("SELECT count(*) FROM flows").fetchone()[0]
        finally:
            con.close()
        try:
            current = index_file(cfg, part, lake_files(cfg, "flows", [part])[1])
        except OSError:  # a file vanished while listed (swapped just now)
            current = None
        if current != target:  # rewritten while we copied: next run
            tmp.unlink(missing_ok=True)
            keep.discard(target)
            continue
        os.replace(tmp, target)
        out["built"] += 1
        out["flows"] += n
        if log:
            log(f"indexed {part.parent.name}/{part.name}: {n:,} flows")


def compacted(files) -> bool:
    """Every file of the hour written by the compactor: not indexed, as its sorted,
    dictionary-encoded files cost DuckDB no more to scan than an index file (bench/query.py:
    the index took 1.1x their CPU, ATTACH included). The index is for hours still in the
    ingest's many small files (closed, not compacted yet: ~4x less CPU than their Parquet)."""
    from flowlake.pipelines.compact import COMPACT_FILE  # noqa: PLC0415  (start-up: flowlake query's fast path)

    return bool(files) and all(COMPACT_FILE.match(Path(f).name) for f in files)


def _is_open_hour(f: Path, now: dt.datetime) -> bool:
    try:
        t = _hour_of(f.parent / f.name.split("-")[0])
    except ValueError:
        return False
    return t + dt.timedelta(hours=1) > now - CLOSE_MARGIN


def status(cfg) -> dict:
    files = list(root(cfg).rglob("*.duckdb")) if root(cfg).exists() else []
    return {"index_hours": len(files), "index_bytes": sum(f.stat().st_size for f in files),
            "index_days": int(cfg.query.index_days)}
