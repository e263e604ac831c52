"""Kafka -> lake throughput of the streaming ingest (flows/s), beside a plain
confluent-kafka consumer reading the same messages (the floor any ingest pays).

    python bench/ingest.py [--flows 2000000]

Starts a private broker under a temporary FLOWLAKE_HOME; prints figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time

from flowlake.services.ports import free_port




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=2_000_000)
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="flowlake-bench-ingest-")
    os.environ.update({"FLOWLAKE_HOME": home, "FLOWLAKE_KAFKA_PORT": str(free_port()),
                       "FLOWLAKE_KAFKA_CONTROLLER_PORT": str(free_port()),
                       "FLOWLAKE_SPARK_MAX_OFFSETS_PER_TRIGGER": str(10**9)})
    from confluent_kafka import Consumer, Producer, TopicPartition

    from flowlake import config
    from flowlake.pipelines import ingest
    from flowlake.schemas import FLOW, avro
    from flowlake.services import kafka

    cfg = config.get()
    kafka.start(cfg)
    try:
        # Pre-encode a pool of distinct records, then produce them round-robin.
        base = int(dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc).timestamp() * 1000)
        pool = []
        for i in range(10_000):
            t = dt.datetime.fromtimestamp((base + i * 8_640) / 1000, dt.timezone.utc)
            pool.append(avro.encode(FLOW, {
                "time_start": t, "time_end": t, "exporter": "127.0.0.2", "input_if": 1, "output_if": 2,
                "src_addr": f"10.1.{i >> 8 & 255}.{i & 255}", "dst_addr": f"198.51.100.{i % 200}",
                "src_port": 40000 + i % 20000, "dst_port": 443, "proto": 6, "tcp_flags": 27, "tos": 0,
                "packets": 10 + i % 100, "bytes": 1500 * (10 + i % 100), "sampling_rate": 1,
                "src_as": 64500, "dst_as": 15169, "source_file": "bench", "file_seq": i}))
        producer = Producer({"bootstrap.servers": cfg.kafka_bootstrap, "linger.ms": 50,
                             "batch.num.messages": 100000, "compression.type": "lz4",
                             "queue.buffering.max.messages": 2_000_000})
        t0 = time.perf_counter()
        for i in range(args.flows):
            while True:
                try:
                    producer.produce(cfg.kafka.flows_topic, pool[i % len(pool)])
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush()
        produce_s = time.perf_counter() - t0
        print(f"loaded {args.flows:,} flows into Kafka in {produce_s:.1f}s")

        consumer = Consumer({"bootstrap.servers": cfg.kafka_bootstrap, "group.id": "bench",
                             "enable.auto.commit": False, "fetch.max.bytes": 52428800})
        meta = consumer.list_topics(cfg.kafka.flows_topic, timeout=10)
        consumer.assign([TopicPartition(cfg.kafka.flows_topic, p, 0) for p in meta.topics[cfg.kafka.flows_topic].partitions])
        t0, n = time.perf_counter(), 0
        while n < args.flows:
            n += len(consumer.consume(100000, timeout=1.0))
        raw_s = time.perf_counter() - t0
        consumer.close()

        from flowlake import spark as spark_factory

        spark_factory.session("bench-ingest", cfg=cfg)  # start-up excluded from the figure
        t0 = time.perf_counter()
        ingest.run(cfg, once=True)
        ingest_s = time.perf_counter() - t0
        rows = ingest.counts(cfg)["flows"]["rows"]
        assert rows == args.flows, f"lake has {rows} rows, expected {args.flows}"
        print(f"{'stage':44s} {'seconds':>8s} {'flows/s':>12s}")
        print(f"{'plain consumer (confluent-kafka, no decode)':44s} {raw_s:8.1f} {args.flows / raw_s:12,.0f}")
        print(f"{'flowlake ingest --once (decode+parquet)':44s} {ingest_s:8.1f} {args.flows / ingest_s:12,.0f}")
        print(f"ratio ingest/plain consumer: {raw_s / ingest_s:.2f}")
    finally:
        kafka.stop(cfg)


if __name__ == "__main__":
    sys.exit(main())
