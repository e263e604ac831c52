"""Active results -> Avro single-object -> Kafka active.v1 -> back, with a real broker."""
from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest
from click.testing import CliRunner

from flowlake.collectors.active.cli import active
from flowlake.collectors.active.parsers import parse_file
from flowlake.collectors.active.publish import decode, encode
from flowlake.schemas import avro
from flowlake.schemas.active import ACTIVE_RESULT

DATA = Path(__file__).resolve().parents[1] / "data" / "active"
FILES = ["iperf3_tcp.json", "iperf3_udp.json", "ping_D_c5.txt", "fping_C5.txt", "pscheduler_mixed.json",
         "netlogger_ulm.log", "sweep_frame_size.csv"]


def test_avro_single_object_round_trip_with_fastavro():
    schema = fastavro.parse_schema(ACTIVE_RESULT.avro_schema())
    for name in FILES:
        for rec in parse_file(DATA / name):
            data = encode(rec)
            assert data[:2] == b"\xc3\x01" and data[2:10] == avro.fingerprint(ACTIVE_RESULT)
            # independent decode: fastavro straight from the declared schema
            back = fastavro.schemaless_reader(io.BytesIO(data[10:]), schema)
            assert back["metrics"] == rec["metrics"] and back["parameters"] == rec["parameters"]
            assert int(back["start"].timestamp() * 1000) == rec["start"]
            assert decode(data) == rec


def _high_watermark(consumer, topic, wait=60.0):
    import time

    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.time() + wait
    while True:  # a freshly created topic has no leader for a moment
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        except KafkaException:
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def _consume_from(bootstrap, topic, offset, n, timeout=30.0):
    import time

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-active", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, offset)])
    out, deadline = [], time.time() + timeout
    while len(out) < n and time.time() < deadline:
        msg = c.poll(1.0)
        if msg is not None and not msg.error():
            out.append(msg.value())
    c.close()
    return out


@pytest.mark.integration
def test_import_publishes_and_round_trips(kafka, cfg):
    from confluent_kafka import Consumer

    topic = cfg.kafka.active_topic
    probe = Consumer({"bootstrap.servers": kafka, "group.id": "test-active-hw"})
    before = _high_watermark(probe, topic)
    files = [str(DATA / "ping_D_c5.txt"), str(DATA / "iperf3_tcp.json"), str(DATA / "pscheduler_rtt.json")]
    res = CliRunner().invoke(active, ["import", *files])
    assert res.exit_code == 0, res.output
    expected = [r for f in files for r in parse_file(f)]
    got = [decode(v) for v in _consume_from(kafka, topic, before, len(expected))]
    assert got == expected

    # a malformed file in the batch: error names it, and nothing at all is published
    bad = Path(cfg.home_dir) / "bad-ping.txt"
    bad.write_text("PING h (1.2.3.4) 56(84) bytes of data.\n64 bytes from 1.2.3.4: icmp_seq=1 time=? ms\n")
    after_good = _high_watermark(probe, topic)
    res = CliRunner().invoke(active, ["import", str(DATA / "ping_c5.txt"), str(bad)])
    assert res.exit_code == 1 and f"{bad}:2" in res.output
    assert _high_watermark(probe, topic) == after_good
    probe.close()


