"""A single-node Kafka 4.1 broker in KRaft mode, run from the jars in .jars/kafka."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from flowlake.base import config as _config
from flowlake.base.component import ModuleComponent
from flowlake.base.process import Managed, port_open, wait_until
from flowlake.collectors import kafka_retention as retention

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
# one node: a few partitions for the internal topics make the first transaction and
# consumer group start in a second instead of creating 50 partitions each
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
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


SECURE = """\
listeners={proto}://{host}:{port},CONTROLLER://{host}:{cport}
advertised.listeners={proto}://{host}:{port}
listener.security.protocol.map={proto}:{proto},CONTROLLER:PLAINTEXT
inter.broker.listener.name={proto}
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.{lname}.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\
  username="{user}" password="{password}" user_{user}="{password}";
"""
TLS = """\
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
ssl.truststore.type=PEM
ssl.truststore.location={ca}
ssl.client.auth=none
"""


def make_tls(kdir: Path, host: str) -> tuple[Path, Path]:
    """A private CA and a broker certificate for host (made once, kept under $FLOWLAKE_HOME)."""
    tls = kdir / "tls"
    ca, keystore = tls / "ca.pem", tls / "broker-keystore.pem"
    if ca.exists() and keystore.exists():
        return ca, keystore
    tls.mkdir(parents=True, exist_ok=True)
    os.chmod(tls, 0o700)

    def ssl(*args):
        res = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=tls)
        if res.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {res.stderr}")

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "3650", "-subj", "/CN=flowlake local CA")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
        "-subj", f"/CN={host}")
    (tls / "san.ext").write_text(f"subjectAltName=IP:{host},DNS:localhost\n"
                                 if host.replace(".", "").isdigit() else f"subjectAltName=DNS:{host}\n")
    ssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "broker.pem", "-days", "3650", "-extfile", "san.ext")
    ssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.pk8")
    keystore.write_text((tls / "broker.pk8").read_text() + (tls / "broker.pem").read_text())
    for f in tls.iterdir():
        os.chmod(f, 0o600)
    return ca, keystore


def write_properties(cfg) -> Path:
    k = cfg.kafka
    kdir = cfg.path("kafka")
    kdir.mkdir(parents=True, exist_ok=True)
    props = kdir / "server.properties"
    text = PROPERTIES.format(
        host=k.host, port=k.port, cport=k.controller_port, data=kdir / "data", partitions=k.partitions,
    )
    proto = k.security_protocol.upper()
    if proto != "PLAINTEXT":
        if proto not in ("SASL_SSL", "SASL_PLAINTEXT"):
            raise RuntimeError(f"kafka.security_protocol={k.security_protocol!r}: use PLAINTEXT, SASL_PLAINTEXT or SASL_SSL")
        if k.sasl_mechanism.upper() != "PLAIN":
            raise RuntimeError("the local broker supports sasl_mechanism PLAIN (use an external broker for SCRAM/GSSAPI)")
        if not k.sasl_username or not k.sasl_password:
            raise RuntimeError("kafka.security_protocol is SASL: set FLOWLAKE_KAFKA_SASL_USERNAME and "
                               "FLOWLAKE_KAFKA_SASL_PASSWORD (there is no default credential)")
        secure = SECURE.format(proto=proto, lname=proto.lower(), host=k.host, port=k.port,
                               cport=k.controller_port, user=k.sasl_username, password=k.sasl_password)
        if proto == "SASL_SSL":
            ca, keystore = make_tls(kdir, k.host)
            secure += TLS.format(keystore=keystore, ca=ca)
        drop = ("listeners=", "advertised.listeners=", "listener.security.protocol.map=", "inter.broker.listener.name=")
        text = "\n".join(line for line in text.splitlines() if not line.startswith(drop)) + "\n" + secure
    props.write_text(text)
    os.chmod(props, 0o600)  # may hold the SASL password
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
        ["java", "-Xms256m", f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
         f"-Dlog4j2.configurationFile={props.parent / 'log4j2.properties'}",
         "-cp", java_cp(), "kafka.Kafka", str(props)],
    )
    wait_until(lambda: port_open(cfg.kafka.host, cfg.kafka.port), timeout, "Kafka to listen", proc=proc)
    ensure_topics(cfg)
    return pid


def ensure_topics(cfg=None, timeout: float = 60.0) -> None:
    """Create flows.v1, active.v1, flows.dlq, health.v1 and the shipper ledger topic if missing."""
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415  (start-up: confluent_kafka)

    cfg = cfg or _config.get()
    k = cfg.kafka
    admin = AdminClient(cfg.kafka_client_conf())

    bounded = {t: retention.topic_configs(cfg, n) for t, n in retention.data_topics(cfg).items()}
    wanted = {
        k.flows_topic: (k.partitions, {"compression.type": "producer", **bounded[k.flows_topic]}),
        k.active_topic: (1, bounded[k.active_topic]),
        k.dlq_topic: (1, bounded[k.dlq_topic]),
        # The ledger says which nfcapd files were shipped; compacted, keyed by file.
        k.ledger_topic: (1, {"cleanup.policy": "compact"}),
        k.health_topic: (1, bounded[k.health_topic]),  # exporter health rows (collectors/health.py)
        k.experiments_topic: (1, bounded[k.experiments_topic]),  # lab results (collectors/lab)
        k.lab_ledger_topic: (1, {"cleanup.policy": "compact"}),  # lab runs published (collectors/lab/ledger.py)
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
    retention.apply(cfg, admin)  # topics made before [retention] changed get the new bounds


def end_offsets(cfg, consumer, topic: str, isolation: str, settle: float = 5.0,
                timeout: float = 10.0) -> dict[int, int]:
    """The offset `consumer` (of `isolation`) reads up to, per partition of `topic`.

    read_committed ends at the last stable offset (LSO). A transaction's commit returns
    before the broker has written its markers, so just after a commit the LSO can still
    stand before the committed records (seen: a partition reading as empty). Wait up to
    `settle` seconds for the LSO to reach the high watermark; a transaction still open
    after that holds it back for good, and its records are not readable anyway.
    The queries go through `consumer`, which then has the topic's metadata to start from.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition  # noqa: PLC0415  (start-up: confluent_kafka)

    # a topic just made (or a broker under load) answers "not leader" / "leader not
    # available" until its partitions' leaders are elected: retried within `timeout`
    transient = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT}

    def ends(c) -> dict[int, int]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return {tp.partition: c.get_watermark_offsets(tp, timeout=timeout)[1] for tp in tps}
            except KafkaException as exc:
                err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
                if err is None or err.code() not in transient or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    parts = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
    tps = [TopicPartition(topic, p) for p in parts]
    if isolation != "read_committed":
        return ends(consumer)
    uncommitted = Consumer({**cfg.kafka_client_conf(), "group.id": "flowlake-end-offsets",
                            "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    try:
        high = ends(uncommitted)
    finally:
        uncommitted.close()
    deadline = time.monotonic() + settle
    while True:
        stable = ends(consumer)
        if all(stable[p] >= high[p] for p in high) or time.monotonic() > deadline:
            return stable
        time.sleep(0.05)


def healthy(cfg=None) -> bool:
    cfg = cfg or _config.get()
    return managed(cfg).running() and port_open(cfg.kafka.host, cfg.kafka.port)


def stop(cfg=None) -> bool:
    return managed(cfg).stop(timeout=60)


@dataclass(frozen=True)
class BrokerSettings:
    """[kafka] as the local broker uses it."""
    host: str
    port: int
    controller_port: int
    bootstrap: str


class KafkaBroker(ModuleComponent):
    """The single-node KRaft broker (storage formatted and topics created on first start)."""
    name = "kafka"
    settings_type = BrokerSettings
    section = "kafka"
    functions = sys.modules[__name__]

    def port(self) -> int:
        return self.settings.port

    def healthy_port(self) -> bool:
        return port_open(self.settings.host, self.settings.port)
