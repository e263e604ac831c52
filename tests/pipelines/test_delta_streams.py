"""lake/exporter_health, active and experiments as Delta tables (issue 38, step 4): the ingest's micro-batches
(Spark's staged files, INT96 times) land in one commit each with the transaction
(ingest-exporter_health, batch id), a replay is a no-op, a later column is a schema change;
readers (the seam, `flowlake faults`' check, Superset's view) read one version; retention
expires days by DELETE + VACUUM; `flowlake lake migrate` converts a folder of the older
layout (counts before and after, the last done batch and the status totals kept, rerun-safe)
and `flowlake up` asks for it first."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import deltalake
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowlake import superset_cli
from flowlake.base import config, delta
from flowlake.collectors.lab.report import experiments_source
from flowlake.faults import lake_health
from flowlake.jobs import pinger_regions
from flowlake.lake_cli import check_up
from flowlake.pipelines import ingest, lake_migrate
from flowlake.pipelines.lake_read import lake_files
from flowlake.pipelines.lake_writer import DELTA_STREAMS, DeltaBatchWriter, writer_for

FLOWLAKE = str(Path(sys.executable).with_name("flowlake"))
TODAY = dt.datetime.now(dt.UTC).date()
TABLE = "exporter_health"


def day(n: int) -> str:
    return (TODAY - dt.timedelta(days=n)).isoformat()


def _env(home: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWLAKE_")}
    return {**env, "FLOWLAKE_HOME": str(home), "FLOWLAKE_KAFKA_PORT": "1", **extra}


@pytest.fixture
def home_cfg(tmp_path):
    return config.load(env=_env(tmp_path))


def _stage(staged: Path, rows_by_day: dict[str, int], start: int = 0, extra: bool = False) -> int:
    """What Spark's `good.write.partitionBy("date").parquet(staged)` leaves: a part file per
    day folder (INT96 times, as Spark writes them), plus _SUCCESS. Returns the rows."""
    n_all = 0
    for d, n in rows_by_day.items():
        part = staged / f"date={d}"
        part.mkdir(parents=True, exist_ok=True)
        t = dt.datetime.fromisoformat(d).replace(tzinfo=dt.UTC)
        cols = {"interval_start": pa.array([t + dt.timedelta(minutes=i) for i in range(n)], pa.timestamp("us", "UTC")),
                "exporter": pa.array(["127.0.0.2"] * n), "observation_domain": pa.array([0] * n, pa.int64()),
                "version": pa.array([9] * n, pa.int32()), "flows": pa.array(range(start, start + n), pa.int64()),
                "source_file": pa.array([f"{d}/nfcapd.{start + i}" for i in range(n)])}
        if extra:
            cols["sequence_failures"] = pa.array([1] * n, pa.int64())
        pq.write_table(pa.table(cols), part / "part-00000-c000.snappy.parquet", use_deprecated_int96_timestamps=True)
        n_all += n
    (staged / "_SUCCESS").touch()
    return n_all


def _publish(w: DeltaBatchWriter, batch: int, rows_by_day: dict[str, int], start: int = 0, extra: bool = False) -> int:
    n = _stage(w.staging(batch), rows_by_day, start, extra)
    w.publish(batch, w.staging_dir / f"b{batch:012d}", {"rows": n, "quarantined": 0})
    return n


def _counts(table: Path) -> dict[str, int]:
    con = duckdb.connect()
    try:
        delta.duckdb_load_delta(con)
        return dict(con.execute(f"SELECT date, count(*) FROM delta_scan('{table}') GROUP BY 1").fetchall())
    finally:
        con.close()


def test_batches_commit_once_and_readers_read_one_version(home_cfg):
    cfg = home_cfg
    stream = next(s for s in ingest.streams(cfg) if s.table == TABLE)
    w, _quarantine = writer_for(cfg, stream)
    assert isinstance(w, DeltaBatchWriter)
    table = w.table_dir
    assert not w.already_done(0)
    a = _publish(w, 0, {day(1): 5, day(0): 3})
    assert w.already_done(0) and not w.already_done(1)
    assert _counts(table) == {day(1): 5, day(0): 3}
    # a replay of batch 0 (Spark reruns it after a crash before its checkpoint's commit): a no-op
    _publish(w, 0, {day(1): 5, day(0): 3})
    assert _counts(table) == {day(1): 5, day(0): 3}
    # a later batch with a new column: a schema change of the table; older rows read null
    b = _publish(w, 1, {day(0): 4}, start=100, extra=True)
    t = deltalake.DeltaTable(str(table))
    assert t.transaction_version("ingest-exporter_health") == 1
    assert "sequence_failures" in t.schema().to_arrow().names
    conf = t.metadata().configuration
    assert conf["delta.enableDeletionVectors"] == "false" and conf["delta.checkpointInterval"] == "100"
    con = duckdb.connect()
    delta.duckdb_load_delta(con)
    nulls, times = con.execute(f"SELECT count(*) FILTER (WHERE sequence_failures IS NULL), min(interval_start) "
                               f"FROM delta_scan('{table}')").fetchone()
    con.close()
    assert nulls == a
    assert times == dt.datetime.fromisoformat(day(1)).replace(tzinfo=dt.UTC)  # INT96 files: the same instants
    # no staging left, only committed files in the table's folders, totals for `flowlake status`
    assert not list(w.staging_dir.iterdir())
    on_disk = {p.resolve() for p in table.rglob("*.parquet") if "_delta_log" not in p.parts}
    version, files = lake_files(cfg, TABLE)
    assert {Path(f).resolve() for f in files} == on_disk and version == t.version()
    assert ingest.counts(cfg)[TABLE] == {"rows": a + b, "quarantined": 0}
    # readers through the seam: flowlake faults' check sums the current version
    flows, dups = lake_health(cfg.lake)
    assert flows == sum(range(5)) + sum(range(3)) + sum(range(100, 104)) and dups == 0


def test_a_batch_that_died_before_its_commit_is_invisible_and_replays_whole(home_cfg):
    cfg = home_cfg
    w = DeltaBatchWriter(cfg, TABLE)
    _publish(w, 0, {day(0): 2})
    # batch 1's files were moved into the table, then the process died before the commit
    staged = w.staging(1)
    _stage(staged, {day(0): 6}, start=50)
    moved = w.table_dir / f"date={day(0)}" / f"b{1:012d}-00000.zstd.parquet"
    os.replace(next(staged.rglob("*.parquet")), moved)
    assert _counts(w.table_dir) == {day(0): 2}  # no version lists it
    _publish(w, 1, {day(0): 6}, start=50)  # the replay: same name, one commit
    assert _counts(w.table_dir) == {day(0): 8}


def test_retention_deletes_expired_days_and_vacuums(home_cfg):
    cfg = home_cfg
    w = DeltaBatchWriter(cfg, TABLE)
    for i, age in enumerate((200, 100, 1)):  # exporter health keeps [retention] rollup_5m_days (90)
        _publish(w, i, {day(age): 4})
    before = deltalake.DeltaTable(str(w.table_dir)).version()
    dry = subprocess.run([FLOWLAKE, "retention", "--dry-run", "--json"], env=_env(cfg.home_dir),
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    planned = sorted(Path(u["path"]).name for u in json.loads(dry.stdout)["remove"] if u["tier"] == TABLE)
    assert planned == [f"date={day(200)}", f"date={day(100)}"]
    old = [p for p in w.table_dir.glob("date=*/*.parquet") if p.parent.name != f"date={day(1)}"]
    assert len(old) == 2
    got = subprocess.run([FLOWLAKE, "retention", "--json"], env=_env(cfg.home_dir), capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    t = deltalake.DeltaTable(str(w.table_dir))
    assert _counts(w.table_dir) == {day(1): 4}
    assert [h["operation"] for h in t.history() if h["version"] == before + 1] == ["DELETE"]
    assert deltalake.DeltaTable(str(w.table_dir), version=before).to_pyarrow_table().num_rows == 12  # time travel
    assert all(p.exists() for p in old)  # within the grace: readers of the older version keep reading
    again = subprocess.run([FLOWLAKE, "retention", "--json"], capture_output=True, text=True, timeout=120,
                           env=_env(cfg.home_dir, FLOWLAKE_COMPACTION_RETIRED_GRACE_MINUTES="0"))
    assert again.returncode == 0, again.stderr
    assert not any(p.exists() for p in old)  # past it: exactly those files went
    assert _counts(w.table_dir) == {day(1): 4}


def test_migrate_converts_the_older_layout_and_up_asks_for_it(home_cfg):
    cfg = home_cfg
    lake = cfg.lake / TABLE
    state = cfg.path("state", "ingest", TABLE)
    state.mkdir(parents=True)
    n = 0
    for b, d in enumerate((day(3), day(2), day(2))):  # the older writer: files renamed in, done-markers
        part = lake / f"date={d}"
        part.mkdir(parents=True, exist_ok=True)
        _stage(cfg.path("tmp", str(b)), {d: 3 + b}, start=10 * b)
        shutil.move(next(cfg.path("tmp", str(b)).rglob("*.parquet")), part / f"b{b:012d}-00000.zstd.parquet")
        (state / f"{b:012d}.done").write_text(json.dumps({"rows": 3 + b, "quarantined": 0, "files": 1}))
        n += 3 + b
    shutil.rmtree(cfg.path("tmp"))
    assert lake_migrate.needs_migration(cfg, TABLE) and not lake_migrate.needs_migration(cfg, "flows")
    with pytest.raises(RuntimeError, match="lake/exporter_health is a Parquet lake .* run `flowlake lake migrate`"):
        check_up(cfg)
    got = subprocess.run([FLOWLAKE, "lake", "migrate"], env=_env(cfg.home_dir), capture_output=True, text=True,
                         timeout=300)
    assert got.returncode == 0, got.stderr
    assert f"lake/{TABLE}: converted (version 0" in got.stdout and f"{n:,} rows" in got.stdout, got.stdout
    assert f"date={day(2)}: {4 + 5:,} rows" in got.stdout
    check_up(cfg)
    t = deltalake.DeltaTable(str(lake))
    assert t.version() == 0 and t.transaction_version("ingest-exporter_health") == 2
    assert t.metadata().configuration["delta.logRetentionDuration"] == "interval 48 hours"
    assert _counts(lake) == {day(3): 3, day(2): 9}
    assert not list(state.glob("*.done"))
    assert ingest.counts(cfg)[TABLE] == {"rows": n, "quarantined": 0}  # status keeps its totals
    # the stack's writer goes on from there: batch 2 again is a no-op, batch 3 lands
    w = DeltaBatchWriter(cfg, TABLE)
    assert w.already_done(2)
    _publish(w, 3, {day(1): 2}, start=90)
    assert _counts(lake) == {day(3): 3, day(2): 9, day(1): 2}
    again = subprocess.run([FLOWLAKE, "lake", "migrate"], env=_env(cfg.home_dir), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0 and "already a Delta table" in again.stdout, again.stderr
    assert deltalake.DeltaTable(str(lake)).version() == 1


def test_superset_view_reads_the_table(home_cfg):
    cfg = home_cfg
    bundle = superset_cli._bundle_module()
    w = DeltaBatchWriter(cfg, TABLE)
    _publish(w, 0, {day(0): 2})
    assert bundle.table_source(cfg.lake, TABLE) == f"delta_scan('{cfg.lake / TABLE}')"


@pytest.mark.parametrize("name", DELTA_STREAMS)
def test_every_delta_stream_commits_a_batch_once(tmp_path, name):
    cfg = config.load(env=_env(tmp_path))
    stream = next(s for s in ingest.streams(cfg) if s.table == name)
    w, _quarantine = writer_for(cfg, stream)
    assert isinstance(w, DeltaBatchWriter) and w.app_id == f"ingest-{name}" and name in lake_migrate.TABLES
    n = _publish(w, 7, {day(1): 3, day(0): 2})
    _publish(w, 7, {day(1): 3, day(0): 2})  # a replay
    assert _counts(w.table_dir) == {day(1): 3, day(0): 2} and n == 5
    assert deltalake.DeltaTable(str(w.table_dir)).transaction_version(w.app_id) == 7
    assert ingest.counts(cfg)[name]["rows"] == 5


def test_readers_of_active_and_experiments_read_the_current_version(tmp_path):
    cfg = config.load(env=_env(tmp_path))
    active = DeltaBatchWriter(cfg, "active")
    exp = DeltaBatchWriter(cfg, "experiments")
    for w in (active, exp):
        staged = w.staging(0)
        for d, hosts in ((day(1), ["a.example", "b.example"]), (day(0), ["c.example", "d.example", "e.example"])):
            part = staged / f"date={d}"
            part.mkdir(parents=True)
            pq.write_table(pa.table({"source": hosts, "destination": ["z.example"] * len(hosts),
                                     "study": ["s"] * len(hosts), "metric": ["rtt"] * len(hosts),
                                     "value": [1.0] * len(hosts)}), part / "part-0.parquet")
        w.publish(0, staged, {"rows": 5})
        # a file in the newest day that no version lists (a batch that died before its commit)
        pq.write_table(pa.table({"source": ["ghost.example"], "destination": ["z.example"], "study": ["s"],
                                 "metric": ["rtt"], "value": [1.0]}), w.table_dir / f"date={day(0)}" / "b9-0.parquet")
    st = pinger_regions.status(cfg)
    assert "error" not in st, st
    assert st["date"] == day(0) and st["hosts_seen"] == 4  # c, d, e, z: not the uncommitted ghost
    src = experiments_source(cfg.lake)
    assert "b9-0.parquet" not in src and "_delta_log" not in src
    assert duckdb.sql(f"SELECT count(*) FROM {src} WHERE study = 's'").fetchone()[0] == 5


@pytest.mark.integration
def test_the_ingests_spark_write_lands_as_one_commit(tmp_path, spark):
    """The handler's own write (ingest.make_batch_handler: with_time_partitions, then
    partitionBy("date").parquet(staged) with zstd), published: Spark's INT96 files and
    _SUCCESS/.crc leftovers become one commit whose rows read as Spark wrote them."""
    from flowlake.pipelines.decode import with_time_partitions  # noqa: PLC0415  (pyspark: this test only)
    from flowlake.schemas import registry  # noqa: PLC0415  (as the handler takes it)

    cfg = config.load(env=_env(tmp_path))
    record = registry()["ExporterHealth"]
    t0 = dt.datetime.fromisoformat(day(1)).replace(hour=23, minute=59, tzinfo=dt.UTC)
    zero = {"timestamp": t0, "string": "", "bigint": 0, "int": 0, "double": 0.0, "boolean": False}
    rows = [{f.name: None if f.nullable else zero[f.dataType.simpleString()] for f in record.spark_schema().fields} | {
        "interval_start": t0 + dt.timedelta(minutes=i), "exporter": "127.0.0.2", "flows": i,
        "source_file": f"nfcapd.{i}"} for i in range(4)]
    df = with_time_partitions(spark.createDataFrame(rows, record.spark_schema()), "interval_start", False)
    w = DeltaBatchWriter(cfg, TABLE)
    staged = w.staging(0)
    df.write.partitionBy("date").option("compression", "zstd").parquet(str(staged))
    w.publish(0, staged, {"rows": 4, "quarantined": 0})
    assert _counts(w.table_dir) == {day(1): 1, day(0): 3}
    con = duckdb.connect()
    delta.duckdb_load_delta(con)
    got = con.execute(f"SELECT min(interval_start), sum(flows) FROM delta_scan('{w.table_dir}')").fetchone()
    con.close()
    assert got == (t0, 6)
    assert not [p for p in w.table_dir.rglob("*") if p.name.startswith((".", "_S"))]  # no .crc, no _SUCCESS
