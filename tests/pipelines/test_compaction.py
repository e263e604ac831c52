"""Hour close: compaction of lake/flows hours against the ingest's exactly-once markers,
and readers (real DuckDB, Spark) counting rows while hours are swapped.

The lake is written through the ingest's own BatchWriter (staging, rename, done-marker),
so the markers are the ones a replay would consult."""
from __future__ import annotations

import datetime as dt
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowlake.pipelines import compact, hour_close
from flowlake.pipelines.lake_writer import BatchWriter

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


def stage(writer: BatchWriter, batch: int, table: pa.Table, day: str = DAY) -> Path:
    """What the ingest's Spark write leaves in staging: part files under date=/hour=."""
    staged = writer.staging(batch)
    for h in sorted(set(table.column("hour").to_pylist())):
        part = staged / f"date={day}" / f"hour={h}"
        part.mkdir(parents=True)
        rows = table.filter(pa.compute.equal(table.column("hour"), h)).drop_columns(["hour"])
        pq.write_table(rows, part / "part-00000.zstd.parquet", compression="zstd")
    return staged


def writer_for(cfg) -> BatchWriter:
    from flowlake.pipelines import ingest

    stream = next(s for s in ingest.streams(cfg) if s.table == "flows")
    return ingest.writer_for(cfg, stream)[0]


def lake_rows(cfg) -> list[tuple]:
    import duckdb

    glob = str(cfg.lake / "flows" / "**" / "*.parquet")
    return duckdb.sql(f"SELECT source_file, file_seq FROM read_parquet('{glob}', hive_partitioning = true)").fetchall()


def test_compaction_keeps_exactly_once_with_replays_and_late_batches(home):
    cfg = home
    w = writer_for(cfg)
    expected = 0
    for b in range(6):  # six finished batches over hours 0-2
        t = batch_table(b, [0, 1, 2], 500)
        w.publish(b, stage(w, b, t), {"rows": t.num_rows})
        expected += t.num_rows
    # Batch 6 died mid-move: its .pending marker lists the files it had placed, no done-marker.
    t6 = batch_table(6, [1], 300)
    staged = stage(w, 6, t6)
    src = next(staged.rglob("*.parquet"))
    rel = Path(f"date={DAY}") / "hour=1" / "b000000000006-00000.zstd.parquet"
    (w.state_dir / "000000000006.pending").write_text(json.dumps([str(rel)]))
    os.replace(src, w.table_dir / rel)
    assert len(lake_rows(cfg)) == expected + 300

    results = hour_close.run(cfg, date=DAY, settle=False, rollups=False)
    assert sorted(r["hour"] for r in results) == [0, 1, 2]
    h1 = w.table_dir / f"date={DAY}" / "hour=1"
    names = sorted(p.name for p in h1.glob("*.parquet"))
    assert rel.name in names and all(compact.COMPACT_FILE.match(n) for n in names if n != rel.name), names
    assert {r["hour"]: r["carried"] for r in results} == {0: 0, 1: 1, 2: 0}
    assert len(lake_rows(cfg)) == expected + 300

    # The ingest restarts: batch 6 is replayed (its undo deletes the carried file), and
    # batch 3, already done, is recognised by its marker and not written again.
    assert w.already_done(3) and not w.already_done(6)
    w.publish(6, stage(w, 6, t6), {"rows": t6.num_rows})
    expected += t6.num_rows
    rows = lake_rows(cfg)
    assert len(rows) == expected and len(set(rows)) == expected

    # A late batch for the compacted hour 2 lands beside its files and reopens it.
    late = batch_table(7, [2], 200)
    w.publish(7, stage(w, 7, late), {"rows": late.num_rows})
    expected += late.num_rows
    hours = {h.hour: h for h in compact.hours(w.table_dir, DAY)}
    assert hours[2].needs_compaction() and not hours[0].needs_compaction()
    again = hour_close.run(cfg, date=DAY, settle=False, rollups=False)
    assert sorted(r["hour"] for r in again) == [1, 2]  # hour 1 held batch 6's new file
    rows = lake_rows(cfg)
    assert len(rows) == expected and len(set(rows)) == expected
    assert all(compact.COMPACT_FILE.match(p.name) for p in w.table_dir.rglob("*.parquet"))
    state = hour_close.status(cfg)
    assert state["hours_compacted"] == 3 and state["hours_waiting"] == 0 and state["rows"] == expected


def test_closed_hours_wait_to_settle(home):
    cfg = home
    w = writer_for(cfg)
    t = batch_table(0, [5, 6], 100)
    w.publish(0, stage(w, 0, t), {"rows": t.num_rows})
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


def _lake_with_hours(cfg) -> tuple[BatchWriter, int, Path]:
    """8 finished batches over hours 0-3 and one unfinished batch in hour 2; (writer, rows, unfinished file)."""
    w = writer_for(cfg)
    expected = 0
    for b in range(8):
        t = batch_table(b, [0, 1, 2, 3], 400)
        w.publish(b, stage(w, b, t), {"rows": t.num_rows})
        expected += t.num_rows
    unfinished = w.table_dir / f"date={DAY}" / "hour=2" / "b000000000099-00000.zstd.parquet"
    pq.write_table(batch_table(99, [2], 150).drop_columns(["hour"]), unfinished)
    return w, expected + 150, unfinished


def _swap_all(cfg, w) -> int:
    s = compact.Settings.from_config(cfg)
    return sum(1 for h in compact.hours(w.table_dir, DAY)
               if compact.compact_hour(cfg, w.table_dir, h, w.already_done, s, force=True))


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
    assert len(list((cfg.lake / ".retired" / "flows").iterdir())) == 4  # the old folders, kept aside
    with pytest.raises(Exception, match="FileNotFound|does not exist"):
        plain.count()  # what every reader did before: the listed files are gone
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
    assert not any((cfg.lake / ".snapshots").iterdir())  # closed snapshots leave nothing
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
    assert unfinished.exists()  # carried over under its own name, every time


def test_retired_folders_and_dead_snapshots_are_bounded(home):
    """Swapped-out folders go after [compaction] retired_grace_minutes (a compactor pass),
    snapshots of dead processes at the next pass; status shows what is kept."""
    import subprocess

    from flowlake.pipelines import lake_snapshot

    cfg = home
    w, _, _ = _lake_with_hours(cfg)
    assert _swap_all(cfg, w) == 4
    retired = cfg.lake / ".retired" / "flows"
    assert len(list(retired.iterdir())) == 4
    proc = subprocess.Popen(["true"])  # a pid that has exited
    proc.wait()
    orphan = lake_snapshot.root(cfg.lake) / f"{proc.pid}-feedfacecafe" / "g1"
    orphan.mkdir(parents=True)
    live = lake_snapshot.Snapshot(cfg.lake)
    assert live.files(cfg.lake / "flows" / f"date={DAY}")
    hour_close.run(cfg, date=DAY, rollups=False)  # within the grace: kept
    assert len(list(retired.iterdir())) == 4 and not orphan.exists() and live.path.exists()
    assert hour_close.status(cfg)["retired"]["folders"] == 4
    hour_close.run(cfg, date=DAY, rollups=False, now=time.time() + cfg.compaction.retired_grace_minutes * 60 + 1)
    assert not any(retired.iterdir()) and hour_close.status(cfg)["retired"]["folders"] == 0
    assert live.path.exists()  # a live reader's snapshot stays, whatever its age
    live.close()
    assert not live.path.exists()
