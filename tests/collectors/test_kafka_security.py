"""Kafka with SASL_SSL (SASL/PLAIN over TLS) on a local listener: our clients connect with
the configured credentials; wrong credentials and plaintext are refused; no default
credential exists."""
from __future__ import annotations

import uuid

import pytest

from flowlake.base.ports import free_port
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

import lake_sql

from flowlake.base import config
from flowlake.collectors import kafka as kafka_service

pytestmark = pytest.mark.integration




def test_no_default_sasl_credentials(tmp_path):
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    with pytest.raises(RuntimeError, match="FLOWLAKE_KAFKA_SASL_PASSWORD"):
        kafka_service.write_properties(cfg)


def test_sasl_ssl_listener(tmp_path, spark):
    password = uuid.uuid4().hex
    env = {"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_KAFKA_PORT": str(free_port()),
           "FLOWLAKE_KAFKA_CONTROLLER_PORT": str(free_port()), "FLOWLAKE_KAFKA_HEAP": "384m",
           "FLOWLAKE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "FLOWLAKE_KAFKA_SASL_USERNAME": "flowlake",
           "FLOWLAKE_KAFKA_SASL_PASSWORD": password}
    cfg = config.load(env=env)
    kafka_service.start(cfg)  # also creates the topics through SASL_SSL
    try:
        conf = cfg.kafka_client_conf()
        assert conf["security.protocol"] == "SASL_SSL" and conf["ssl.ca.location"].endswith("ca.pem")
        assert cfg.kafka.flows_topic in AdminClient(conf).list_topics(timeout=10).topics
        p = Producer({**conf, "enable.idempotence": True})
        p.produce(cfg.kafka.active_topic, b"over tls")
        assert p.flush(30) == 0
        c = Consumer({**conf, "group.id": "t", "auto.offset.reset": "earliest"})
        c.subscribe([cfg.kafka.active_topic])
        msg = None
        for _ in range(30):
            msg = c.poll(1.0)
            if msg is not None and not msg.error():
                break
        c.close()
        assert msg is not None and msg.value() == b"over tls"

        # The Spark ingest reads through the same SASL_SSL listener (Java client names).
        import datetime as dt

        import duckdb

        from flowlake.pipelines import ingest
        from flowlake.schemas import FLOW, avro

        t = dt.datetime(2026, 11, 20, 5, tzinfo=dt.timezone.utc)
        rec = {"time_start": t, "time_end": t, "exporter": "127.0.0.2", "input_if": 1, "output_if": 2,
               "src_addr": "10.0.0.1", "dst_addr": "192.0.2.1", "src_port": 1, "dst_port": 2, "proto": 6,
               "tcp_flags": 2, "tos": 0, "packets": 1, "bytes": 40, "sampling_rate": 1, "src_as": 0,
               "dst_as": 0, "source_file": "sasl", "file_seq": 0}
        p.produce(cfg.kafka.flows_topic, avro.encode(FLOW, rec))
        assert p.flush(30) == 0
        ingest.run(cfg, once=True)
        n = duckdb.connect().execute(
            f"select count(*) from {lake_sql.source(cfg.lake)}").fetchone()[0]
        assert n == 1

        bad = AdminClient({**conf, "sasl.password": "wrong"})
        with pytest.raises(KafkaException):
            bad.list_topics(timeout=8)
        plain = AdminClient({"bootstrap.servers": cfg.kafka_bootstrap})
        with pytest.raises(KafkaException):
            plain.list_topics(timeout=5)
        props = (tmp_path / "kafka" / "server.properties").stat().st_mode & 0o777
        assert props == 0o600
    finally:
        kafka_service.stop(cfg)
