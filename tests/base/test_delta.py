"""Delta Lake tables (flowlake/base/delta.py, issue 38) with the real pieces: delta-rs
writes, DuckDB's delta extension loaded offline from its package, Spark with delta-spark.

What the lake's switch relies on: a replayed micro-batch is a no-op; DuckDB, deltalake and
Spark count the same rows; an hour replaced (sorted, as the compactor writes it) while
plain outside readers loop never gives a read that fails or counts wrong; retention's
DELETE + VACUUM; an older version stays readable (time travel) until VACUUM."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from flowlake.base import delta, spark
from flowlake.pipelines import compact
from flowlake.pipelines.retention import is_expired

DAY = "2026-11-20"
T0 = int(dt.datetime(2026, 11, 20, tzinfo=dt.UTC).timestamp() * 1000)
PARTS = ["date", "hour"]
APP = "ingest-flows"


def batch(seed: int, hours: list[int], rows_per_hour: int, day: str = DAY) -> pa.Table:
    """Flow-like rows of one micro-batch, unsorted, in `hours` of `day`."""
    rng = np.random.default_rng(seed)
    n = rows_per_hour * len(hours)
    hour = np.repeat(np.array(hours, np.int32), rows_per_hour)
    start = int(dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC).timestamp() * 1000)
    ts = start + hour.astype(np.int64) * 3_600_000 + rng.integers(0, 3_600_000, n)
    return pa.table({
        "time_start": pa.array(ts, pa.timestamp("ms", tz="UTC")),
        "exporter": pa.array(rng.choice(["127.0.0.2", "127.0.0.3"], n)),
        "src_addr": pa.array([f"10.0.{a}.{b}" for a, b in rng.integers(0, 255, (n, 2))]),
        "dst_port": pa.array(rng.choice([53, 80, 443], n).astype(np.int32)),
        "bytes": pa.array(rng.integers(40, 100_000, n)),
        "source_file": pa.array([f"batch{seed}"] * n),
        "file_seq": pa.array(np.arange(n, dtype=np.int64)),
        "date": pa.array([day] * n),
        "hour": pa.array(hour),
    })


def totals(table: pa.Table) -> tuple[int, int]:
    return table.num_rows, pc.sum(table.column("bytes")).as_py() or 0


@pytest.fixture
def con():
    c = duckdb.connect()
    delta.duckdb_load_delta(c)
    yield c
    c.close()


def duck_totals(c, path: Path) -> tuple[int, int]:
    n, b = c.execute(f"SELECT count(*), sum(bytes) FROM delta_scan('{path}')").fetchone()
    return n, b or 0


def test_duckdb_loads_delta_from_the_package_file(tmp_path, con):
    path = delta.duckdb_extension_file(duckdb.__version__)
    assert path.is_file() and path.name == "delta.duckdb_extension"
    loaded = con.execute("SELECT loaded FROM duckdb_extensions() WHERE extension_name = 'delta'").fetchone()
    assert loaded == (True,)
    t = batch(1, [0, 1], 50)
    assert delta.append_batch(tmp_path / "flows", t, APP, 0, partition_by=PARTS)
    assert duck_totals(con, tmp_path / "flows") == totals(t)
    # a DuckDB without a build of the extension: the error names the version and what to install
    with pytest.raises(delta.DeltaSetupError, match=r"DuckDB 0\.0\.1 .*duckdb-extension-delta==0\.0\.1"):
        delta.duckdb_extension_file("v0.0.1")


def test_a_replayed_batch_is_a_no_op(tmp_path, con):
    table = tmp_path / "flows"
    batches = [batch(b, [b % 3, (b + 1) % 3], 200) for b in range(5)]
    assert [delta.append_batch(table, t, APP, b, partition_by=PARTS) for b, t in enumerate(batches)] == [True] * 5
    want = totals(pa.concat_tables(batches))
    # the ingest restarts and replays batches the table already holds: nothing is written
    assert not delta.append_batch(table, batches[4], APP, 4, partition_by=PARTS)
    assert not delta.append_batch(table, batches[2], APP, 2, partition_by=PARTS)
    dt_ = DeltaTable(str(table))
    assert dt_.version() == 4 and dt_.transaction_version(APP) == 4
    assert totals(dt_.to_pyarrow_table()) == want
    assert duck_totals(con, table) == want
    # a long-running writer keeps the table open: the same rules, the log read incrementally
    kept = DeltaTable(str(table))
    more = batch(5, [1], 100)
    assert delta.append_batch(kept, more, APP, 5) and kept.version() == 5
    assert not delta.append_batch(table, more, APP, 5)  # another process replays it: no-op
    assert delta.append_batch(table, batches[1], APP, 6)  # another process moves on ...
    assert not delta.append_batch(kept, batches[1], APP, 6)  # ... and the kept handle sees it
    want = (want[0] + more.num_rows + batches[1].num_rows, want[1] + totals(more)[1] + totals(batches[1])[1])
    assert duck_totals(con, table) == want
    # another writer (the quarantine) has its own sequence in the same table
    assert delta.committed_version(table, "ingest-quarantine") is None
    stream = pa.RecordBatchReader.from_batches(batches[0].schema, batches[0].to_batches(max_chunksize=100))
    assert delta.append_batch(table, stream, "ingest-quarantine", 0, partition_by=PARTS)  # a stream: read whole
    assert duck_totals(con, table)[0] == want[0] + batches[0].num_rows
    with pytest.raises(ValueError, match="batch version -1"):
        delta.append_batch(table, batches[0], APP, -1)


def test_racing_writers_of_one_batch_commit_it_once(tmp_path):
    """Two copies of the ingest (a stale one not yet dead) replaying the same batch:
    one commit, whatever the timing (also when the first batch creates the table)."""
    t = batch(7, [0], 100)
    table = tmp_path / "flows"
    committed = 0
    for b in range(6):
        results: list[bool] = []
        start = threading.Barrier(3)

        def write(b=b, results=results, start=start):
            start.wait()
            results.append(delta.append_batch(table, t, APP, b, partition_by=PARTS))

        threads = [threading.Thread(target=write) for _ in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sorted(results) == [False, False, True], (b, results)
        committed += 1
    assert DeltaTable(str(table)).count() == committed * t.num_rows


def test_replace_partition_refuses_rows_of_another_partition(tmp_path):
    table = tmp_path / "flows"
    delta.append_batch(table, batch(1, [0, 1], 10), APP, 0, partition_by=PARTS)
    with pytest.raises(ValueError, match=r"10 of 20 rows are not in partition date = '2026-11-20' AND hour = 0"):
        delta.replace_partition(table, batch(2, [0, 1], 10), {"date": DAY, "hour": 0}, read_version=0)
    assert DeltaTable(str(table)).version() == 0  # nothing written
    with pytest.raises(ValueError, match="plain name"):
        delta.partition_predicate({"date; drop": DAY})


SORT = ("exporter", "dst_port", "time_start")


def sorted_hour_files(table: Path, hour: int, stamp: int) -> tuple[int, list[Path]]:
    """The hour's rows at the newest version rewritten as the compactor writes a closed
    hour (sorted, its encodings and row groups) into the table's partition folder
    (invisible until committed); (the version read, the files)."""
    snap = DeltaTable(str(table))
    rows = snap.to_pyarrow_table(filters=[("date", "=", DAY), ("hour", "=", hour)]).drop_columns(PARTS)
    rows = rows.sort_by([(c, "ascending") for c in SORT])
    settings = compact.Settings(settle_s=0, target_bytes=64 << 20, row_group_rows=4096, zstd_level=3, sort=SORT)
    reader = pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches(max_chunksize=1000))
    files = compact.write_sorted(reader, table / f"date={DAY}" / f"hour={hour}", stamp, settings, rows_per_file=4096)
    return snap.version(), files


def compact_hour(table: Path, hour: int, stamp: int) -> list[Path]:
    """sorted_hour_files, committed as the hour's replacement of the version read."""
    version, files = sorted_hour_files(table, hour, stamp)
    delta.commit_partition_files(table, files, {"date": DAY, "hour": hour},
                                 DeltaTable(str(table), version=version).schema().to_arrow(), PARTS,
                                 read_version=version)
    return files


