"""The flows ingest's tasks fetch their micro-batch from the broker themselves: the batch's
offset range comes from Spark's checkpoint (pipelines/batch_offsets.py) and a plain
read_committed consumer reads exactly that range. Both halves against real files and a
real broker; the whole path (Spark's own checkpoint, the lake) in test_ingest.py,
test_ingest_formats.py and the fault soak."""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from flowlake.pipelines.batch_offsets import CheckpointError, Range, batch_ranges, read_range


def offsets_entry(path, offsets: dict) -> None:
    """An OffsetSeqLog entry as Spark 4 writes it: version, batch metadata, one line per source."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1764000000000, "conf": {}}
    path.write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}")


def test_ranges_follow_the_checkpoint(tmp_path):
    cp = tmp_path / "cp"
    initial = cp / "sources" / "0" / "0"
    initial.parent.mkdir(parents=True)
    initial.write_bytes(b"\0v1\n" + json.dumps({"flows.v1": {"0": 5, "1": 0}}).encode())  # KafkaSourceInitialOffsetWriter
    offsets_entry(cp / "offsets" / "0", {"flows.v1": {"1": 7, "0": 9}})
    offsets_entry(cp / "offsets" / "1", {"flows.v1": {"0": 9, "1": 12, "2": 4}})  # partition 2 added since

    assert batch_ranges(cp, 0) == [Range("flows.v1", 0, 5, 9), Range("flows.v1", 1, 0, 7)]
    # partition 0 had nothing new (no empty range); a new partition is read from its start
    assert batch_ranges(cp, 1) == [Range("flows.v1", 1, 7, 12), Range("flows.v1", 2, 0, 4)]

    (cp / "offsets" / "2").write_text("v1\n{}\n{not json")
    with pytest.raises(CheckpointError, match=r"offsets/2: the offsets line is not JSON"):
        batch_ranges(cp, 2)
    with pytest.raises(CheckpointError, match=r"offsets/3: cannot read"):
        batch_ranges(cp, 3)


@pytest.mark.integration
def test_read_range_reads_exactly_the_committed_messages_of_the_range(cfg, kafka):
    topic = "flows.test-batch-offsets"
    admin = AdminClient({"bootstrap.servers": kafka})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": kafka, "transactional.id": "test-batch-offsets"})
    p.init_transactions(30)
    for name, n, commit in (("a", 5, True), ("x", 4, False), ("b", 3, True)):
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, f"{name}{i}".encode())
        p.flush(30)
        p.commit_transaction(30) if commit else p.abort_transaction(30)
    # offsets: a0-a4 0-4, marker 5, x0-x3 6-9, abort marker 10, b0-b2 11-13, marker 14
    conf = cfg.kafka_client_conf()

    def read(start, end):
        return [(m.offset(), m.value().decode()) for m in read_range(conf, Range(topic, 0, start, end))]

    everything = read(0, 15)
    assert [v for _, v in everything] == ["a0", "a1", "a2", "a3", "a4", "b0", "b1", "b2"]
    assert [o for o, _ in everything] == [0, 1, 2, 3, 4, 11, 12, 13]
    # ranges that end inside the log: nothing at or past `end`, nothing before `start`
    assert read(0, 3) == [(0, "a0"), (1, "a1"), (2, "a2")]
    assert read(3, 12) == [(3, "a3"), (4, "a4"), (11, "b0")]
    # a range of markers and aborted records only is complete, and empty
    assert read(5, 11) == []


def test_ranges_grouped_into_one_task_per_core():
    from flowlake.pipelines.flow_ingest import group_ranges

    ranges = [Range("flows.v1", p, 100, 100 + n) for p, n in enumerate([10, 40, 5, 30, 1])]
    groups = group_ranges(ranges, 2)
    assert len(groups) == 2
    assert sorted((r for g in groups for r in g), key=lambda r: r.partition) == ranges  # every range once
    assert sorted(sum(r.end - r.start for r in g) for g in groups) == [41, 45]  # greedy: 40+5, 30+10+1
    assert [len(g) for g in group_ranges(ranges, 8)] == [1] * 5  # never more tasks than ranges
