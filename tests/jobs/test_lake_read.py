"""The one seam for reading the lake (issue 38, docs/design/delta-lake.md step 1):
`pipelines/lake_read.lake_files`. A Parquet lake and the same lake converted in place to a
Delta table (delta.convert_in_place, as `flowlake lake migrate` does) give the same answers
to `flowlake query` (both engines), a Spark job's read and the Go top-talkers kernel; the
Delta table is read at one version: a Parquet file in its folder that no version lists (a
batch that died before its commit) is not read, while a plain Parquet lake reads it."""
from __future__ import annotations

import datetime as dt
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from test_query_fast import PROBE

from flowlake.base import config, delta
from flowlake.jobs import top_talkers_local
from flowlake.jobs.context import JobContext
from flowlake.pipelines import lake_read

ROOT = Path(__file__).resolve().parents[2]
DAY = dt.date(2026, 11, 20)


def _bench():
    spec = importlib.util.spec_from_file_location("bench_query", ROOT / "bench" / "query.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def homes(tmp_path_factory, cfg) -> tuple[Path, Path]:
    """(a Parquet lake of a synthetic day, a copy of it made a Delta table in place); the
    Delta copy's hour 07 also holds a file no version lists."""
    bench = _bench()
    plain = tmp_path_factory.mktemp("lake-read-parquet")
    bench.write_lake(bench.synth(12_000, seed=5), plain)
    # hour 05 as an ingest batch file (not compacted): a file name the compactor's are not
    hour = plain / "lake" / "flows" / f"date={DAY}" / "hour=05"
    (f,) = hour.glob("c*.parquet")
    f.rename(hour / "b7-part-0.parquet")
    table = tmp_path_factory.mktemp("lake-read-delta")
    shutil.copytree(plain / "lake", table / "lake")
    flows = table / "lake" / "flows"
    out = delta.convert_in_place(flows, [("date", "string"), ("hour", "integer")], {"ingest-flows": 7})
    assert out["converted"] and out["rows"] == 12_000, out
    # a batch that died before its commit: its file sits in the hour's folder, no version has it
    stray = flows / f"date={DAY}" / "hour=07" / "b99-part-0.parquet"
    shutil.copy(next((flows / f"date={DAY}" / "hour=03").glob("*.parquet")), stray)
    return plain, table


def _env(home: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWLAKE_")}
    return {**env, "FLOWLAKE_HOME": str(home), **extra}


def _cfg(home: Path):
    return config.load(env=_env(home))


def _query(home: Path, args: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=600,
                          env=_env(home, FLOWLAKE_QUERY_SERVER="false", **env))


def test_lake_files_reads_one_version_of_a_delta_table(homes):
    plain, table = homes
    hours = [table / "lake" / "flows" / f"date={DAY}" / f"hour={h:02d}" for h in (3, 5, 7)]
    v, files = lake_read.lake_files(_cfg(table), "flows", hours)
    assert v == 0
    assert not any(f.endswith("b99-part-0.parquet") for f in files)
    pv, pfiles = lake_read.lake_files(_cfg(plain), "flows", [plain / h.relative_to(table) for h in hours])
    assert pv is None
    rel = sorted(str(Path(f).relative_to(table)) for f in files)
    assert rel == sorted(str(Path(f).relative_to(plain)) for f in pfiles) and len(rel) == 3
    # the whole table, and the same through a reader that keeps the version
    with lake_read.LakeReader(table / "lake") as reader:
        assert reader.files("flows") == lake_read.lake_files(_cfg(table), "flows")
        assert reader.versions == {"flows": 0}
        assert reader.base("flows") == table / "lake" / "flows"
    # the table moves on; a reader that read version 0 keeps reading it
    reader = lake_read.LakeReader(table / "lake")
    before = reader.files("flows", hours[:1])
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in before[1]) > 0
    copy = table.parent / (table.name + "-moved")
    shutil.copytree(table / "lake" / "flows", copy / "flows")
    delta.delete_partitions(copy / "flows", [{"date": DAY.isoformat()}])
    assert lake_read.lake_files(copy, "flows") == (1, [])
    moved = lake_read.LakeReader(copy)
    assert moved.files("flows")[0] == 1 and moved.files("flows", [copy / "flows" / f"date={DAY}"])[1] == []
    reader.close()


def test_plain_lake_reads_the_stray_file_a_table_does_not(homes):
    """The check that the Delta answers below come from the log, not the folders."""
    plain, table = homes
    hour = f"date={DAY}/hour=07"
    stray = next((table / "lake" / "flows" / hour).glob("b99-*.parquet"))
    shutil.copy(stray, plain / "lake" / "flows" / hour / "x.parquet")
    try:
        _, pfiles = lake_read.lake_files(_cfg(plain), "flows", [plain / "lake" / "flows" / hour])
        _, dfiles = lake_read.lake_files(_cfg(table), "flows", [table / "lake" / "flows" / hour])
        assert len(pfiles) == 2 and len(dfiles) == 1
        assert len(list((table / "lake" / "flows" / hour).glob("*.parquet"))) == 2
    finally:
        (plain / "lake" / "flows" / hour / "x.parquet").unlink()


QUESTIONS = [
    ["query", "proto tcp and dst port 443", "-s", "srcip/bytes"],
    ["query", "--stats=ip/bytes", "-n", "0", "--format", "json", "src net 10.1.0.0/16"],
    ["query", "proto udp", "-A", "srcip,dstport", "--format", "csv", "--limit", "0"],
    ["query", "bytes > 100k", "--format=json", "--limit", "0", "--from", "2026-11-20T03:00",
     "--to", "2026-11-20T08:30"],
]


@pytest.mark.parametrize("args", QUESTIONS, ids=[" ".join(a[1:])[:40] for a in QUESTIONS])
def test_query_local_engine_answers_alike_from_both_lakes(homes, args):
    plain, table = homes
    a = _query(plain, args, FLOWLAKE_QUERY_ENGINE="local")
    b = _query(table, args, FLOWLAKE_QUERY_ENGINE="local")
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    assert a.stdout == b.stdout and len(a.stdout.splitlines()) >= 3
    # the fast path reads a Parquet lake without deltalake, a Delta table with it
    assert "'deltalake'" not in a.stderr.strip().splitlines()[-1], a.stderr
    assert "'deltalake'" in b.stderr.strip().splitlines()[-1], b.stderr


@pytest.mark.integration
def test_query_spark_engine_answers_alike_from_both_lakes(homes):
    plain, table = homes
    args = ["query", "--engine", "spark", "--stats=ip/bytes", "-n", "0", "--format", "json", "proto tcp"]
    a = _query(plain, args)
    b = _query(table, args)
    assert a.returncode == b.returncode == 0, (a.stderr[-2000:], b.stderr[-2000:])
    assert a.stdout == b.stdout and len(a.stdout.splitlines()) >= 3
    local = _query(table, [*args[:1], "--engine", "local", *args[3:]])
    assert local.stdout == b.stdout


@pytest.mark.integration
def test_spark_job_read_and_go_kernel_alike_from_both_lakes(homes, spark):
    """JobContext.flows (Spark) and the top-talkers Go kernel (handed the version's files)."""
    answers = []
    for home in homes:
        cfg = _cfg(home)
        reader = lake_read.LakeReader(cfg.lake)
        ctx = JobContext(spark=spark, cfg=cfg, date=DAY, snapshot=reader)
        try:
            df = ctx.flows()
            sums = df.agg(F.count("*"), F.sum("bytes"), F.min("time_start"), F.max("time_end"),
                          F.countDistinct("hour")).collect()[0]
            by_hour = sorted(tuple(r) for r in df.groupBy("hour").agg(F.count("*"), F.sum("packets")).collect())
            assert top_talkers_local.run(ctx)
        finally:
            reader.close()
        report = sorted(map(str, pq.read_table(home / "lake" / "reports" / "top_talkers").to_pylist()))
        answers.append((tuple(sums), by_hour, report))
    (p, t) = answers
    assert p[0][0] == 12_000 and p[0][4] >= 20
    assert p == t
    assert len(p[2]) > 50
