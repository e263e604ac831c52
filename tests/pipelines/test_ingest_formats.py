"""Both wire formats of the flows topic in one topic (schemas/messages.py): the real
shipper ships one nfcapd file as format 1 (one Avro record per flow, what a topic holds
from before the upgrade) and another as format 2 (FlowBatch, Arrow), spread over the
topic's partitions; one ingest lands every flow of both exactly once, equal to the
shipper's own reading of the files, reads the partitions in parallel tasks, and
quarantines broken FlowBatch messages with the reason."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import Producer

from flowlake.base import delta

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import pcapgen  # noqa: E402
from test_shipper import collect, dump_as_shipped  # noqa: E402

pytestmark = pytest.mark.integration
COLS = ["time_start", "exporter", "src_addr", "dst_addr", "src_port", "dst_port", "proto", "packets", "bytes",
        "sampling_rate", "file_seq"]


@pytest.fixture(scope="module")
def fcfg(kafka, tmp_path_factory):
    from flowlake.base import config
    from flowlake.collectors import kafka as kafka_service

    c = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path_factory.mktemp("formats-home")),
                         "FLOWLAKE_KAFKA_FLOWS_TOPIC": "flows.test-formats",
                         "FLOWLAKE_KAFKA_ACTIVE_TOPIC": "active.test-formats",
                         "FLOWLAKE_KAFKA_LEDGER_TOPIC": "ledger.test-formats"})
    kafka_service.ensure_topics(c)
    return c


@pytest.fixture(scope="module")
def nffile(tmp_path_factory) -> Path:
    from flowlake.collectors import ship as ship_mod

    ship_mod.build_binary()  # current with its sources (a test may run before test_shipper's build)
    d = tmp_path_factory.mktemp("formats-nf")
    pcap = d / "f.pcap"
    pcapgen.write_pcap(pcap, 600, seed=31, ipv6_share=0.3, packets_per_flow=2)
    return collect(d / "spool", [(pcap, 10)])


def ship(cfg, path: Path, *extra: str) -> None:
    from flowlake.collectors import ship as ship_mod

    res = subprocess.run(ship_mod.ship_argv(cfg, [path], extra=extra), capture_output=True, text=True,
                         env=ship_mod.child_env(cfg))
    assert res.returncode == 0, res.stderr[-2000:]


def lake_rows(cfg, source: str) -> list[tuple]:
    con = duckdb.connect()
    try:
        delta.duckdb_load_delta(con)  # lake/flows is a Delta table: its current version
        return con.execute(f"select {', '.join(COLS)} from delta_scan('{cfg.lake}/flows') "
                           "where source_file = ? order by file_seq", [source]).fetchall()
    finally:
        con.close()


def test_topic_with_both_formats_lands_every_flow_once(fcfg, nffile, spark):
    from confluent_kafka import Consumer

    from flowlake.collectors import kafka as kafka_service
    from flowlake.pipelines import ingest
    from flowlake.schemas import FLOW, Field, Record, messages

    cfg = fcfg
    spool = cfg.path("nfcapd")
    spool.mkdir(parents=True, exist_ok=True)
    old, new = spool / "nfcapd.202611200000", spool / "nfcapd.202611200005"
    shutil.copy(nffile, old)
    shutil.copy(nffile, new)
    ship(cfg, old, "--format", "avro")
    ship(cfg, new, "--format", "arrow", "--flows-per-message", "64")

    # Broken FlowBatch messages beside them: each is quarantined with its reason.
    want = dump_as_shipped(nffile)  # times checked as `ship` does
    when = dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc)
    rows = [{**w, "source_file": "bad", "time_start": when, "time_end": when} for w in want[:3]]
    good = messages.encode_flow_batch(FLOW, rows)
    other = Record("Other", "x", "another record", (Field("a", "long", "a"),))
    p = Producer({"bootstrap.servers": cfg.kafka_bootstrap})
    p.produce(cfg.kafka.flows_topic, good[:4] + b"\x07" + good[5:], key="version")
    p.produce(cfg.kafka.flows_topic, good[:messages.FLOW_BATCH_HEADER_LEN] + b"\xff" * 40, key="ipc")
    p.produce(cfg.kafka.flows_topic, messages.encode_flow_batch(other, [{"a": 1}]), key="other")
    assert p.flush(30) == 0

    # The file's FlowBatch messages went to every partition of the topic.
    c = Consumer({**cfg.kafka_client_conf(), "group.id": "t-formats"})
    try:
        ends = kafka_service.end_offsets(cfg, c, cfg.kafka.flows_topic, "read_committed")
    finally:
        c.close()
    assert len(ends) == cfg.kafka.partitions >= 2 and all(ends.values()), ends
    assert status_json(cfg)["ingest"]["flows"]["offsets_behind"] == sum(ends.values())

    ingest.run(cfg, once=True)

    expect = [tuple(w[c] for c in COLS) for w in want]
    for f in (old, new):
        got = lake_rows(cfg, f.name)
        assert len(got) == len(want), f.name
        assert [g[-1] for g in got] == list(range(len(want))), f"{f.name}: each flow once"
        as_ms = [(int(g[0].replace(tzinfo=dt.timezone.utc).timestamp() * 1000), *g[1:]) for g in got]
        assert as_ms == expect, f"{f.name}: the lake equals the shipper's reading of the file"
    q = duckdb.connect().execute(
        f"select key, reason from read_parquet('{cfg.lake}/quarantine/ingest/flows/**/*.parquet') order by key"
    ).fetchall()
    reasons = {bytes(k).decode(): r for k, r in q}
    assert set(reasons) == {"version", "ipc", "other"}
    assert "version 7 is not supported" in reasons["version"]
    assert "Arrow IPC stream does not decode" in reasons["ipc"]
    assert "schema fingerprint" in reasons["other"]
    assert ingest.counts(cfg)["flows"] == {"rows": 2 * len(want), "quarantined": 3}
    markers = json.loads(cfg.path("state", "ingest", "flows-recent.json").read_text())  # the commits' counters
    # the partitions read in parallel: one task per core, each reading its share of them
    assert max(m["tasks"] for m in markers) == min(cfg.kafka.partitions, spark.sparkContext.defaultParallelism) >= 2

    lag = status_json(cfg)["ingest"]["flows"]
    assert (lag["offsets_behind"], lag["flows_behind_estimate"]) == (0, 0)
    assert lag["rows_per_s_while_busy"] > 0 and lag["rows_per_s_last_minute"] > 0
    table = run_cli(cfg, "status").stdout
    assert "ingest: lag behind Kafka and rate" in table and cfg.kafka.flows_topic in table

    ingest.run(cfg, once=True)  # nothing new: nothing written twice
    assert len(lake_rows(cfg, old.name)) == len(lake_rows(cfg, new.name)) == len(want)


def run_cli(cfg, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLOWLAKE_HOME": str(cfg.home_dir), "FLOWLAKE_KAFKA_FLOWS_TOPIC": cfg.kafka.flows_topic,
           "FLOWLAKE_KAFKA_ACTIVE_TOPIC": cfg.kafka.active_topic, "COLUMNS": "200"}
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", *args], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


def status_json(cfg) -> dict:
    return json.loads(run_cli(cfg, "status", "--json").stdout)["counts"]
