"""Hour close: compaction of the Delta table lake/flows against the ingest's exactly-once
transactions, and readers (real DuckDB, Spark) counting rows while hours are replaced.

The lake is written as the ingest writes it: files in the hour folders, committed by
delta.commit_batch_files with the ingest's transaction (APP_ID, batch id), so a replay
consults the same transactions."""
from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowlake.base import delta
from flowlake.pipelines import compact, flow_ingest, hour_close

DAY = "2026-11-20"
T0 = int(dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc).timestamp() * 1000)


@pytest.fixture
def home(tmp_path, monkeypatch):
    from flowlake.base import config

    monkeypatch.setenv("FLOWLAKE_HOME", str(tmp_path))
    config.reset()
    yield config.get()
    config.reset()


def batch_table(batch: int, hours: list[int], rows_per_hour: int, t0: int = T0) -> pa.Table:
    """Flow rows of one micro-batch: `source_file` = batch, `file_seq` unique within it;
    times in the hours of the day that starts at t0 (ms)."""
    rng = np.random.default_rng(batch)
    n = rows_per_hour * len(hours)
    hour = np.repeat(np.array(hours), rows_per_hour)
    ts = t0 + hour * 3_600_000 + rng.integers(0, 3_600_000, n)
    return pa.table({
        "time_start": pa.array(ts, pa.timestamp("ms", tz="UTC")),
        "time_end": pa.array(ts + rng.integers(0, 60_000, n), pa.timestamp("ms", tz="UTC")),
        "exporter": pa.array(rng.choice(["127.0.0.2", "127.0.0.3"], n)),
        "input_if": pa.array(rng.integers(1, 4, n)), "output_if": pa.array(rng.integers(10, 14, n)),
        "src_addr": pa.array([f"10.0.{a}.{b}" for a, b in rng.integers(0, 255, (n, 2))]),
        "dst_addr": pa.array([f"198.51.100.{a}" for a in rng.integers(0, 255, n)]),
        "src_port": pa.array(rng.integers(1024, 65535, n).astype(np.int32)),
        "dst_port": pa.array(rng.choice([53, 80, 443], n).astype(np.int32)),
        "proto": pa.array(rng.choice([6, 17], n).astype(np.int32)),
        "tcp_flags": pa.array(np.zeros(n, np.int32)), "tos": pa.array(np.zeros(n, np.int32)),
        "packets": pa.array(rng.integers(1, 100, n)), "bytes": pa.array(rng.integers(40, 100_000, n)),
        "sampling_rate": pa.array(np.ones(n, np.int32)), "src_as": pa.array(np.zeros(n, np.int64)),
        "dst_as": pa.array(np.zeros(n, np.int64)),
        "source_file": pa.array([f"batch{batch}"] * n), "file_seq": pa.array(np.arange(n)),
        "hour": pa.array(hour.astype(np.int32)),
    })


class Writer:
    """The ingest's write of lake/flows: each batch's files in its hour folders
    (b<batch>-part-00000.parquet, microsecond times), then one commit with the transaction."""

    def __init__(self, cfg):
        self.table_dir = Path(cfg.lake) / "flows"

    def files(self, batch: int, table: pa.Table, day: str = DAY) -> list[Path]:
        out = []
        for h in sorted(set(table.column("hour").to_pylist())):
            part = self.table_dir / f"date={day}" / f"hour={h}"
            part.mkdir(parents=True, exist_ok=True)
            rows = table.filter(pa.compute.equal(table.column("hour"), h)).drop_columns(["hour"])
            out.append(part / f"b{batch:012d}-part-00000.parquet")
            pq.write_table(rows, out[-1], compression="zstd", coerce_timestamps="us")
        return out

    def publish(self, batch: int, table: pa.Table, day: str = DAY) -> bool:
        files = self.files(batch, table, day)
        return delta.commit_batch_files(self.table_dir, [(f, flow_ingest.partition_of(f)) for f in files],
                                        flow_ingest.table_schema(), flow_ingest.PARTITION_BY, flow_ingest.APP_ID,
                                        batch, {"rows": table.num_rows})

    def already_done(self, batch: int) -> bool:
        last = delta.committed_version(self.table_dir, flow_ingest.APP_ID)
        return last is not None and batch <= last


def writer_for(cfg) -> Writer:
    return Writer(cfg)


def lake_rows(cfg) -> list[tuple]:
    import duckdb

    con = duckdb.connect()
    try:
        delta.duckdb_load_delta(con)
        return con.execute(f"SELECT source_file, file_seq FROM delta_scan('{cfg.lake / 'flows'}')").fetchall()
    finally:
        con.close()