@pytest.mark.integration
def test_spark_ingest_decoder_reads_our_messages(spark):
    """The lead's ingest decodes active.v1 with Spark's from_avro: our fastavro bytes must
    come out as the same records, landing in the `date` of `start` (UTC)."""
    from flowlake.pipelines.decode import bad_rows, decode, good_rows, with_time_partitions

    recs = [r for name in ("ping_D_c5.txt", "iperf3_udp.json", "pscheduler_mixed.json", "netlogger_ulm.log")
            for r in parse_file(DATA / name)]
    import datetime as dt

    now = dt.datetime.now(dt.timezone.utc)
    df = spark.createDataFrame([(None, encode(r), "active.v1", 0, i, now) for i, r in enumerate(recs)],
                               "key binary, value binary, topic string, partition int, offset long, "
                               "timestamp timestamp")
    decoded = decode(df, ACTIVE_RESULT, avro.header(ACTIVE_RESULT)).cache()
    assert bad_rows(decoded).count() == 0
    rows = sorted(with_time_partitions(good_rows(decoded, ACTIVE_RESULT), "start", False).collect(),
                  key=lambda r: (r.start, r.tool, r.source_file))
    want = sorted(recs, key=lambda r: (r["start"], r["tool"], r["source_file"]))
    for row, rec in zip(rows, want):
        assert dict(row.metrics) == rec["metrics"] and dict(row.parameters) == rec["parameters"]
        # pyspark hands back naive local datetimes: .timestamp() reads them as local time
        assert int(round(row.start.timestamp() * 1000)) == rec["start"]
        utc = dt.datetime.fromtimestamp(rec["start"] / 1000, dt.timezone.utc)
        assert row.date == utc.strftime("%Y-%m-%d")
    assert len(rows) == len(recs)


def _results_tree(root: Path) -> list[Path]:
    """A results folder as operators keep them: formats mixed, nested by site and month,
    plus a hidden editor file that must be left out."""
    import shutil

    layout = {"slac/2026-11/ping_D_c5.txt": "ping_D_c5.txt", "slac/2026-11/tput.json": "iperf3_tcp.json",
              "cern/fping_C5.txt": "fping_C5.txt", "cern/deep/er/ps.json": "pscheduler_rtt.json",
              "sweep.csv": "sweep_frame_size.csv"}
    for rel, src in layout.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / src, root / rel)
    (root / "slac" / ".tput.json.swp").write_text("not a result")
    return sorted(root / rel for rel in layout)


def test_parse_takes_directories_recursively(tmp_path):
    files = _results_tree(tmp_path / "results")
    res = CliRunner().invoke(active, ["parse", str(tmp_path / "results")])
    assert res.exit_code == 0, res.output
    got = [json.loads(line) for line in res.output.splitlines()]
    # every file below the folder, each with its own format detected, the hidden one left out
    from flowlake.collectors.active.result import to_json

    expected = [to_json(r) for f in files for r in parse_file(f)]
    assert got == expected and {r["tool"] for r in got} >= {"ping", "fping", "iperf3", "csv"}
    # a directory and a file together; an empty directory is an error naming it
    res = CliRunner().invoke(active, ["parse", str(tmp_path / "results" / "cern"), str(DATA / "ping_c5.txt")])
    assert res.exit_code == 0 and len(res.output.splitlines()) == len(
        [r for f in files if "cern" in f.parts for r in parse_file(f)]) + len(parse_file(DATA / "ping_c5.txt"))
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    res = CliRunner().invoke(active, ["parse", str(tmp_path / "empty")])
    assert res.exit_code == 1 and f"{tmp_path / 'empty'}: directory holds no files" in res.output


@pytest.mark.integration
def test_import_takes_directories(kafka, cfg, tmp_path):
    from confluent_kafka import Consumer

    files = _results_tree(tmp_path / "results")
    topic = cfg.kafka.active_topic
    probe = Consumer({"bootstrap.servers": kafka, "group.id": "test-active-dir"})
    before = _high_watermark(probe, topic)
    res = CliRunner().invoke(active, ["import", str(tmp_path / "results")])
    assert res.exit_code == 0, res.output
    expected = [r for f in files for r in parse_file(f)]
    assert f"published {len(expected)} records from {len(files)} files" in res.output
    assert [decode(v) for v in _consume_from(kafka, topic, before, len(expected))] == expected
    # a malformed file deep in the tree: named, and nothing published
    bad = tmp_path / "results" / "cern" / "deep" / "bad.txt"
    bad.write_text("PING h (1.2.3.4) 56(84) bytes of data.\n64 bytes from 1.2.3.4: icmp_seq=1 time=? ms\n")
    after = _high_watermark(probe, topic)
    res = CliRunner().invoke(active, ["import", str(tmp_path / "results")])
    assert res.exit_code == 1 and f"{bad}:2" in res.output
    assert _high_watermark(probe, topic) == after
    probe.close()
