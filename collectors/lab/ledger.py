"""Exactly-once lab results, as the shipper does for nfcapd files: one Kafka transaction
per run holds its result rows (experiments.v1), its probe records (active.v1) and its
ledger record ([kafka] lab_ledger_topic, compacted, key "<study>/<grid id>", value = the
run's done marker). A run whose transaction committed is published, whatever became of
the process after; a rerun reads the ledger read_committed and writes back the markers a
stop lost instead of publishing those runs again. One transactional id per study: a
rerun fences a stopped instance, whose open transaction is aborted, before it reads.
"""
from __future__ import annotations

import json

from flowlake.collectors import kafka
from flowlake.collectors.active.publish import encode as active_record
from flowlake.collectors.ship import read_ledger

from .results import encode
from .spec import Run

TIMEOUT_S = 30.0


class Ledger:
    def __init__(self, cfg, study: str):
        from confluent_kafka import Producer  # noqa: PLC0415  (start-up: confluent_kafka)

        self.cfg, self.study, self.topic = cfg, study, cfg.kafka.lab_ledger_topic
        kafka.ensure_topics(cfg)  # a stack started before the ledger existed gets it now
        conf = cfg.kafka_client_conf()
        conf.update({"transactional.id": f"flowlake-lab.{study}.{self.topic}", "acks": "all",
                     "enable.idempotence": True, "linger.ms": 5, "transaction.timeout.ms": 60000})
        self.producer = Producer(conf)
        self.producer.init_transactions(TIMEOUT_S)

    def key(self, run: Run) -> bytes:
        return f"{self.study}/{run.grid_id}".encode()

    def recorded(self) -> dict[str, dict]:
        """grid id -> the done marker of every run of this study the ledger holds."""
        prefix = self.study + "/"
        return {k[len(prefix):]: v for k, v in read_ledger(self.cfg, TIMEOUT_S, self.topic).items()
                if k.startswith(prefix)}

    def publish(self, run: Run, rows: list[dict], probes: list[dict], marker: dict) -> None:
        """Rows, probes and the ledger record in one transaction: all readable, or none."""
        k, p = self.cfg.kafka, self.producer
        messages = [(k.experiments_topic, r["run_id"].encode(), encode(r)) for r in rows]
        messages += [(k.active_topic, f"{r['source']}>{r['destination']}".encode(), active_record(r)) for r in probes]
        messages.append((self.topic, self.key(run), json.dumps(marker).encode()))
        self._transaction(messages)

    def forget(self) -> int:
        """`lab run --fresh`: tombstones for this study's runs, so none is taken as published."""
        keys = [f"{self.study}/{g}".encode() for g in self.recorded()]
        if keys:
            self._transaction([(self.topic, key, None) for key in keys])
        return len(keys)

    def _transaction(self, messages: list[tuple[str, bytes, bytes | None]]) -> None:
        p = self.producer
        p.begin_transaction()
        try:
            for topic, key, value in messages:
                while True:
                    try:
                        p.produce(topic, value=value, key=key)
                        break
                    except BufferError:
                        p.poll(0.1)
                p.poll(0)
            p.commit_transaction(TIMEOUT_S)  # flushes; raises if any record was not delivered
        except BaseException:
            try:
                p.abort_transaction(TIMEOUT_S)
            except Exception:  # noqa: BLE001 - the first error is the one to report
                pass
            raise