def test_compaction_keeps_exactly_once_with_replays_and_late_batches(home):
    cfg = home
    w = writer_for(cfg)
    expected = 0
    for b in range(6):  # six committed batches over hours 0-2
        t = batch_table(b, [0, 1, 2], 500)
        assert w.publish(b, t)
        expected += t.num_rows
    # Batch 6 died before its commit: its file sits in hour 1, no version lists it.
    t6 = batch_table(6, [1], 300)
    (dead,) = w.files(6, t6)
    assert len(lake_rows(cfg)) == expected

    results = hour_close.run(cfg, date=DAY, settle=False, rollups=False)
    assert sorted(r["hour"] for r in results) == [0, 1, 2]
    h1 = w.table_dir / f"date={DAY}" / "hour=1"
    current = {h.hour: h for h in compact.hours(w.table_dir, DAY)}
    assert all(compact.COMPACT_FILE.match(p.name) for h in current.values() for p in h.files())
    assert dead.exists() and dead not in current[1].files()  # never read, never rewritten
    assert len(lake_rows(cfg)) == expected

    # The ingest restarts: batch 6 is replayed (its task rewrites its own file, then the
    # commit), batch 3, committed, is recognised by its transaction and not written again.
    assert w.already_done(3) and not w.already_done(6)
    assert not w.publish(3, batch_table(3, [0, 1, 2], 500))
    assert w.publish(6, t6)
    expected += t6.num_rows
    rows = lake_rows(cfg)
    assert len(rows) == expected and len(set(rows)) == expected

    # A late batch for the compacted hour 2 lands beside its files and reopens it.
    late = batch_table(7, [2], 200)
    assert w.publish(7, late)
    expected += late.num_rows
    hours = {h.hour: h for h in compact.hours(w.table_dir, DAY)}
    assert hours[2].needs_compaction() and not hours[0].needs_compaction()
    again = hour_close.run(cfg, date=DAY, settle=False, rollups=False)
    assert sorted(r["hour"] for r in again) == [1, 2]  # hour 1 held batch 6's file
    rows = lake_rows(cfg)
    assert len(rows) == expected and len(set(rows)) == expected
    assert all(compact.COMPACT_FILE.match(p.name) for h in compact.hours(w.table_dir) for p in h.files())
    assert sorted(p.name for p in h1.glob("*.parquet")) != [p.name for p in compact.hours(w.table_dir, DAY)[1].files()]
    state = hour_close.status(cfg)
    assert state["hours_waiting"] == 0


def test_closed_hours_wait_to_settle(home):
    cfg = home
    w = writer_for(cfg)
    t = batch_table(0, [5, 6], 100)
    w.publish(0, t)
    end_of_6 = T0 / 1000 + 7 * 3600
    now = time.time()  # files were just written: nothing has settled by file age
    assert hour_close.run(cfg, now=now) == []
    # Without the settle wait (--date), both ended hours close; an hour not ended never does.
    assert hour_close.run(cfg, date=DAY, settle=False, now=end_of_6 - 1, rollups=False)[0]["hour"] == 5
    assert [r["hour"] for r in hour_close.run(cfg, date=DAY, settle=False, rollups=False)] == [6]


def test_settings_are_checked(home, monkeypatch):
    from flowlake.base import config

    monkeypatch.setenv("FLOWLAKE_COMPACTION_ZSTD_LEVEL", "40")
    config.reset()
    with pytest.raises(ValueError, match=r"\[compaction\] zstd_level = 40"):
        compact.Settings.from_config(config.get())


def _lake_with_hours(cfg) -> tuple[Writer, int, Path]:
    """8 committed batches over hours 0-3 and one uncommitted batch file in hour 2 (a batch
    that died before its commit); (writer, rows, that file)."""
    w = writer_for(cfg)
    expected = 0
    for b in range(8):
        t = batch_table(b, [0, 1, 2, 3], 400)
        w.publish(b, t)
        expected += t.num_rows
    (unfinished,) = w.files(99, batch_table(99, [2], 150))
    return w, expected, unfinished


def _swap_all(cfg, w) -> int:
    s = compact.Settings.from_config(cfg)
    return sum(1 for h in compact.hours(w.table_dir, DAY)
               if compact.compact_hour(cfg, w.table_dir, h, s, force=True))


def _duck_count(cfg, eng=None) -> int:
    """Rows as `flowlake query`'s DuckDB engine counts them (one flow per row, every proto)."""
    from flowlake.jobs.query import parse
    from flowlake.jobs.query.duck import DuckEngine

    own = eng is None
    eng = eng or DuckEngine(cfg, use_index=False)
    try:
        return sum(r["flows"] for r in eng.aggregate(parse("any"), ["proto"]))
    finally:
        if own:
            eng.close()


