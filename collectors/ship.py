"""`flowlake ship`: the Python side of the Go shipper (collectors/shipper/).

The Go binary reads nfcapd files natively and ships each one in one Kafka
transaction with its ledger entry; this module builds it, hands it the FLOW Avro
schema and fingerprint (the one declaration in schemas/flow.py), the settings from
flowlake.toml, and renders its progress. `serve_argv(cfg)` is what `flowlake up`
starts as the background shipper service.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from flowlake.base import config as _config
from flowlake.base.component import Component
from flowlake.base.gobuild import SHIPPER, go_binary  # noqa: F401 - go_binary used by tests
from flowlake.base.process import wait_until
from flowlake.collectors import sampling
from flowlake.collectors import kafka
from flowlake.schemas import FLOW

from . import health
from .schema_files import write_schema  # noqa: F401  (re-exported: ship.write_schema)

SHIPPER_DIR = SHIPPER.source
BINARY = SHIPPER.binary
build_binary = SHIPPER.build  # `go build` when missing or older than its sources


def spool_dir(cfg) -> Path:
    return cfg.path("nfcapd")


def state_file(cfg) -> Path:
    return cfg.path("state", "shipper.json")


def quarantine_dir(cfg) -> Path:
    return cfg.lake / "quarantine" / "nfcapd"




def schema_args(cfg) -> list[str]:
    """Write the FLOW Avro schema where the binary reads it; return its flags."""
    path, fingerprint = write_schema(cfg, FLOW, "flow.avsc")
    return ["--schema", str(path), "--fingerprint", fingerprint]


def common_args(cfg) -> list[str]:
    k, s = cfg.kafka, cfg.shipper
    args = [
        "--brokers", cfg.kafka_bootstrap,
        "--topic", k.flows_topic,
        "--ledger-topic", k.ledger_topic,
        "--spool", str(spool_dir(cfg)),
        "--state", str(state_file(cfg)),
        "--quarantine", str(quarantine_dir(cfg)),
        "--lock", str(cfg.path("run", "shipper.lock")),
        "--linger", f"{int(s.linger_ms)}ms",
        "--max-buffered", str(int(s.batch_records)),
        "--batch-bytes", str(int(s.batch_bytes)),
        "--compression", s.compression,
        "--format", s.message_format,
        "--flows-per-message", str(int(s.flows_per_message)),
        "--poll", f"{float(s.poll_seconds)}s",
        "--txn-timeout", f"{int(s.txn_timeout_seconds)}s",
        "--spool-warn-bytes", str(int(cfg.collector.spool_warn_bytes)),
        *schema_args(cfg),
        *sampling.shipper_args(cfg),
        "--max-future", f"{int(cfg.collector.max_future_seconds)}s",
        "--max-age", f"{int(cfg.collector.max_age_hours)}h",
        *health.shipper_args(cfg),
    ]
    if k.security_protocol != "PLAINTEXT":
        args += ["--security-protocol", k.security_protocol]
        if k.security_protocol.startswith("SASL"):
            args += ["--sasl-mechanism", k.sasl_mechanism, "--sasl-username", k.sasl_username]
        if k.ssl_cafile:
            args += ["--ssl-cafile", k.ssl_cafile]
    return args


def child_env(cfg) -> dict:
    """The SASL password travels in the environment, never on the command line."""
    env = dict(os.environ)
    if cfg.kafka.sasl_password:
        env["FLOWLAKE_KAFKA_SASL_PASSWORD"] = cfg.kafka.sasl_password
    return env


def serve_argv(cfg=None) -> list[str]:
    """The argv of the background shipper service (`flowlake up` starts it)."""
    cfg = cfg or _config.get()
    spool_dir(cfg).mkdir(parents=True, exist_ok=True)
    return [str(BINARY), "serve", *common_args(cfg)]


def ship_argv(cfg, files, pending=False, force=False, extra=()) -> list[str]:
    argv = [str(BINARY), "ship", "--events", *common_args(cfg), *extra]
    if pending:
        argv.append("--pending")
    if force:
        argv.append("--force")
    return argv + [str(f) for f in files]


class ShipperRun:
    """The Go binary run with --events: iterate its JSON events, then read .rc and .error."""

    def __init__(self, argv: list[str], env: dict):
        self._stderr = tempfile.TemporaryFile("w+")  # a file, not a pipe: its log cannot block the child
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)
        self.rc: int | None = None
        self.error = ""

    def __iter__(self):
        for line in self.proc.stdout:
            try:
                yield json.loads(line)
            except ValueError:
                continue
        self.rc = self.proc.wait()
        self._stderr.seek(0)
        stderr = self._stderr.read()
        if self.rc != 0:
            last = [ln for ln in stderr.splitlines() if ln.startswith("flowlake-shipper:")]
            self.error = last[-1].removeprefix("flowlake-shipper: ") if last else stderr.strip() or f"shipper exited {self.rc}"


def read_ledger(cfg=None, timeout: float = 30.0, topic: str | None = None) -> dict[str, dict]:
    """Files in the ledger topic (read_committed): {file: {"flows", "packets", ...}}.
    `topic`: another compacted ledger of JSON values (the lab's)."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415  (start-up: confluent_kafka)

    cfg = cfg or _config.get()
    topic = topic or cfg.kafka.ledger_topic
    consumer = Consumer({**cfg.kafka_client_conf(), "group.id": "flowlake-ledger-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})
    try:
        ends = kafka.end_offsets(cfg, consumer, topic, "read_committed", timeout=timeout)
        tps = [TopicPartition(topic, p, 0) for p in ends]
        consumer.assign(tps)
        out: dict[str, dict] = {}
        done = {p for p, end in ends.items() if end == 0}
        while len(done) < len(tps):
            msg = consumer.poll(1.0)
            if msg is None:
                # read_committed skips control records: position shows we reached the end
                for tp in consumer.position(tps):
                    if tp.offset >= ends[tp.partition]:
                        done.add(tp.partition)
                continue
            if msg.error():
                raise click.ClickException(f"ledger topic {topic}: {msg.error()}")
            key = msg.key().decode()
            if not key.startswith("__barrier__/"):
                if msg.value() is None:
                    out.pop(key, None)
                else:
                    out[key] = json.loads(msg.value())
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        return out
    finally:
        consumer.close()


EXAMPLES = """
\b
Examples:
  flowlake ship --pending                     ship everything nfcapd wrote that is not shipped yet
  flowlake ship var/nfcapd/nfcapd.202611201200   backfill one file (skipped if in the ledger)
  flowlake ship --force old/nfcapd.*          reship files even though the ledger has them
  flowlake ship --build                       (re)build the Go shipper binary only

Each file is shipped in one Kafka transaction together with its ledger entry
(topic kafka.ledger_topic), so a file appears exactly once to read_committed
readers even if the shipper is killed mid-file. Corrupt files found with
--pending are moved to $FLOWLAKE_HOME/lake/quarantine/nfcapd/ with a .reason file.
While the shipper service runs (`flowlake up`) it ships the spool itself and
holds its lock. To import an existing nfcapd archive, with the stack up or down,
use `flowlake import PATH...` (files known by content, beside the live shipper).
"""


@click.command("ship", epilog=EXAMPLES)
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--pending", is_flag=True, help="Ship every closed nfcapd file in $FLOWLAKE_HOME/nfcapd not yet in the ledger.")
@click.option("--force", is_flag=True, help="Ship FILES even if the ledger says they were shipped (duplicates their flows).")
@click.option("--build", "build_only", is_flag=True, help="Build the Go shipper (collectors/shipper) and exit.")
def ship(files: tuple[Path, ...], pending: bool, force: bool, build_only: bool) -> None:
    """Ship nfcapd files to Kafka (FlowBatch messages, or one Avro record per flow with
    shipper.message_format = "avro"), exactly once per file."""
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415  (start-up: rich)

    if build_only:
        path = build_binary(force=True)
        click.echo(f"built {path}")
        return
    if not files and not pending:
        raise click.UsageError("give nfcapd FILES to ship, or --pending")
    for f in files:
        if not f.exists():
            raise click.BadParameter(f"{f}: no such file", param_hint="FILES")
    cfg = _config.get()
    build_binary()
    argv = ship_argv(cfg, files, pending=pending, force=force)
    console = Console(stderr=True, soft_wrap=True)  # whole lines: errors stay greppable
    summary, errors = {}, []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[flows]:,} flows"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("shipping", total=len(files) or None, flows=0)
        run = ShipperRun(argv, child_env(cfg))
        flows = 0
        for ev in run:
            kind = ev.get("event")
            if kind == "progress":
                bar.update(task, description=f"shipping {ev['file']}", flows=flows + ev["flows"])
            elif kind == "shipped":
                flows += ev["flows"]
                bar.update(task, advance=1, flows=flows, description="shipping")
                console.print(f"shipped {ev['file']}: {ev['flows']:,} flows, {ev['packets']:,} packets, "
                              f"{ev['bytes']:,} bytes in {ev['seconds']:.2f}s")
            elif kind == "skipped":
                bar.update(task, advance=1)
                console.print(f"skipped {ev['file']}: {ev['reason']} (--force reships)")
            elif kind in ("quarantined", "failed"):
                bar.update(task, advance=1)
                errors.append(f"{kind} {ev['file']}: {ev['error']}")
                console.print(f"[red]{kind}[/red] {ev['file']}: {ev['error']}")
            elif kind == "summary":
                summary = ev
    if summary:
        click.echo(f"{summary['shipped']} files shipped ({summary['flows']:,} flows), "
                   f"{summary['skipped']} skipped, {summary['failed']} failed")
    if run.rc != 0:
        raise click.ClickException(run.error)


@dataclass(frozen=True)
class ShipperSettings:
    """[shipper] as the service passes it to the Go binary (serve_argv)."""
    message_format: str
    flows_per_message: int
    compression: str
    poll_seconds: float
    txn_timeout_seconds: int


class Shipper(Component):
    """The Go shipper: each nfcapd file into Kafka in one transaction with its ledger record."""
    name = "shipper"
    stop_timeout = 60.0
    pausable = True
    settings_type = ShipperSettings
    section = "shipper"

    def start(self) -> int:
        proc = self.managed()
        if proc.running():
            return proc.pid()
        build_binary()
        pid = proc.start(serve_argv(self.cfg))
        state = self.cfg.path("state", "shipper.json")
        wait_until(state.exists, 60, "the shipper to report its state", interval=0.5, proc=proc)
        return pid

    def status(self) -> dict:
        try:
            return json.loads(self.cfg.path("state", "shipper.json").read_text())
        except (OSError, ValueError):
            return {}