def test_a_late_batch_during_a_replace_is_never_lost(tmp_path, con):
    """A batch lands in an hour after the compactor read it and before it committed: the
    compactor's own files replace only the files it read (the late batch's rows stay);
    delta-rs' replace on the version read fails cleanly and changes nothing."""
    table = tmp_path / "flows"
    first, late = batch(1, [0], 500), batch(2, [0], 70)
    delta.append_batch(table, first, APP, 0, partition_by=PARTS)
    version, files = sorted_hour_files(table, 0, stamp=1)  # read at version 0, files written
    delta.append_batch(table, late, APP, 1)  # the late batch commits meanwhile
    delta.commit_partition_files(table, files, {"date": DAY, "hour": 0},
                                 DeltaTable(str(table)).schema().to_arrow(), PARTS, read_version=version)
    both = totals(pa.concat_tables([first, late]))
    assert duck_totals(con, table) == both
    names = sorted(Path(u).name for u in DeltaTable(str(table)).file_uris())
    assert len(names) == 2 and names[0].startswith("c") and names[1].startswith("part-"), names
    # delta-rs writes the replacement itself: the late batch makes the commit fail, nothing changes
    snap = DeltaTable(str(table))
    rows = snap.to_pyarrow_table(filters=[("hour", "=", 0)])
    delta.append_batch(table, batch(3, [0], 30), APP, 2)
    before = DeltaTable(str(table)).version()
    with pytest.raises(CommitFailedError, match="concurrent transaction"):
        delta.replace_partition(table, rows, {"date": DAY, "hour": 0}, read_version=snap.version())
    assert DeltaTable(str(table)).version() == before
    assert duck_totals(con, table)[0] == both[0] + 30


