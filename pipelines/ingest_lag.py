"""How far the ingest is behind Kafka, and how fast it lands rows: for `flowlake status`.

Position: the end offsets of the last micro-batch the ingest committed (its Spark
checkpoint, offsets/<batch> once commits/<batch> exists). End: what a read_committed
consumer can read now. Offsets behind count transaction markers too (one per partition
and shipped file), so they are an upper bound on messages. Flows behind are estimated
from the flows per offset of the recent batches (a FlowBatch message holds thousands,
a legacy Avro message one). Rates come from the batches' done-markers.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from flowlake.base.process import port_open
from flowlake.collectors import kafka

from .ingest import streams

RECENT_BATCHES = 20


def committed_offsets(checkpoint: Path) -> dict[str, dict[int, int]]:
    """{topic: {partition: next offset}} of the last committed batch ({} before the first)."""
    commits = sorted((int(p.name) for p in (checkpoint / "commits").glob("[0-9]*") if p.name.isdigit()),
                     reverse=True)
    from .batch_offsets import CheckpointError, end_offsets  # noqa: PLC0415  (start-up: flowlake status)

    for batch in commits:
        try:
            return end_offsets(checkpoint, batch)
        except CheckpointError:
            continue
    return {}


def recent_batches(state_dir: Path, n: int = RECENT_BATCHES) -> list[dict]:
    """The newest batches' counters: a Delta-written table's from `<table>-recent.json`
    beside its state folder (flow_ingest.add_totals), else from the done-markers."""
    recent = state_dir.with_name(state_dir.name + "-recent.json")
    if recent.exists():
        try:
            return json.loads(recent.read_text())[-n:][::-1]
        except (OSError, ValueError):
            return []
    out = []
    for marker in sorted(state_dir.glob("*.done"), reverse=True)[:n]:
        try:
            out.append(json.loads(marker.read_text()))
        except (OSError, ValueError):
            continue
    return out


def rates(batches: list[dict], now: float | None = None) -> dict:
    """Rows/s landed over the last minute, and while busy over the recent batches."""
    now = now or time.time()
    minute = sum(b.get("rows", 0) for b in batches if b.get("at", 0) > now - 60)
    busy = [b for b in batches if b.get("seconds")]
    rows_busy = sum(b.get("rows", 0) for b in busy)
    secs = sum(b["seconds"] for b in busy)
    msgs = sum(b.get("messages", 0) for b in batches)
    offsets = sum(b.get("offsets", 0) for b in batches)
    return {
        "rows_per_s_last_minute": round(minute / 60, 1),
        "rows_per_s_while_busy": round(rows_busy / secs, 1) if secs else None,
        "flows_per_message": round(sum(b.get("rows", 0) for b in batches) / msgs, 1) if msgs else None,
        # per offset: what lag in offsets (markers included) means in flows
        "flows_per_offset": round(sum(b.get("rows", 0) for b in batches) / offsets, 1) if offsets else None,
        "last_batch_at": max((b.get("at", 0) for b in batches), default=None),
    }


def status(cfg) -> dict:
    """{table: {topic, offsets_behind, flows_behind, per-partition, rates}}; never raises."""
    out: dict = {}
    reachable = port_open(cfg.kafka.host, cfg.kafka.port) if not cfg.kafka.bootstrap else True
    for stream in streams(cfg):
        info: dict = {"topic": stream.topic}
        info.update(rates(recent_batches(cfg.path("state", "ingest", stream.table))))
        try:
            ends = _end_offsets(cfg, stream.topic) if reachable else None
        except Exception as exc:  # status must never crash on a sick broker
            info["error"] = str(exc)
            ends = None
        if ends is not None:
            pos = committed_offsets(cfg.path("state", "checkpoints", stream.table)).get(stream.topic, {})
            behind = {p: max(0, end - pos.get(p, lo)) for p, (lo, end) in ends.items()}
            info["partitions"] = {p: {"end": ends[p][1], "ingested": pos.get(p, ends[p][0]), "behind": b}
                                  for p, b in behind.items()}
            info["offsets_behind"] = sum(behind.values())
            per = info["flows_per_offset"] or info["flows_per_message"]
            info["flows_behind_estimate"] = (0 if info["offsets_behind"] == 0 else
                                             round(info["offsets_behind"] * per) if per else None)
        out[stream.table] = info
    return out


def _end_offsets(cfg, topic: str) -> dict[int, tuple[int, int]] | None:
    """{partition: (low watermark, read_committed end)}; None when the topic is missing."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415  (start-up: confluent_kafka)

    c = Consumer({**cfg.kafka_client_conf(), "group.id": "flowlake-status-lag", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    try:
        if topic not in c.list_topics(timeout=5).topics:
            return None
        ends = kafka.end_offsets(cfg, c, topic, "read_committed", settle=0.5, timeout=5)
        return {p: (c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[0], e) for p, e in ends.items()}
    finally:
        c.close()
