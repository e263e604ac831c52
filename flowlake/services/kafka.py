"""A single-node Kafka 4.1 broker in KRaft mode, run from the jars in .jars/kafka."""
from __future__ import annotations

import logging
import subprocess
import uuid
from pathlib import Path

from .. import config as _config
from .process import Managed, port_open, wait_until

log = logging.getLogger(__name__)
JARS = _config.REPO_ROOT / ".jars" / "kafka"

PROPERTIES = """\
# written by flowlake from flowlake.toml; edit the config, not this file
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers={host}:{cport}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{cport}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions={partitions}
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
message.max.bytes=10485760
transaction.max.timeout.ms=900000
log.retention.hours=168
log.flush.interval.messages=10000
"""


def managed(cfg=None) -> Managed:
    cfg = cfg or _config.get()
    return Managed("kafka", cfg.path("run"), cfg.path("log"))


def java_cp() -> str:
    if not any(JARS.glob("*.jar")):
        raise RuntimeError(f"Kafka jars missing in {JARS}: run `make setup`")
    return str(JARS / "*")


def write_properties(cfg) -> Path:
    k = cfg.kafka
    kdir = cfg.path("kafka")
    kdir.mkdir(parents=True, exist_ok=True)
    props = kdir / "server.properties"
    props.write_text(PROPERTIES.format(
        host=k.host, port=k.port, cport=k.controller_port, data=kdir / "data", partitions=k.partitions,
    ))
    log4j = kdir / "log4j2.properties"
    log4j.write_text(
        "rootLogger.level=WARN\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
        "appender.stdout.type=Console\nappender.stdout.name=STDOUT\n"
        "appender.stdout.layout.type=PatternLayout\n"
        "appender.stdout.layout.pattern=[%d] %p %m (%c)%n\n"
        "logger.kafka.name=kafka\nlogger.kafka.level=INFO\n"
        "logger.server.name=kafka.server.KafkaServer\nlogger.server.level=INFO\n"
    )
    return props


def format_storage(cfg, props: Path) -> None:
    data = cfg.path("kafka", "data")
    if (data / "meta.properties").exists():
        return
    cluster = subprocess.run(
        ["java", "-cp", java_cp(), "kafka.tools.StorageTool", "random-uuid"],
        capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()[-1] or uuid.uuid4().hex
    res = subprocess.run(
        ["java", "-cp", java_cp(), "kafka.tools.StorageTool", "format", "--standalone",
         "-t", cluster, "-c", str(props)],
        capture_output=True, text=True,
    )
    if res.returncode != 0:
        raise RuntimeError(f"Kafka storage format failed:\n{res.stdout}\n{res.stderr}")
    log.info("formatted Kafka storage in %s (cluster %s)", data, cluster)


def start(cfg=None, timeout: float = 90.0) -> int:
    cfg = cfg or _config.get()
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    if port_open(cfg.kafka.host, cfg.kafka.port):
        raise RuntimeError(
            f"port {cfg.kafka.port} is in use by another process: set FLOWLAKE_KAFKA_PORT "
            "(and FLOWLAKE_KAFKA_CONTROLLER_PORT) to free ports"
        )
    props = write_properties(cfg)
    format_storage(cfg, props)
    heap = cfg.kafka.heap
    pid = proc.start(
        ["java", f"-Xms256m", f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
         f"-Dlog4j2.configurationFile={props.parent / 'log4j2.properties'}",
         "-cp", java_cp(), "kafka.Kafka", str(props)],
    )
    wait_until(lambda: port_open(cfg.kafka.host, cfg.kafka.port), timeout, "Kafka to listen", proc=proc)
    ensure_topics(cfg)
    return pid


def ensure_topics(cfg=None, timeout: float = 60.0) -> None:
    """Create flows.v1, active.v1, flows.dlq and the shipper ledger topic if missing."""
    from confluent_kafka.admin import AdminClient, NewTopic

    cfg = cfg or _config.get()
    k = cfg.kafka
    admin = AdminClient(cfg.kafka_client_conf())
    wanted = {
        k.flows_topic: (k.partitions, {"compression.type": "producer"}),
        k.active_topic: (1, {}),
        k.dlq_topic: (1, {}),
        # The ledger says which nfcapd files were shipped; compacted, keyed by file.
        k.ledger_topic: (1, {"cleanup.policy": "compact"}),
    }

    def missing():
        existing = admin.list_topics(timeout=10).topics
        return [t for t in wanted if t not in existing]

    wait_until(lambda: admin.list_topics(timeout=5).brokers, timeout, "Kafka broker metadata")
    todo = missing()
    if todo:
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=wanted[t][0], replication_factor=1, config=wanted[t][1]) for t in todo]
        )
        for topic, fut in futures.items():
            try:
                fut.result()
                log.info("created topic %s", topic)
            except Exception as exc:  # TOPIC_ALREADY_EXISTS after a race is fine
                if "already exists" not in str(exc).lower():
                    raise


def healthy(cfg=None) -> bool:
    cfg = cfg or _config.get()
    return managed(cfg).running() and port_open(cfg.kafka.host, cfg.kafka.port)


def stop(cfg=None) -> bool:
    return managed(cfg).stop(timeout=60)
