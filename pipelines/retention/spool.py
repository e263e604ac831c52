"""Which nfcapd spool files are safe to delete: the ledger and the ingest decide.

A file is in the lake when
  1. the ledger topic has it: its flows and its ledger record were one Kafka transaction,
     so once the ledger record is readable read_committed, all its flows are in flows.v1;
  2. the ingest has committed a micro-batch (its done-marker in state/ingest/flows) whose
     Spark checkpoint offsets reach, on every partition, the end of the file's records.
The end of a file's records: the shipper stamps each record when it produces it and
writes the ledger entry's `shipped_at` after the last one, so every record of the file lies
below the first offset stamped after shipped_at (Kafka's offsets-for-times); where no
record is that new yet, below the partition's end. Noted once per file in
state/retention/spool.json. A file not in the ledger, or whose records the lake has not
reached, is never deleted.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from pathlib import Path

from flowlake.base.process import port_open
from flowlake.collectors import ship

from .tiers import Tier, Unit, disk_bytes, nfcapd_day

log = logging.getLogger("flowlake.retention")


def spool_files(cfg) -> dict[str, Path]:
    """Closed nfcapd files below the spool by ledger key (path below the spool)."""
    spool = cfg.path("nfcapd")
    out = {}
    if not spool.is_dir():
        return out
    for base, dirs, files in os.walk(spool):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            if f.startswith("nfcapd.") and ".current." not in f:
                p = Path(base, f)
                out[p.relative_to(spool).as_posix()] = p
    return out


def state_path(cfg) -> Path:
    return cfg.path("state", "retention", "spool.json")


def load_state(cfg) -> dict:
    try:
        return json.loads(state_path(cfg).read_text())
    except (OSError, ValueError):
        return {}


def save_state(cfg, state: dict) -> None:
    path = state_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def lake_committed_offsets(cfg) -> dict[int, int] | None:
    """End offsets (per flows.v1 partition) of the newest micro-batch the ingest wrote into
    the lake: the flows table's ingest transaction reached it and Spark's checkpoint holds its offsets (read as the
    ingest reads them, pipelines/batch_offsets.py)."""
    from flowlake.pipelines.batch_offsets import CheckpointError, end_offsets  # noqa: PLC0415  (start-up: flowlake status)

    topic = cfg.kafka.flows_topic
    checkpoint = cfg.path("state", "checkpoints", "flows")
    table = Path(cfg.lake) / "flows"
    if not (table / "_delta_log").is_dir():
        return None
    from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

    last = delta.committed_version(table, "ingest-flows")  # every batch up to it is in the table
    if last is None:
        return None
    for batch in range(last, max(-1, last - 200), -1):
        try:
            ends = end_offsets(checkpoint, batch)
        except CheckpointError:  # not in the checkpoint (yet, or any more): an older batch may be
            continue
        if topic in ends:
            return ends[topic]
    return None


def records_end(cfg, shipped: dict[str, float]) -> dict[str, dict[int, int]]:
    """{file: {partition: offset}} below which all of each file's flows.v1 records lie,
    from the time its ledger entry was written (epoch seconds)."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415  (start-up: confluent_kafka)

    topic = cfg.kafka.flows_topic
    consumer = Consumer({**cfg.kafka_client_conf(), "group.id": "flowlake-retention", "enable.auto.commit": False})
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        out = {}
        for name, at in shipped.items():
            cut = int(at * 1000) + 1  # the first millisecond after the ledger entry
            found = consumer.offsets_for_times([TopicPartition(topic, p, cut) for p in parts], timeout=10)
            out[name] = {tp.partition: tp.offset if tp.offset >= 0 else high[tp.partition] for tp in found}
        return out
    finally:
        consumer.close()


def broker_up(cfg) -> bool:
    host, _, port = cfg.kafka_bootstrap.split(",")[0].rpartition(":")
    return port_open(host or "127.0.0.1", int(port))


def covered(needed: dict, committed: dict[int, int] | None) -> bool:
    if committed is None:
        return False
    return all(committed.get(int(p), -1) >= int(o) for p, o in needed.items())


def shipped_at(entry: dict) -> float | None:
    try:
        return dt.datetime.fromisoformat(entry["shipped_at"].replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError, AttributeError):
        return None


def spool_tier(cfg, now: float | None = None, ledger: dict | None = None) -> Tier:
    """The spool with the files retention may delete (expire) and why the others stay.
    Notes first-seen end offsets in the state file (an observation, also in a dry run)."""
    now = time.time() if now is None else now
    grace = float(cfg.retention.spool_grace_hours) * 3600
    files = spool_files(cfg)
    tier = Tier("spool", f"in the lake + {cfg.retention.spool_grace_hours} h")
    for name, path in sorted(files.items()):
        tier.units.append(Unit("spool", path, nfcapd_day(path.name), disk_bytes(path)))
    if not files:
        return tier
    try:
        if not broker_up(cfg):
            raise RuntimeError(f"Kafka at {cfg.kafka_bootstrap} does not answer")
        if ledger is None:
            ledger = ship.read_ledger(cfg, timeout=10)
        state = {k: v for k, v in load_state(cfg).items() if k in files}  # forget deleted files
        new = {name: shipped_at(ledger[name]) or now for name in files if name in ledger and name not in state}
        for name, ends in records_end(cfg, new).items():
            state[name] = {"offsets": {str(p): o for p, o in ends.items()}, "seen": now}
    except Exception as exc:  # no broker: nothing can be proven shipped, so nothing goes
        tier.note = "ledger unreadable: every file kept"
        log.warning("spool: ledger unreadable, every file kept: %s", exc)
        return tier
    save_state(cfg, state)
    committed = lake_committed_offsets(cfg)
    kept = {"not shipped": 0, "shipped, not yet in the lake": 0, "in the lake, within grace": 0}
    by_path = {u.path: u for u in tier.units}
    for name, path in sorted(files.items()):
        if name not in ledger:
            kept["not shipped"] += 1
        elif not covered(state[name]["offsets"], committed):
            kept["shipped, not yet in the lake"] += 1
        else:
            at = shipped_at(ledger[name]) or state[name]["seen"]
            unit = by_path[path]
            unit.why = f"in the lake, shipped {time.strftime('%Y-%m-%d %H:%M', time.gmtime(at))}Z"
            if now - at >= grace:
                tier.expire.append(unit)
            else:
                kept["in the lake, within grace"] += 1
                unit.why += " (within grace)"
    tier.note = ", ".join(f"{n} {k}" for k, n in kept.items() if n) or ""
    return tier


def within_grace(tier: Tier) -> list[Unit]:
    """Files already in the lake but kept for their grace: the guard's second choice."""
    gone = {id(u) for u in tier.expire}
    return [u for u in tier.units if id(u) not in gone and u.why.endswith("(within grace)")]