@pytest.mark.integration
def test_reads_planned_before_a_swap_stay_exact(home, spark):
    """The defect, made deterministic: a read lists an hour, every hour is swapped, then the
    read runs. Unpinned (plain Spark over the folder) it fails on the vanished files; the
    project's readers (JobContext for Spark, the query's DuckDB engine) pin their files
    and count exactly, and so do the query's Spark engine and the jobs' DuckDB file list."""
    from flowlake.jobs.context import JobContext
    from flowlake.jobs.query import parse
    from flowlake.jobs.query.duck import DuckEngine
    from flowlake.jobs.query.spark_engine import SparkEngine
    from flowlake.pipelines import duck as jobs_duck

    cfg = home
    w, expected, unfinished = _lake_with_hours(cfg)
    day = dt.date.fromisoformat(DAY)
    plain = spark.read.parquet(str(cfg.lake / "flows"))
    ctx = JobContext(spark, cfg, day)
    pinned_spark = ctx.flows()
    eng = DuckEngine(cfg, use_index=False)
    spark_eng = SparkEngine(cfg)
    duck_files = jobs_duck.flow_files(ctx)
    assert _swap_all(cfg, w) == 4
    assert plain.count() > expected  # a plain folder read: the replaced files are still there (VACUUM)
    try:
        assert pinned_spark.count() == expected
        assert _duck_count(cfg, eng) == expected
        assert sum(r["flows"] for r in spark_eng.aggregate(parse("any"), ["proto"])) == expected
        import duckdb

        assert duckdb.sql(f"SELECT count(*) FROM read_parquet({jobs_duck.sql_list(duck_files)})").fetchone()[0] == expected
    finally:
        eng.close()
        spark_eng.close()
        ctx.snapshot.close()
    assert unfinished.exists()


@pytest.mark.integration
def test_readers_never_see_a_row_twice_or_missing(home, spark):
    """The query's DuckDB engine and the jobs' Spark reads count rows in loops while every
    hour is compacted again and again (forced, back to back), one hour with an unfinished
    batch carried over each time. Every read completes (none fails on a vanished file) and
    every count is exact."""
    from flowlake.jobs.context import JobContext

    cfg = home
    w, expected, unfinished = _lake_with_hours(cfg)
    day = dt.date.fromisoformat(DAY)
    counts: list[int] = []
    spark_counts: list[int] = []
    errors: list[str] = []
    stop = threading.Event()

    def duck_reader():
        while not stop.is_set():
            try:
                counts.append(_duck_count(cfg))
            except Exception as exc:  # noqa: BLE001 - any failure is a defect here
                errors.append(f"duckdb: {exc}")

    def spark_reader():
        while not stop.is_set():
            ctx = JobContext(spark, cfg, day)
            try:
                spark_counts.append(ctx.flows().count())
            except Exception as exc:  # noqa: BLE001
                errors.append(f"spark: {str(exc)[:300]}")
            finally:
                ctx.snapshot.close()

    assert JobContext(spark, cfg, day).flows().count() == expected  # warm: Spark's first job is slow
    threads = [threading.Thread(target=duck_reader), threading.Thread(target=spark_reader)]
    for th in threads:
        th.start()
    swaps = 0
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (swaps < 40 or len(spark_counts) < 5 or len(counts) < 20):
            swaps += _swap_all(cfg, w)
    finally:
        stop.set()
        for th in threads:
            th.join()
    print(f"\n{swaps} swaps; DuckDB counted {len(counts)} times, Spark {len(spark_counts)} times, {len(errors)} failed")
    assert not errors, errors[:3]
    assert swaps >= 40 and len(spark_counts) >= 5 and len(counts) >= 20
    wrong = [c for c in counts + spark_counts if c != expected]
    assert not wrong, f"readers saw {sorted(set(wrong))} rows instead of {expected}"
    assert unfinished.exists()  # listed by no version: never read, never rewritten


def _data_files(table: Path) -> set[Path]:
    """The Parquet files on disk in the table's folder, the log's checkpoints excluded."""
    return {p for p in table.rglob("*.parquet") if "_delta_log" not in p.relative_to(table).parts}


def test_replaced_and_uncommitted_files_go_after_the_grace(home):
    """Files a compaction replaced stay for readers of older versions until the compactor's
    VACUUM past [compaction] retired_grace_minutes (whole hours); an uncommitted batch's
    file goes then too. Within the grace nothing goes; past it exactly those files."""
    cfg = home
    w, expected, unfinished = _lake_with_hours(cfg)
    before = _data_files(w.table_dir)
    v0 = delta.version_files(w.table_dir)
    assert _swap_all(cfg, w) == 4
    hour_close.run(cfg, date=DAY, rollups=False)  # within the grace: kept
    assert before <= _data_files(w.table_dir)
    old = delta.version_files(w.table_dir, v0[0])[1]  # the older version still reads whole
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in old) == expected
    assert delta.vacuum(w.table_dir, 0, dry_run=True, full=True)
    removed = delta.vacuum(w.table_dir, 0, full=True)
    left = _data_files(w.table_dir)
    assert not (before & left) and not unfinished.exists() and len(removed) == len(before)
    assert len(lake_rows(cfg)) == expected
