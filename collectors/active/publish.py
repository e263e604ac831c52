"""Avro single-object encoding of ActiveResult and publishing to Kafka active.v1."""
from __future__ import annotations

import datetime as dt
import io
from functools import lru_cache

from flowlake.base import config
from flowlake.schemas import avro, registry


@lru_cache(maxsize=8)
def _schema(name: str = "ActiveResult"):
    record = registry()[name]
    return avro.parsed(record), avro.header(record)


def encode(rec: dict, record_name: str = "ActiveResult") -> bytes:
    """Avro single-object encoding of `rec` as the named record (schemas registry)."""
    import fastavro  # noqa: PLC0415  (start-up: fastavro)

    schema, head = _schema(record_name)
    buf = io.BytesIO()
    buf.write(head)
    fastavro.schemaless_writer(buf, schema, rec)
    return buf.getvalue()


def decode(data: bytes) -> dict:
    """Inverse of encode; timestamps come back as epoch milliseconds."""
    import fastavro  # noqa: PLC0415  (start-up: fastavro)

    schema, head = _schema()
    if data[: len(head)] != head:
        raise ValueError("not an ActiveResult single-object message (magic/fingerprint mismatch)")
    rec = fastavro.schemaless_reader(io.BytesIO(data[len(head):]), schema)
    for key in ("start", "end"):
        if isinstance(rec[key], dt.datetime):
            rec[key] = int(round(rec[key].timestamp() * 1000))
    return rec


def publish(records: list[dict], cfg=None, topic: str | None = None, timeout: float = 30.0) -> int:
    """Produce every record (acks=all, idempotent); raise if any was not delivered."""
    cfg = cfg or config.get()
    payloads = [encode(r) for r in records]  # encode everything before sending anything
    keys = [f"{r['source']}>{r['destination']}".encode() for r in records]  # one path stays in order
    return produce(payloads, keys, topic or cfg.kafka.active_topic, cfg, timeout)


def produce(payloads: list[bytes], keys: list[bytes], topic: str, cfg, timeout: float = 30.0) -> int:
    """Produce encoded messages (acks=all, idempotent); raise if any was not delivered."""
    from confluent_kafka import Producer  # noqa: PLC0415  (start-up: confluent_kafka)

    conf = cfg.kafka_client_conf()
    conf.update({"acks": "all", "enable.idempotence": True, "linger.ms": 5,
                 "message.timeout.ms": int(timeout * 1000)})
    producer = Producer(conf)
    failures: list[str] = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(str(err))

    for key, value in zip(keys, payloads):
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(timeout)
    if left or failures:
        raise RuntimeError(f"Kafka {cfg.kafka_bootstrap} topic {topic}: {left} undelivered, "
                           f"{len(failures)} failed ({failures[:1]})")
    return len(payloads)
