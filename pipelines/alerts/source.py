"""Rotated intervals from Kafka: the alerts service's own consumer group on the flows topic
and the shipper's ledger topic, read_committed.

The shipper sends each nfcapd file's flows and its ledger record (file name, flows
shipped) in one transaction, so a file is complete once its ledger record and that many
flows are read, whatever partitions they came through: no waiting on the lake, no guess
from a quiet poll. Files `flowlake import` ships (old archives, ledger origin "import")
are not live traffic and are passed over. Offsets are committed only when no file is
half read, so a restart re-reads the half of a file it had not judged yet.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from flowlake.pipelines.flow_messages import BAD, BATCH, ROW, FlowDecoder

log = logging.getLogger(__name__)
MAX_PENDING = 1000  # files half read at most (a bound; beyond it the oldest are dropped and counted)
# FlowBatch messages (16k flows each) taken per poll: a service behind the stream reads ahead
# only this far before judging the files it completed, so its memory holds about the file
# in progress, not a backlog decoded at once (500 a poll grew a 200 k flows/s service that
# fell behind to 2.7 GB); Kafka keeps the rest.
MESSAGES_PER_POLL = 32


@dataclass
class Pending:
    tables: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    flows: int = 0
    ledger: dict | None = None


class LedgerIntervals:
    """Gathers decoded messages into complete files. Pure: tests feed it messages."""

    def __init__(self, decoder: FlowDecoder | None = None):
        self.decoder = decoder or FlowDecoder()
        self.pending: dict[str, Pending] = {}
        self.counts = {"messages": 0, "bad_messages": 0, "files": 0, "imported_files_skipped": 0, "dropped_files": 0}

    def flows_message(self, value: bytes) -> None:
        self.counts["messages"] += 1
        kind, got = self.decoder.decode(value)
        if kind == BAD:
            self.counts["bad_messages"] += 1
            log.warning("flows message not decoded (the ingest quarantines it): %s", got)
            return
        if kind == BATCH:
            if got.num_rows == 0:
                return
            names = got["source_file"].combine_chunks().dictionary_encode()
            files = names.dictionary.to_pylist()
            # the shipper sends one file per message: the table as it is, no filtering copy
            parts = [(files[0], got)] if len(files) == 1 else \
                [(name, got.filter(pc.equal(names.indices, i))) for i, name in enumerate(files)]
            for name, part in parts:
                p = self.pending.setdefault(name, Pending())
                p.tables.append(part)
                p.flows += part.num_rows
        elif kind == ROW:
            p = self.pending.setdefault(got["source_file"], Pending())
            p.rows.append(got)
            p.flows += 1

    def ledger_message(self, value: bytes) -> None:
        try:
            entry = json.loads(value)
            name, flows = entry["file"], int(entry["flows"])
        except (ValueError, KeyError, TypeError):
            log.warning("ledger record not understood: %r", value[:200])
            return
        self.pending.setdefault(name, Pending()).ledger = {**entry, "flows": flows}

    def complete(self) -> list[tuple[str, pa.Table]]:
        """Files whose ledger record and all flows are here, in name (= time) order."""
        out = []
        for name in sorted(self.pending):
            p = self.pending[name]
            if p.ledger is None or p.flows < p.ledger["flows"]:
                continue
            del self.pending[name]
            if p.ledger.get("origin") == "import":
                self.counts["imported_files_skipped"] += 1
                continue
            tables = p.tables + ([self.decoder.rows_table(p.rows)] if p.rows else [])
            flows = pa.concat_tables(tables) if tables else self.decoder.schema.empty_table()
            self.counts["files"] += 1
            out.append((name, flows))
        while len(self.pending) > MAX_PENDING:
            oldest = min(self.pending)
            del self.pending[oldest]
            self.counts["dropped_files"] += 1
            log.warning("file %s never completed (no ledger record or flows missing): dropped", oldest)
        return out


class KafkaIntervals:
    def __init__(self, cfg):
        from confluent_kafka import Consumer  # noqa: PLC0415  (start-up: confluent_kafka)

        a, k = cfg.alerts, cfg.kafka
        if a.start_from not in ("latest", "earliest"):
            raise ValueError(f"[alerts] start_from = {a.start_from!r}: use latest or earliest")
        self.flows_topic, self.ledger_topic = k.flows_topic, k.ledger_topic
        self.consumer = Consumer({**cfg.kafka_client_conf(), "group.id": a.group_id, "enable.auto.commit": False,
                                  "isolation.level": "read_committed", "auto.offset.reset": a.start_from,
                                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
        self.assigned = False
        self.consumer.subscribe([self.flows_topic, self.ledger_topic], on_assign=self._on_assign)
        self.files = LedgerIntervals()

    def _on_assign(self, consumer, partitions) -> None:
        self.assigned = True

    def poll(self, timeout: float = 1.0) -> list[tuple[str, pa.Table]]:
        msgs = self.consumer.consume(num_messages=MESSAGES_PER_POLL, timeout=timeout)
        for m in msgs:
            if m.error():
                log.warning("kafka: %s", m.error())
                continue
            if m.topic() == self.ledger_topic:
                self.files.ledger_message(m.value())
            else:
                self.files.flows_message(m.value())
        return self.files.complete()

    def commit(self) -> bool:
        """Commit what was read when no file is half read (else a restart would skip its rest)."""
        if self.files.pending:
            return False
        try:
            self.consumer.commit(asynchronous=False)
        except Exception as exc:  # nothing consumed yet (no offsets to commit), broker away
            if "NO_OFFSET" not in str(exc):
                log.warning("commit failed: %s", exc)
            return False
        return True

    def lag(self) -> int | None:
        """Messages behind the end of the flows topic (committed offsets of our group)."""
        from confluent_kafka import TopicPartition  # noqa: PLC0415  (start-up: confluent_kafka)

        try:
            parts = self.consumer.assignment()
            behind = 0
            for tp in parts:
                _, hi = self.consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=2, cached=True)
                pos = self.consumer.position([tp])[0].offset
                behind += max(0, hi - pos) if pos >= 0 else 0
            return behind
        except Exception:
            return None

    def close(self) -> None:
        self.consumer.close()
