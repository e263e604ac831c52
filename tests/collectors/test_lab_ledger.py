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
from flowlake.collectors.lab.run import State
from flowlake.collectors.lab.spec import load, parse
from needs import require


def _spec(study: str):
    return parse({"study": study, "topology": {"paths": {"a": {"rate": "10mbit"}}},
                  "grid": [{"kind": "bulk", "protocol": ["tcp", "udp"]}]})


def _committed(cfg, topic: str, key_prefix: str) -> list[bytes]:
    """Keys of `topic`'s records that start with key_prefix, read_committed."""
    from confluent_kafka import Consumer, TopicPartition

    from flowlake.collectors import kafka

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


@pytest.mark.integration
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


@pytest.mark.integration
@pytest.mark.root
def test_fresh_without_publishing_keeps_older_records_from_coming_back(kafka, cfg, tmp_path):
    """`lab run --fresh --no-publish` cannot tombstone the ledger; a publishing rerun after
    it must not take back the records from before the fresh start as its own results. The
    run it finished unpublished is published by that rerun from its marker, once, without
    being measured again: a stop between that commit and the marker leaves a ledger record
    the next rerun takes back; a further rerun publishes nothing."""
    require("netns", "tbf", why="network namespaces for the lab")
    study = f"f{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "fresh.toml"
    spec.write_text(f'study = "{study}"\nduration_s = 1\n[topology.paths.a]\nrate = "10mbit"\n'
                    '[[grid]]\nkind = "paced"\nprotocol = ["udp", "tcp"]\nframe_size = [200]\nrate = [100]\n')
    runs = parse({"study": study, "duration_s": 1, "topology": {"paths": {"a": {"rate": "10mbit"}}},
                  "grid": [{"kind": "paced", "protocol": ["udp", "tcp"], "frame_size": [200], "rate": [100]}]}).runs
    t0 = time.time() - 60  # an earlier, publishing lab ran both runs
    for run in runs:
        Ledger(cfg, study).publish(run, results.rows(run, {"achieved_rate": 100.0}, int(t0 * 1000), int(t0 * 1000)),
                                   [], {"run_id": run.run_id, "label": run.label(), "status": "done", "start": t0,
                                        "end": t0 + 1, "metrics": {"achieved_rate": 100.0}})
    state = tmp_path / "st" / study
    lab = [sys.executable, "-m", "flowlake.cli", "lab", "run", str(spec), "--no-export", "--state", str(tmp_path / "st")]
    fresh = subprocess.run([*lab, "--fresh", "--no-publish"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "FLOWLAKE_FAULT": "lab.server_up", "FLOWLAKE_FAULT_AFTER": "1"})
    assert fresh.returncode != 0 and "0 already done" in fresh.stderr, fresh.stderr  # stopped in its second run
    kept = json.loads((state / f"{runs[0].grid_id}.json").read_text())
    assert kept["published"] is False and not (state / f"{runs[1].grid_id}.json").exists()
    assert State(tmp_path / "st", study).summary(load(spec))["unpublished"] == 1  # `flowlake status` says so

    def rows_of(marker):
        return sum(1 for k in _committed(cfg, cfg.kafka.experiments_topic, study) if k == marker["run_id"].encode())

    # publishing, stopped right after the kept run's commit, before its marker says published
    stopped = subprocess.run(lab, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "FLOWLAKE_FAULT": "lab.published"})
    assert stopped.returncode != 0, stopped.stderr
    assert f"{runs[0].label()}: done with --no-publish ({kept['run_id']}): publishing it" in stopped.stderr
    assert json.loads((state / f"{runs[0].grid_id}.json").read_text()) == kept
    metrics = len(results.rows(runs[0], kept["metrics"], 0, 0))
    assert metrics >= 3 and rows_of(kept) == metrics  # the kept figures, as measured, every metric once

    rerun = subprocess.run([*lab, "--json"], capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stderr
    assert "publishing it" not in rerun.stderr  # the ledger has it: taken back, not published again
    assert "1 already done (1 published before a stop: marker taken from the ledger), 1 to run" in rerun.stderr
    markers = [json.loads((state / f"{r.grid_id}.json").read_text()) for r in runs]
    # the unpublished run: published as it was measured (its run_id, window, figures), not run again
    assert markers[0] == {**kept, "published": True}
    assert markers[0]["run_id"] != runs[0].run_id and markers[0]["start"] > t0 + 30  # not the old record
    assert markers[1]["run_id"] != runs[1].run_id and markers[1]["start"] > t0 + 30  # run again, not taken back
    summary = json.loads(rerun.stdout)
    assert (summary["done"], summary["unpublished"]) == (2, 0)
    assert {g: m["run_id"] for g, m in Ledger(cfg, study).recorded().items()} == {
        r.grid_id: m["run_id"] for r, m in zip(runs, markers)}
    again = subprocess.run([*lab, "--json"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "2 already done, 0 to run" in again.stderr, again.stderr
    assert rows_of(markers[0]) == metrics  # still once
