"""The Kafka offset range of one micro-batch, from the query's own checkpoint, and a
read of exactly that range with a plain consumer.

Spark's micro-batch engine writes a batch's end offsets to `offsets/<id>` (its write-ahead
log) before the batch runs, and replays a batch after a crash with the same entry; the
batch starts where the one before ended (`offsets/<id-1>`, or for the first batch the
offsets the Kafka source fixed when the query was created, `sources/0/0`). Reading the
range from there lets the flows ingest fetch message bytes in its Python tasks (one
copy, straight from the broker) instead of through the JVM's Kafka source, while Spark's
checkpoint still owns the offsets: the same batch id always means the same messages, so
the BatchWriter's exactly-once rules hold unchanged.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Range:
    topic: str
    partition: int
    start: int   # first offset of the batch
    end: int     # first offset of the next batch (exclusive)


class CheckpointError(RuntimeError):
    pass


def end_offsets(checkpoint: Path, batch_id: int) -> dict[str, dict[int, int]]:
    """{topic: {partition: offset}} where batch `batch_id` of a one-Kafka-source query ends."""
    offsets = _offsets_line(checkpoint / "offsets" / str(batch_id))
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in offsets.items()}


def _offsets_line(path: Path) -> dict:
    """The source's offsets of an OffsetSeqLog entry: "v1", metadata, one line per source."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the batch's offsets ({exc})") from exc
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise CheckpointError(f"{path}: not a Spark offsets log entry (expected 'v1', metadata, offsets)")
    if len(lines) != 3 or lines[2] == "-":
        raise CheckpointError(f"{path}: expected the offsets of exactly one Kafka source, got {lines[2:]}")
    try:
        return json.loads(lines[2])
    except ValueError as exc:
        raise CheckpointError(f"{path}: the offsets line is not JSON ({exc})") from exc


def _initial(path: Path) -> dict:
    """The Kafka source's first offsets (KafkaSourceInitialOffsetWriter: a NUL, "v1", json)."""
    try:
        text = path.read_bytes().lstrip(b"\0").decode()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read the Kafka source's initial offsets ({exc})") from exc
    version, _, body = text.partition("\n")
    if not version.startswith("v"):
        raise CheckpointError(f"{path}: not a Kafka source initial-offsets file")
    return json.loads(body)


def batch_ranges(checkpoint: Path, batch_id: int) -> list[Range]:
    """Non-empty offset ranges of batch `batch_id`, per topic partition. A partition new in
    this batch (not in the start) starts at offset 0: the consumer reads from the log start."""
    end = end_offsets(checkpoint, batch_id)
    if batch_id > 0:
        start = end_offsets(checkpoint, batch_id - 1)
    else:
        start = {t: {int(p): int(o) for p, o in parts.items()}
                 for t, parts in _initial(checkpoint / "sources" / "0" / "0").items()}
    out = []
    for topic, parts in sorted(end.items()):
        for part, stop in sorted(parts.items()):
            first = start.get(topic, {}).get(part, 0)
            if stop > first:
                out.append(Range(topic, part, first, stop))
    return out


def read_range(conf: dict, r: Range, batch: int = 10000, stall_seconds: float = 120.0):
    """Yield the committed messages of `r` (confluent-kafka Message objects), in offset order.

    read_committed skips aborted records and transaction markers, so the last message may
    come before `end`; the read is complete once the consumer's position reaches `end`.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition  # noqa: PLC0415  (start-up: confluent_kafka)

    c = Consumer({**conf, "group.id": "flowlake-ingest-fetch", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "error",
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                  "enable.partition.eof": False})
    try:
        tp = TopicPartition(r.topic, r.partition, r.start)
        c.assign([tp])
        progress = time.monotonic()
        pos = r.start
        while pos < r.end:
            msgs = c.consume(batch, timeout=0.5)
            for m in msgs:
                if m.error():
                    raise KafkaException(m.error())
                if m.offset() >= r.end:
                    pos = r.end
                    break
                yield m
            if pos >= r.end:
                break
            got = c.position([TopicPartition(r.topic, r.partition)])[0].offset
            if got > pos:
                pos, progress = got, time.monotonic()
            elif time.monotonic() - progress > stall_seconds:
                raise RuntimeError(f"{r.topic}[{r.partition}]: no progress reading offsets {r.start}..{r.end} "
                                   f"for {stall_seconds:.0f} s (at {pos}): is the broker reachable from the task?")
    finally:
        c.close()
