"""Kafka's tier: retention.ms / retention.bytes of the data topics, from [retention].

Set when topics are created (services/kafka.py ensure_topics) and applied to existing
topics by every `flowlake up` and retention run. The ledger topic is compacted (one
record per shipped file) and keeps no time or size limit: losing it would reship files.
Kafka's retention.bytes is per partition, so kafka_bytes is split over the partitions.
Kafka deletes whole closed segments: segments are sized so a small bound is real.
"""
from __future__ import annotations

import logging

from flowlake.base.disk import disk_bytes, human

log = logging.getLogger("flowlake.retention")
MIB, GIB = 1 << 20, 1 << 30


def data_topics(cfg) -> dict[str, int]:
    """Topic -> partitions for the topics retention bounds."""
    k = cfg.kafka
    return {k.flows_topic: int(k.partitions), k.active_topic: 1, k.dlq_topic: 1, k.health_topic: 1, k.experiments_topic: 1}


def topic_configs(cfg, partitions: int) -> dict[str, str]:
    r = cfg.retention
    ms = int(r.kafka_hours) * 3600 * 1000 if int(r.kafka_hours) > 0 else -1
    per_part = max(1, int(r.kafka_bytes) // max(1, partitions)) if int(r.kafka_bytes) > 0 else -1
    conf = {"retention.ms": str(ms), "retention.bytes": str(per_part)}
    conf["segment.bytes"] = str(min(GIB, max(MIB, per_part // 4)) if per_part > 0 else GIB)
    conf["segment.ms"] = str(min(7 * 86400_000, max(60_000, ms // 4)) if ms > 0 else 7 * 86400_000)
    return conf


def limit_text(cfg) -> str:
    r = cfg.retention
    hours = f"{r.kafka_hours} h" if int(r.kafka_hours) > 0 else "no time limit"

    size = f"{human(int(r.kafka_bytes))}/topic" if int(r.kafka_bytes) > 0 else "no size limit"
    return f"{hours}, {size}"


def apply(cfg, admin=None, dry_run: bool = False) -> dict[str, dict]:
    """Set the retention configs on existing data topics (incremental: other settings
    stay). Returns {topic: {"set": configs, "was": previous values}}."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource  # noqa: PLC0415  (start-up: confluent_kafka)

    admin = admin or AdminClient(cfg.kafka_client_conf())
    current = describe(cfg, admin)
    existing = admin.list_topics(timeout=10).topics
    out, resources = {}, []
    for topic, parts in data_topics(cfg).items():
        if topic not in existing:
            continue
        want = topic_configs(cfg, len(existing[topic].partitions) or parts)
        was = {k: current.get(topic, {}).get(k) for k in want}
        out[topic] = {"set": want, "was": was, "changed": was != want}
        if was != want and not dry_run:
            resources.append(ConfigResource("topic", topic, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in want.items()]))
    if resources:
        for res, fut in admin.incremental_alter_configs(resources).items():
            fut.result()
            log.info("kafka topic %s: retention set to %s", res.name, out[res.name]["set"])
    return out


def describe(cfg, admin=None) -> dict[str, dict]:
    """Current retention settings of the data topics: {topic: {config: value}}."""
    from confluent_kafka.admin import AdminClient, ConfigResource  # noqa: PLC0415  (start-up: confluent_kafka)

    admin = admin or AdminClient(cfg.kafka_client_conf())
    existing = admin.list_topics(timeout=10).topics
    names = [t for t in data_topics(cfg) if t in existing]
    if not names:
        return {}
    futures = admin.describe_configs([ConfigResource("topic", t) for t in names])
    keys = ("retention.ms", "retention.bytes", "segment.bytes", "segment.ms")
    return {res.name: {k: entries[k].value for k in keys if k in entries}
            for res, fut in futures.items() for entries in [fut.result()]}


def local_bytes(cfg) -> dict[str, int]:
    """Bytes the local broker holds per data topic (its log folders under home)."""
    data = cfg.path("kafka", "data")
    out = {t: 0 for t in data_topics(cfg)}
    if data.is_dir():
        for d in data.iterdir():
            topic, _, part = d.name.rpartition("-")
            if topic in out and part.isdigit():
                out[topic] += disk_bytes(d)
    return out