def test_two_compactions_of_one_hour_commit_once(tmp_path, con):
    """Two compactors read the same version of an hour and both write its replacement:
    the second commit is refused (it would remove files the first already removed) and
    the hour keeps its rows once."""
    table = tmp_path / "flows"
    t = batch(4, [0], 600)
    delta.append_batch(table, t, APP, 0, partition_by=PARTS)
    (va, files_a), (vb, files_b) = sorted_hour_files(table, 0, stamp=1), sorted_hour_files(table, 0, stamp=2)
    assert va == vb == 0
    schema = DeltaTable(str(table)).schema().to_arrow()
    delta.commit_partition_files(table, files_a, {"date": DAY, "hour": 0}, schema, PARTS, read_version=va)
    with pytest.raises(CommitFailedError, match="concurrent transaction deleted data"):
        delta.commit_partition_files(table, files_b, {"date": DAY, "hour": 0}, schema, PARTS, read_version=vb)
    assert duck_totals(con, table) == totals(t)
    assert sorted(Path(u).name for u in DeltaTable(str(table)).file_uris()) == sorted(f.name for f in files_a)
    # the loser's files are referenced by no version: a plain VACUUM keeps them, a full one removes them
    assert all(f.exists() for f in files_b)
    assert not any(Path(g).name in {f.name for f in files_b} for g in delta.vacuum(table, 0))
    gone = {Path(g).name for g in delta.vacuum(table, 0, full=True)}
    assert {f.name for f in files_b} <= gone and not any(f.exists() for f in files_b)
    assert all(f.exists() for f in files_a) and duck_totals(con, table) == totals(t)


DUCK_LOOP = """
import json, sys, time
from pathlib import Path
import duckdb
from flowlake.base import delta
table, stop = sys.argv[1], Path(sys.argv[2])
con = duckdb.connect()
delta.duckdb_load_delta(con)
while not stop.exists():
    t0 = time.time()
    try:
        n, b = con.execute(f"SELECT count(*), sum(bytes) FROM delta_scan('{table}')").fetchone()
    except Exception as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        continue
    print(json.dumps({"t0": t0, "t1": time.time(), "rows": n, "bytes": b}), flush=True)
con.close()
"""


