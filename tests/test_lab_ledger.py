"""The lab's results ledger on a real broker: a run's rows and ledger record are one
transaction (read_committed sees both or neither); a rerun fences a stopped instance and
reads back what it committed; `--fresh` tombstones a study."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from flowlake.collectors.lab import results
from flowlake.collectors.lab.ledger import Ledger
from flowlake.collectors.lab.spec import parse


def _spec(study: str):
    return parse({"study": study, "topology": {"paths": {"a": {"rate": "10mbit"}}},
                  "grid": [{"kind": "bulk", "protocol": ["tcp", "udp"]}]})


def _committed(cfg, topic: str, key_prefix: str) -> list[bytes]:
    """Keys of `topic`'s records that start with key_prefix, read_committed."""
    from confluent_kafka import Consumer, TopicPartition

    from flowlake.services import kafka

    cons = Consumer({**cfg.kafka_client_conf(), "group.id": f"t-{uuid.uuid4().hex[:6]}",
                     "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        ends = kafka.end_offsets(cfg, cons, topic, "read_committed", settle=10)
        cons.assign([TopicPartition(topic, p, 0) for p in ends])
        keys, left = [], {p for p, end in ends.items() if end}
        while left:
            msg = cons.poll(2.0)
            if msg is None:  # control records are skipped: the position says we are through
                left -= {tp.partition for tp in cons.position([TopicPartition(topic, p) for p in left])
                         if tp.offset >= ends[tp.partition]}
                continue
            if msg.key() and msg.key().decode().startswith(key_prefix):
                keys.append(msg.key())
            if msg.offset() + 1 >= ends[msg.partition()]:
                left.discard(msg.partition())
        return keys
    finally:
        cons.close()


def test_rows_and_ledger_record_commit_together_and_a_rerun_reads_them(kafka, cfg):
    study = f"t{uuid.uuid4().hex[:8]}"
    done, stopped = _spec(study).runs
    rows = results.rows(done, {"throughput": 9e6, "rtt": 1.5}, 1_000, 2_000)
    first = Ledger(cfg, study)
    first.publish(done, rows, [], {"run_id": done.run_id, "status": "done", "metrics": {"throughput": 9e6}})
    # the second run's transaction is open when the process stops: its rows are sent, not committed
    first.producer.begin_transaction()
    for r in results.rows(stopped, {"throughput": 1e6}, 3_000, 4_000):
        first.producer.produce(cfg.kafka.experiments_topic, key=r["run_id"].encode(), value=results.encode(r))
    first.producer.flush(30)

    rerun = Ledger(cfg, study)  # fences `first`: its open transaction is aborted
    assert rerun.recorded() == {done.grid_id: {"run_id": done.run_id, "status": "done",
                                               "metrics": {"throughput": 9e6}}}
    keys = _committed(cfg, cfg.kafka.experiments_topic, study)
    assert sorted(keys) == [done.run_id.encode()] * len(rows)  # the stopped run's rows never became readable

    assert rerun.forget() == 1
    assert Ledger(cfg, study).recorded() == {}


def test_fresh_without_publishing_keeps_older_records_from_coming_back(kafka, cfg, tmp_path):
    """`lab run --fresh --no-publish` cannot tombstone the ledger; a publishing rerun after
    it must not take back the records from before the fresh start as its own results."""
    if os.geteuid() != 0:
        pytest.fail("the lab needs root (network namespaces); CI runs as root")
    study = f"f{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "fresh.toml"
    spec.write_text(f'study = "{study}"\nduration_s = 1\n[topology.paths.a]\nrate = "10mbit"\n'
                    '[[grid]]\nkind = "paced"\nprotocol = ["udp", "tcp"]\nframe_size = [200]\nrate = [100]\n')
    first = parse({"study": study, "duration_s": 1, "topology": {"paths": {"a": {"rate": "10mbit"}}},
                   "grid": [{"kind": "paced", "protocol": ["udp", "tcp"], "frame_size": [200], "rate": [100]}]}).runs[0]
    t0 = time.time() - 60  # an earlier, publishing lab ran the first run
    Ledger(cfg, study).publish(first, results.rows(first, {"achieved_rate": 100.0}, int(t0 * 1000), int(t0 * 1000)),
                               [], {"run_id": first.run_id, "label": first.label(), "status": "done", "start": t0,
                                    "end": t0 + 1, "metrics": {"achieved_rate": 100.0}})
    lab = [sys.executable, "-m", "flowlake.cli", "lab", "run", str(spec), "--no-export", "--state", str(tmp_path / "st")]
    fresh = subprocess.run([*lab, "--fresh", "--no-publish"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "FLOWLAKE_FAULT": "lab.server_up"})  # stopped in its first run
    assert fresh.returncode != 0 and "0 already done" in fresh.stderr, fresh.stderr
    rerun = subprocess.run([*lab, "--json"], capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stderr
    assert "published before a stop" not in rerun.stderr and "0 already done, 2 to run" in rerun.stderr
    marker = json.loads((tmp_path / "st" / study / f"{first.grid_id}.json").read_text())
    assert marker["run_id"] != first.run_id and marker["start"] > t0 + 30  # run again, not taken back
    assert json.loads(rerun.stdout)["done"] == 2
