"""`flowlake query` filters over the routing context (issue 33, Flow revision 4):
`[dst] aspath N` and `community A:B` / `community A:B:C`, flowlake's extension (nfdump 1.7.1
has neither). Hand-made rows on DuckDB (sql.py) and the Spark compiler held equal on them;
a lake whose first hour was written before revision 4 (no such columns) read by the local
engine; bad spellings refused naming the word.
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowlake.base import config
from flowlake.jobs.query import FilterError, parse, sql, to_column
from flowlake.jobs.query.duck import DuckEngine
from flowlake.jobs.query.spec import FLOW_COLUMNS

COLUMNS = [  # name, DuckDB type, Spark type
    ("id", "INTEGER", "int"), ("src_as", "BIGINT", "bigint"), ("dst_as", "BIGINT", "bigint"),
    ("dst_as_path", "BIGINT[]", "array<bigint>"), ("dst_communities", "VARCHAR[]", "array<string>"),
    ("dst_large_communities", "VARCHAR[]", "array<string>"), ("dst_prefix", "VARCHAR", "string"),
    ("src_prefix", "VARCHAR", "string"),
]
ROWS = [
    (1, 0, 64601, [64501, 64601], ["65401:10", "65401:1000"], ["64501:1:2"], "198.18.0.0/24", ""),
    (2, 0, 4200000000, [64501, 64650, 4200000000], ["65402:7"], [], "198.18.4.128/25", "10.0.0.0/8"),
    (3, 65010, 0, [], [], [], "", ""),                                   # no route
    (4, 0, 64700, [64502, 64700], [], ["64501:3:4", "4294967295:1:0"], "2001:db8:100::/48", ""),
    (5, 0, 0, None, None, None, None, None),                             # landed before revision 4
]
CASES = [
    ("dst aspath 64501", [1, 2]), ("aspath 64501", [1, 2]), ("dst aspath 4200000000", [2]),
    ("aspath 64700", [4]), ("aspath 1", []), ("not aspath 64501", [3, 4, 5]),
    ("community 65401:10", [1]), ("community 65401:1000", [1]), ("community 65402:7", [2]),
    ("community 065401:010", [1]),  # decimal numbers: leading zeros are the same community
    ("community 64501:1:2", [1]), ("community 4294967295:1:0", [4]), ("community 64501:3:4", [4]),
    ("community 65401:1", []), ("community 1:2:3", []), ("not community 65401:10", [2, 3, 4, 5]),
    ("aspath 64501 and community 65402:7", [2]), ("aspath 64502 or community 65401:10", [1, 4]),
    ("dst as 64601 and aspath 64601", [1]), ("src as 65010 and not aspath 64501", [3]),
]


def duck_ids(flt: str) -> list[int]:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t ({', '.join(f'{n} {t}' for n, t, _ in COLUMNS)})")
    con.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(COLUMNS))})", ROWS)
    return [r[0] for r in con.execute(f"SELECT id FROM t WHERE {sql.to_sql(parse(flt))} ORDER BY id").fetchall()]


@pytest.mark.parametrize("flt,want", CASES)
def test_routing_primitives_on_hand_made_rows_duckdb(flt, want):
    assert duck_ids(flt) == want


def test_the_primitives_read_the_routing_columns():
    assert sql.columns(parse("aspath 5")) == {"dst_as_path"}
    assert sql.columns(parse("community 1:2")) == {"dst_communities"}
    assert sql.columns(parse("community 1:2:3")) == {"dst_large_communities"}


@pytest.mark.parametrize("text,bad,words", [
    ("src aspath 64501", "src", "towards the destination only"),
    ("src or dst aspath 64501", "src or dst", "towards the destination only"),
    ("aspath 4294967296", "4294967296", "out of range"),
    ("aspath foo", "foo", "expected an AS number"),
    ("community 65401", "65401", "not a community"),
    ("community 65536:1", "65536:1", "0..65535"),
    ("community 1:2:4294967296", "1:2:4294967296", "0..4294967295"),
    ("community a:b", "a:b", "not a community"),
    ("community 1:2:3:4", "1:2:3:4", "not a community"),
])
def test_bad_routing_filters_name_the_token_and_the_problem(text, bad, words):
    with pytest.raises(FilterError) as info:
        parse(text)
    exc = info.value
    assert words in exc.message, exc.message
    assert text[exc.pos:exc.pos + len(bad)] == bad, str(exc)


DAY = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)


def _write_hour(lake: Path, hour: int, rows: list[dict], rev4: bool) -> None:
    types = {"time_start": pa.timestamp("ms", tz="UTC"), "time_end": pa.timestamp("ms", tz="UTC"),
             "exporter": pa.string(), "src_addr": pa.string(), "dst_addr": pa.string(), "source_file": pa.string(),
             "packets": pa.int64(), "bytes": pa.int64(), "input_if": pa.int64(), "output_if": pa.int64(),
             "src_as": pa.int64(), "dst_as": pa.int64(), "file_seq": pa.int64()}
    cols = {c: pa.array([r[c] for r in rows], types.get(c, pa.int32())) for c in FLOW_COLUMNS}
    if rev4:
        cols["dst_as_path"] = pa.array([r.get("dst_as_path", []) for r in rows], pa.list_(pa.int64()))
        cols["dst_communities"] = pa.array([r.get("dst_communities", []) for r in rows], pa.list_(pa.string()))
        cols["dst_large_communities"] = pa.array([r.get("large", []) for r in rows], pa.list_(pa.string()))
    part = lake / "flows" / f"date={DAY:%Y-%m-%d}" / f"hour={hour:02d}"
    part.mkdir(parents=True)
    pq.write_table(pa.table(cols), part / "part-0.parquet")


def test_lake_hour_without_revision_4_matches_no_path_and_no_community(tmp_path):
    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path)})

    def flow(hour, seq, **rev4):
        t = DAY + dt.timedelta(hours=hour, seconds=seq)
        return {"time_start": t, "time_end": t, "exporter": "127.0.0.1", "input_if": 1, "output_if": 2,
                "src_addr": f"10.0.{hour}.{seq}", "dst_addr": "198.18.0.9", "src_port": 1000 + seq, "dst_port": 443,
                "proto": 6, "tcp_flags": 0x12, "tos": 0, "packets": 1, "bytes": 100, "sampling_rate": 1,
                "src_as": 0, "dst_as": 0, "source_file": f"f{hour}", "file_seq": seq, **rev4}

    old = [flow(10, 1), flow(10, 2)]
    new = [flow(11, 1, dst_as_path=[64501, 64601], dst_communities=["65401:10"], large=["64501:1:2"]),
           flow(11, 2)]
    _write_hour(Path(cfg.lake), 10, old, rev4=False)
    _write_hour(Path(cfg.lake), 11, new, rev4=True)
    eng = DuckEngine(cfg, use_index=False)
    try:
        def got(flt):
            return sorted(r["src_addr"] for r in eng.records(parse(flt), 0))

        assert got("aspath 64601") == ["10.0.11.1"]
        assert got("community 65401:10 and community 64501:1:2") == ["10.0.11.1"]
        assert got("not aspath 64501") == ["10.0.10.1", "10.0.10.2", "10.0.11.2"]
        tops = eng.tops(parse("not community 65401:10"), [("proto", "flows")], 0)["proto/flows"]
        assert {r["val"]: r["flows"] for r in tops} == {"6": 3}
    finally:
        eng.close()


@pytest.mark.integration
def test_spark_compiler_equals_duckdb_on_hand_made_rows(spark):
    schema = ", ".join(f"{n} {s}" for n, _, s in COLUMNS)
    df = spark.createDataFrame(ROWS, schema).cache()
    cols = [to_column(parse(f)).alias(f"f{i}") for i, (f, _) in enumerate(CASES)]
    rows = df.select("id", *cols).collect()
    for i, (flt, want) in enumerate(CASES):
        assert sorted(r.id for r in rows if r[f"f{i}"]) == want, flt
