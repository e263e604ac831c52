"""Streaming ingest against a real broker and the real Spark session: decoded rows land
once in date/hour partitions; garbage and wrong-schema messages are quarantined."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import Producer

from flowlake.base import delta
from flowlake.schemas import FLOW, Field, Record, avro

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def icfg(kafka, tmp_path_factory):
    """The session's broker, but a lake and topics of its own: other tests read flows.v1
    and the session lake, and must not see this module's garbage messages."""
    import os

    from flowlake.base import config
    from flowlake.collectors import kafka as kafka_service

    c = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path_factory.mktemp("ingest-home")),
                         "FLOWLAKE_KAFKA_FLOWS_TOPIC": "flows.test-ingest",
                         "FLOWLAKE_KAFKA_ACTIVE_TOPIC": "active.test-ingest"})
    kafka_service.ensure_topics(c)
    return c


def flow(i: int, start_ms: int) -> dict:
    return {
        "time_start": dt.datetime.fromtimestamp(start_ms / 1000, dt.timezone.utc),
        "time_end": dt.datetime.fromtimestamp((start_ms + 1500) / 1000, dt.timezone.utc),
        "exporter": "127.0.0.2", "input_if": 1, "output_if": 2,
        "src_addr": f"10.0.0.{i % 250 + 1}", "dst_addr": "2001:db8::1" if i % 3 == 0 else "192.0.2.7",
        "src_port": 1024 + i, "dst_port": 443, "proto": 6, "tcp_flags": 0x1B, "tos": 0,
        "packets": i + 1, "bytes": 100 * (i + 1), "sampling_rate": 1, "src_as": 64500, "dst_as": 64501,
        "source_file": "test/nfcapd.20261120000000", "file_seq": i,
    }


def test_ingest_once_lands_rows_and_quarantines_bad(icfg, kafka, spark):
    cfg = icfg
    from flowlake.pipelines import ingest

    other = Record("Other", "x", "another schema", (Field("a", "long", "a"),))
    producer = Producer({"bootstrap.servers": kafka, "enable.idempotence": True})
    base = int(dt.datetime(2026, 11, 20, 23, 59, 0, tzinfo=dt.timezone.utc).timestamp() * 1000)
    n = 300
    for i in range(n):  # straddles midnight: two dates, two hours
        producer.produce(cfg.kafka.flows_topic, avro.encode(FLOW, flow(i, base + i * 500)), key=str(i))
    producer.produce(cfg.kafka.flows_topic, b"definitely not avro", key="junk")
    producer.produce(cfg.kafka.flows_topic, avro.encode(other, {"a": 1}), key="other")
    producer.produce(cfg.kafka.flows_topic, avro.header(FLOW) + b"\xff\xff\xff", key="trunc")
    assert producer.flush(30) == 0

    ingest.run(cfg, once=True)

    lake = cfg.lake / "flows"
    con = duckdb.connect()
    delta.duckdb_load_delta(con)  # lake/flows is a Delta table: read its current version
    flows = f"delta_scan('{lake}')"
    rows = con.execute(f"select date, hour, count(*), sum(bytes) from {flows} group by all order by all").fetchall()
    assert [(str(r[0]), r[1]) for r in rows] == [("2026-11-20", 23), ("2026-11-21", 0)]
    assert sum(r[2] for r in rows) == n
    assert sum(r[3] for r in rows) == sum(100 * (i + 1) for i in range(n))
    seqs = con.execute(f"select count(distinct file_seq) from {flows}").fetchone()[0]
    assert seqs == n
    sample = con.execute(f"select src_addr, dst_addr, tcp_flags, time_start from {flows} where file_seq = 3").fetchone()
    assert sample[:3] == ("10.0.0.4", "2001:db8::1", 0x1B)
    # the committed files, as the table lists them, are every file in its folders (no leftovers)
    committed = {Path(f).resolve() for f in delta.version_files(lake)[1]}
    assert committed == data_files(lake)
    assert all(p.name.startswith("b") and "-part-" in p.name for p in committed)

    q = con.execute(
        f"select reason from read_parquet('{cfg.lake}/quarantine/ingest/flows/*.parquet') order by reason").fetchall()
    reasons = [r[0] for r in q]
    assert len(reasons) == 3
    assert any("bad magic" in r for r in reasons)
    assert any("schema fingerprint" in r for r in reasons)
    assert any("does not decode" in r for r in reasons)
    assert ingest.counts(cfg)["flows"] == {"rows": n, "quarantined": 3}

    # A second drain finds nothing new: no row is written twice.
    ingest.run(cfg, once=True)
    total = con.execute(f"select count(*) from {flows}").fetchone()[0]
    assert total == n
    # nothing but the table's log and committed parquet files in its folder
    assert [p.name for p in lake.rglob("_*")] == ["_delta_log"] and not list(lake.rglob("*.crc"))
    assert {Path(f).resolve() for f in delta.version_files(lake)[1]} == data_files(lake)
    con.close()


def data_files(table: Path) -> set[Path]:
    """Every Parquet file in the table's folder but its log's (checkpoints are Parquet)."""
    return {p.resolve() for p in table.rglob("*.parquet") if "_delta_log" not in p.relative_to(table).parts}


def test_ingest_sees_committed_transactions_once_and_aborted_never(icfg, kafka, spark):
    """The shipper's exactly-once rests on this: read_committed hides aborted transactions
    (a shipper killed mid-file) and transaction markers do not upset Spark's offsets."""
    from flowlake.pipelines import ingest

    cfg = icfg
    before = ingest.counts(cfg)["flows"]["rows"]
    p = Producer({"bootstrap.servers": kafka, "transactional.id": "test-ingest-tx", "enable.idempotence": True})
    p.init_transactions(30)
    base = int(dt.datetime(2026, 11, 19, 12, 0, tzinfo=dt.timezone.utc).timestamp() * 1000)

    def transaction(n: int, source: str, commit: bool) -> None:
        p.begin_transaction()
        for i in range(n):
            rec = flow(i, base + i)
            rec["source_file"] = source
            p.produce(cfg.kafka.flows_topic, avro.encode(FLOW, rec), key=str(i))
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(30)
            p.abort_transaction(30)

    transaction(200, "tx/committed", commit=True)
    transaction(150, "tx/aborted", commit=False)
    transaction(50, "tx/committed2", commit=True)

    ingest.run(cfg, once=True)
    con = duckdb.connect()
    delta.duckdb_load_delta(con)  # lake/flows is a Delta table: its current version
    got = dict(con.execute(
        f"select source_file, count(*) from delta_scan('{cfg.lake}/flows') "
        "where source_file like 'tx/%' group by all").fetchall())
    con.close()
    assert got == {"tx/committed": 200, "tx/committed2": 50}
    assert ingest.counts(cfg)["flows"]["rows"] == before + 250