def test_hour_replaced_sorted_while_outside_readers_loop(tmp_path, con):
    """The compactor's job as a table operation: every hour rewritten sorted, again and
    again, while plain outside readers (DuckDB's delta_scan, deltalake) loop. Every read
    sees one version: exact counts and sums, and none fails."""
    table = tmp_path / "flows"
    batches = [batch(b, [0, 1, 2, 3], 1500) for b in range(4)]
    for b, t in enumerate(batches):
        delta.append_batch(table, t, APP, b, partition_by=PARTS)
    want = totals(pa.concat_tables(batches))
    stop = threading.Event()
    stop_file = tmp_path / "stop"
    reads: dict[str, list] = {"duckdb": [], "deltalake": []}
    errors: list[str] = []

    def duck_reader():  # a plain DuckDB in a process of its own, as an analyst's would be
        proc = subprocess.run([sys.executable, "-c", DUCK_LOOP, str(table), str(stop_file)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode:
            errors.append(f"duckdb: exit {proc.returncode}: {proc.stderr[-2000:]}")
        for line in proc.stdout.splitlines():
            got = json.loads(line)
            if "error" in got:
                errors.append(f"duckdb: {got['error']}")
            else:
                reads["duckdb"].append((got["t0"], got["t1"], (got["rows"], got["bytes"])))

    def deltalake_reader():
        try:
            while not stop.is_set():
                t0 = time.time()
                got = totals(DeltaTable(str(table)).to_pyarrow_table(columns=["bytes"]))
                reads["deltalake"].append((t0, time.time(), got))
        except Exception as exc:  # noqa: BLE001 - recorded: the test fails on any
            errors.append(f"deltalake: {exc}")

    readers = [threading.Thread(target=duck_reader), threading.Thread(target=deltalake_reader)]
    for th in readers:
        th.start()
    commits: list[float] = []
    time.sleep(1.0)  # the DuckDB process is reading
    try:
        for rnd in range(3):
            for hour in range(4):
                if (rnd + hour) % 2:  # the compactor's own files, committed as the partition's content
                    compact_hour(table, hour, stamp=rnd * 10 + hour)
                else:  # delta-rs writes the sorted rows itself
                    snap = DeltaTable(str(table))
                    rows = snap.to_pyarrow_table(filters=[("date", "=", DAY), ("hour", "=", hour)]).sort_by(
                        [(c, "ascending") for c in SORT])
                    delta.replace_partition(table, rows, {"date": DAY, "hour": hour}, read_version=snap.version())
                commits.append(time.time())
    finally:
        stop.set()
        stop_file.touch()
        for th in readers:
            th.join()
    assert not errors, errors
    for name, got in reads.items():
        assert got, f"{name}: no read finished"
        wrong = [r for r in got if r[2] != want]
        assert not wrong, (name, wrong[:3], want)
        spanning = sum(1 for t0, t1, _ in got if any(t0 < c < t1 for c in commits))
        print(f"{name}: {len(got)} reads, {spanning} spanning a commit, all {want[0]} rows")
    assert len(commits) == 12
    assert sum(1 for t0, t1, _ in reads["duckdb"] + reads["deltalake"] if any(t0 < c < t1 for c in commits)) > 0
    final = DeltaTable(str(table))
    assert final.version() == 3 + 12
    # each hour now holds only its last rewrite's files: delta-rs' one file, or the compactor's
    # c-files of 4096 rows (6000 rows: two)
    by_hour: dict[str, list[str]] = {}
    for u in final.file_uris():
        by_hour.setdefault(Path(u).parent.name, []).append(Path(u).name)
    for hour, names in by_hour.items():
        last_round_compactor = (2 + int(hour[5:])) % 2 == 1
        assert (len(names), all(n.startswith("c") for n in names)) == ((2, True) if last_round_compactor else
                                                                     (1, False)), (hour, names)
    assert duck_totals(con, table) == want


def test_retention_deletes_expired_days_and_vacuum_frees_them(tmp_path, con):
    """retention's rule ([retention] flows_days) picks the days; DELETE removes them in one
    commit; their files stay for readers of older versions until VACUUM past its retention."""
    table = tmp_path / "flows"
    days = ["2026-10-01", "2026-10-02", "2026-11-20"]
    tables = {d: batch(i, [0, 5], 100, day=d) for i, d in enumerate(days)}
    for i, d in enumerate(days):
        delta.append_batch(table, tables[d], APP, i, partition_by=PARTS)
    expired = [d for d in days if is_expired(dt.date.fromisoformat(d), 30, today=dt.date(2026, 11, 21))]
    assert expired == ["2026-10-01", "2026-10-02"]
    before = DeltaTable(str(table)).version()
    removed = delta.delete_partitions(table, [{"date": d} for d in expired])
    assert removed == sum(tables[d].num_rows for d in expired)
    assert duck_totals(con, table) == totals(tables["2026-11-20"])
    # the files are still there: the version before the DELETE reads whole
    old = DeltaTable(str(table), version=before).to_pyarrow_table()
    assert totals(old) == totals(pa.concat_tables(tables.values()))
    # within the retention (1 h) VACUUM deletes nothing; past it, exactly the expired days' files
    assert delta.vacuum(table, retain_hours=1) == []
    gone = delta.vacuum(table, retain_hours=0)
    assert sorted({g.split("/")[0] for g in gone}) == [f"date={d}" for d in expired]
    assert len(gone) == 4  # two days x two hours, one file each
    assert not any((table / g).exists() for g in gone)
    assert duck_totals(con, table) == totals(tables["2026-11-20"])
    assert totals(DeltaTable(str(table)).to_pyarrow_table()) == totals(tables["2026-11-20"])
    with pytest.raises(ValueError, match="VACUUM retention -1"):
        delta.vacuum(table, retain_hours=-1)


def test_time_travel_reads_an_older_version(tmp_path, con):
    table = tmp_path / "flows"
    first, late = batch(1, [0, 1], 300), batch(2, [1], 50)
    delta.append_batch(table, first, APP, 0, partition_by=PARTS)
    delta.append_batch(table, late, APP, 1, partition_by=PARTS)  # a late import
    assert totals(DeltaTable(str(table), version=0).to_pyarrow_table()) == totals(first)
    con.execute(f"ATTACH '{table}' AS v0 (TYPE delta, VERSION 0)")
    assert con.execute("SELECT count(*), sum(bytes) FROM v0").fetchone() == totals(first)
    assert duck_totals(con, table) == totals(pa.concat_tables([first, late]))
    # the file list of a version (what the Go kernel would be handed) reads the same rows
    version, files = delta.version_files(table, 0, [("hour", "=", "1")])
    assert version == 0 and files and all("/hour=1/" in f for f in files)
    listed = con.execute(f"SELECT count(*) FROM read_parquet({files!r})").fetchone()[0]
    assert listed == int(pc.sum(pc.equal(first.column("hour"), 1)).as_py())


def test_file_stats_let_readers_skip_a_committed_file(tmp_path, con):
    """The compactor's own files carry Delta statistics from their footers: a filter on
    the sort column reads them (and skips them, by the stats) exactly."""
    table = tmp_path / "flows"
    t = batch(3, [2], 2000)
    delta.append_batch(table, t, APP, 0, partition_by=PARTS)
    files = compact_hour(table, 2, stamp=1)
    stats = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    assert len(stats) == len(files) and all(s["num_records"] for s in stats)
    assert sum(s["num_records"] for s in stats) == t.num_rows
    assert all(s["min.exporter"] <= s["max.exporter"] for s in stats)
    cut = T0 + 2 * 3_600_000 + 1_800_000
    got = con.execute(f"SELECT count(*) FROM delta_scan('{table}') WHERE time_start < epoch_ms({cut})").fetchone()[0]
    assert got == int(pc.sum(pc.less(t.column("time_start").cast(pa.int64()), cut)).as_py())
    with pytest.raises(ValueError, match="not in the partition's folder"):
        delta.commit_partition_files(table, [tmp_path / "x.parquet"], {"date": DAY, "hour": 2},
                                     DeltaTable(str(table)).schema().to_arrow(), PARTS, read_version=1)


def test_spark_conf_has_delta_only_when_asked(cfg):
    plain = spark.spark_conf("t", "local[1]", cfg)
    assert "spark.sql.extensions" not in plain and "delta-spark" not in plain["spark.jars"]
    if not any(delta.JARS_DIR.glob("delta-spark_*.jar")):
        with pytest.raises(delta.DeltaSetupError, match=r"no delta-spark jar in .*make setup"):
            spark.spark_conf("t", "local[1]", cfg, delta=True)
        return
    on = spark.spark_conf("t", "local[1]", cfg, delta=True)
    assert on["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert on["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    jars = [j for j in on["spark.jars"].split(",") if j]
    assert jars[:-2] == [j for j in plain["spark.jars"].split(",") if j]
    assert sorted(Path(j).name for j in jars if "/delta/" in j) == ["delta-spark_2.13-4.0.0.jar",
                                                                   "delta-storage-4.0.0.jar"]


SPARK_READ = """
import json, sys
from flowlake.base import spark as factory
s = factory.session("delta-test", master="local[1]", delta=True)
path = sys.argv[1]
df = s.read.format("delta").load(path)
old = s.read.format("delta").option("versionAsOf", 0).load(path)
row = df.selectExpr("count(*) AS n", "sum(bytes) AS b", "unix_millis(min(time_start)) AS t").first()
hours = sorted((r[0], r[1]) for r in df.groupBy("hour").count().collect())
s.sql(f"DELETE FROM delta.`{path}` WHERE hour = 0")
migrated = s.read.format("delta").load(sys.argv[2])
by_date = sorted((r[0], r[1]) for r in migrated.groupBy("date").count().collect())
m = migrated.selectExpr("sum(bytes) AS b", "unix_millis(min(time_start)) AS t", "count(src_vlan) AS v").first()
print(json.dumps({"rows": row.n, "bytes": row.b, "first": row.t, "v0": old.count(), "hours": hours,
                  "after_delete": s.read.format("delta").load(path).count(),
                  "migrated": by_date, "migrated_bytes": m.b, "migrated_first": m.t, "migrated_vlan": m.v}))
s.stop()
"""


@pytest.mark.integration
def test_spark_reads_the_table_as_duckdb_and_deltalake_do(tmp_path, con, flowlake_home):
    """Spark local with delta-spark (its own JVM: the run's shared session has no Delta)
    counts what DuckDB and deltalake count, also over the compactor's own files and over a
    lake of today's layout migrated in place, reads version 0, and its DELETE is seen by both."""
    if not any(delta.JARS_DIR.glob("delta-spark_*.jar")):
        pytest.fail(f"no delta-spark jar in {delta.JARS_DIR}: run `make setup`")
    table = tmp_path / "flows"
    first, second = batch(1, [0, 1, 2], 400), batch(2, [1, 3], 300)
    delta.append_batch(table, first, APP, 0, partition_by=PARTS)
    delta.append_batch(table, second, APP, 1, partition_by=PARTS)
    both = pa.concat_tables([first, second])
    # hour 1 as the compactor would leave it: its own sorted files (millisecond timestamps,
    # sorted dictionaries) committed as the partition's content
    compact_hour(table, 1, stamp=1)
    duck_before = duck_totals(con, table)
    # and a lake of today's layout migrated in place (INT96 ingest files, ms compacted files)
    migrated = tmp_path / "old" / "flows"
    by_date = old_layout(migrated)
    delta.convert_in_place(migrated, [("date", "string"), ("hour", "integer")])
    m_bytes, m_first = con.execute(
        f"SELECT sum(bytes), epoch_ms(min(time_start)) FROM delta_scan('{migrated}')").fetchone()
    proc = subprocess.run([sys.executable, "-c", SPARK_READ, str(table), str(migrated)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (got["rows"], got["bytes"]) == totals(both) == duck_before
    assert got["v0"] == first.num_rows
    assert got["first"] == pc.min(both.column("time_start")).value  # ms files read as the same instants
    want_hours = sorted(zip(*np.unique(both.column("hour").to_numpy(), return_counts=True), strict=True))
    assert [tuple(h) for h in got["hours"]] == [(int(h), int(n)) for h, n in want_hours]
    hour0 = int(pc.sum(pc.equal(both.column("hour"), 0)).as_py())
    assert got["after_delete"] == both.num_rows - hour0
    assert DeltaTable(str(table)).count() == both.num_rows - hour0
    assert duck_totals(con, table)[0] == both.num_rows - hour0
    assert [tuple(d) for d in got["migrated"]] == sorted(by_date.items())
    assert (got["migrated_bytes"], got["migrated_first"], got["migrated_vlan"]) == (m_bytes, m_first, 42 + 43)


def old_layout(root: Path) -> dict[str, int]:
    """A lake/flows folder as flowlake writes it today: an ingest batch file (INT96
    timestamps), an hour's compacted file (ms, a column the older files lack), two days.
    Returns the rows per date."""
    rows: dict[str, int] = {}
    for i, (day, hour, kind) in enumerate([("2026-11-19", 23, "ingest"), ("2026-11-20", 0, "ingest"),
                                          ("2026-11-20", 0, "compacted"), ("2026-11-20", 1, "compacted")]):
        t = batch(10 + i, [hour], 40 + i, day=day).drop_columns(PARTS)
        part = root / f"date={day}" / f"hour={hour}"
        part.mkdir(parents=True, exist_ok=True)
        if kind == "ingest":
            pq.write_table(t, part / f"b{i:012d}-00000.zstd.parquet", use_deprecated_int96_timestamps=True)
        else:
            t = t.append_column("src_vlan", pa.array([7] * t.num_rows, pa.int32()))
            pq.write_table(t, part / f"c{i:013d}-000.parquet")
        rows[day] = rows.get(day, 0) + t.num_rows
    return rows


def test_convert_in_place_keeps_every_row_and_is_safe_to_rerun(tmp_path, con):
    """`flowlake lake migrate`'s step per table: today's folder becomes a Delta table in
    place, counts equal per date, the ingest's last batch recorded, a rerun changes
    nothing, and today's glob readers still read the folder as before."""
    root = tmp_path / "flows"
    want = old_layout(root)
    glob = f"read_parquet('{root}/**/*.parquet', hive_partitioning = true, union_by_name = true)"
    before = con.execute(f"SELECT count(*), sum(bytes) FROM {glob}").fetchone()
    got = delta.convert_in_place(root, [("date", "string"), ("hour", "integer")], {APP: 41})
    assert got["converted"] and got["by"] == want and got["files"] == 4 and got["version"] == 0
    table = DeltaTable(str(root))
    assert table.transaction_version(APP) == 41
    assert not delta.append_batch(table, batch(1, [0], 5), APP, 41)  # an old batch replayed: a no-op
    assert table.metadata().configuration.get("delta.enableDeletionVectors") == "false"
    assert duck_totals(con, root) == before
    assert con.execute(f"SELECT count(*), sum(bytes) FROM {glob}").fetchone() == before  # old readers unaffected
    vlan = con.execute(f"SELECT count(src_vlan) FROM delta_scan('{root}')").fetchone()[0]
    assert vlan == 42 + 43  # the column the ingest files lack reads null there
    again = delta.convert_in_place(root, [("date", "string"), ("hour", "integer")], {APP: 41})
    assert not again["converted"] and again["by"] == want and again["version"] == 0
    # a file landed the old way after the conversion: the rerun says so instead of passing
    pq.write_table(batch(99, [2], 10).drop_columns(PARTS), root / "date=2026-11-20" / "hour=0" / "late.parquet")
    day = want["2026-11-20"]
    stale = rf"date=2026-11-20: {day + 10} in the files, {day} in the table.*without a commit"
    with pytest.raises(ValueError, match=stale):
        delta.convert_in_place(root, [("date", "string"), ("hour", "integer")])


def test_convert_in_place_refuses_hidden_files(tmp_path):
    root = tmp_path / "flows"
    old_layout(root)
    hidden = root / "date=2026-11-20" / "hour=0" / ".b000000000099-00000.parquet"
    hidden.write_bytes((root / "date=2026-11-20" / "hour=1" / "c0000000000003-000.parquet").read_bytes())
    with pytest.raises(ValueError, match=r"1 Parquet files under hidden paths .*\.b000000000099"):
        delta.convert_in_place(root, [("date", "string"), ("hour", "integer")])
    assert not (root / "_delta_log").exists()
    with pytest.raises(ValueError, match="no such folder"):
        delta.convert_in_place(tmp_path / "nothing", [("date", "string")])
