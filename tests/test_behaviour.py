"""Behaviour classes against the traffic model's truth: the model labels every flow with
the EVL class it drew it as; the classifier sees only the lake's records."""
from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from flowlake import config
from flowlake.collectors.traffic import lake_rows, model, truth
from flowlake.jobs import behaviour_classes
from flowlake.jobs.context import JobContext

DAY = dt.date(2026, 11, 20)
START_MS = int(dt.datetime.combine(DAY, dt.time(), dt.timezone.utc).timestamp() * 1000)


@pytest.fixture(scope="module")
def model_lake(tmp_path_factory):
    """One modelled day (60k flows, tele-immersion sessions included) written as lake flows."""
    home = tmp_path_factory.mktemp("behaviour-home")
    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(home)})
    p = model.ModelParams()
    f, events = model.generate(p, START_MS, 86_400_000, 60_000, seed=5)
    table = lake_rows.lake_table(f, p)
    hours = table.column("hour").to_numpy()
    for h in np.unique(hours):
        part = cfg.lake / "flows" / f"date={DAY}" / f"hour={int(h)}"
        part.mkdir(parents=True)
        pq.write_table(table.filter(hours == h).drop(["date", "hour"]), part / "part-0.parquet")
    return cfg, f, p


def test_classifier_matches_the_model_truth(spark, model_lake, figure):
    cfg, f, p = model_lake
    ctx = JobContext(spark=spark, cfg=cfg, date=DAY)
    got = {r.file_seq: r["class"] for r in
           behaviour_classes.classify(ctx.flows(), cfg.behaviour).select("file_seq", "class").collect()}
    assert len(got) == len(f)
    want = np.array(model.BEHAVIOURS)[f["behaviour"]]
    pred = np.array([got[i] for i in range(len(f))])
    names = list(model.BEHAVIOURS)
    cm = np.zeros((len(names), len(names)), int)
    for t, g in zip(want, pred):
        cm[names.index(t), names.index(g)] += 1
    width = max(map(len, names)) + 1
    lines = ["confusion matrix (rows: model truth, columns: classifier)",
             " " * width + "".join(f"{n[:9]:>10}" for n in names)]
    lines += [f"{n:<{width}}" + "".join(f"{v:>10}" for v in row) for n, row in zip(names, cm)]
    print("\n" + "\n".join(lines))
    accuracy = np.trace(cm) / cm.sum()
    recall = {n: cm[i, i] / cm[i].sum() for i, n in enumerate(names) if cm[i].sum()}
    figure(f"behaviour classes: accuracy {accuracy:.4f} over {len(f)} flows; recall "
           + ", ".join(f"{n} {r:.3f}" for n, r in recall.items()))
    assert accuracy >= 0.9
    # not carried by 'other' alone: every class the model drew is found, mostly
    assert set(recall) == set(names)
    for n, r in recall.items():
        assert r >= 0.8, (n, r, cm[names.index(n)])


def test_daily_table_counts_flows_packets_bytes_hosts(spark, model_lake):
    cfg, f, p = model_lake
    ctx = JobContext(spark=spark, cfg=cfg, date=DAY)
    ctx.shared = {}
    behaviour_classes.run(ctx)
    ctx.shared["behaviour_flows"].unpersist()
    rows = {r["class"]: r for r in spark.read.parquet(str(cfg.lake / "reports" / "behaviour_classes" / f"date={DAY}")).collect()}
    assert set(rows) == set(model.BEHAVIOURS)
    lake = lake_rows.lake_table(f, p)
    # every flow in exactly one class: the table adds up to the lake
    assert sum(r.flows for r in rows.values()) == len(f)
    assert sum(r.bytes for r in rows.values()) == sum(lake.column("bytes").to_pylist())
    assert sum(r.packets for r in rows.values()) == sum(lake.column("packets").to_pylist())
    # each class as the classifier sees it, and close to the truth's per_behaviour
    classified = behaviour_classes.classify(ctx.flows(), cfg.behaviour).groupBy("class").count().collect()
    assert {r["class"]: r["count"] for r in classified} == {c: r.flows for c, r in rows.items() if r.flows}
    doc = truth.summarize(f, p, [])
    for cls, r in rows.items():
        want = doc["per_behaviour"][cls]["flows"]
        assert abs(r.flows - want) <= 0.1 * want, (cls, r.flows, want)
    # hosts: a tele-immersion stream class joins the site's host and every peer (2 + 3 peers, 2 hosts)
    tele = [e for e in model.generate(p, START_MS, 86_400_000, 60_000, seed=5)[1] if e["kind"] == "teleimmersion"]
    assert rows["avatar"].hosts == len({e["src"] for e in tele}) + sum(len(e["peers"]) for e in tele)


def test_needs_against_measured_paths(spark):
    from flowlake.jobs import behaviour_needs
    from flowlake.schemas.active import ACTIVE

    def test(target, minute, sent, received, median, jitter):
        start = dt.datetime.combine(DAY, dt.time(12, minute), dt.timezone.utc)
        m = {"sent": float(sent), "received": float(received), "rtt_median_ms": float(median),
             "rtt_avg_ms": float(median), "jitter_ms": float(jitter)}
        return ("rtt", "probe", target, start, start + dt.timedelta(seconds=10), {}, m, "probe", "", str(DAY))

    active = spark.createDataFrame([
        test("near", 0, 10, 10, 8.0, 1.0), test("near", 30, 10, 10, 12.0, 3.0),   # one-way 5 ms, jitter 2
        test("far", 0, 10, 10, 150.0, 60.0), test("far", 30, 10, 9, 170.0, 40.0),  # one-way 80 ms, jitter 50, loss 5 %
    ], ACTIVE.spark_schema())
    flows = spark.createDataFrame([("avatar", 12), ("video", 3), ("large_bulk", 7)], "class string, flows long")
    rows = {(r["class"], r.target): r for r in behaviour_needs.needs(flows, behaviour_needs.paths(active)).collect()}
    assert len(rows) == 2 * len(behaviour_classes.CLASSES)
    near, far = rows[("avatar", "near")], rows[("avatar", "far")]
    assert near.flows == 12 and near.latency_ms == pytest.approx(5.0) and near.jitter_ms == pytest.approx(2.0)
    assert near.loss_pct == 0 and (near.meets_latency, near.meets_jitter, near.meets_loss, near.meets) == (True,) * 4
    # far: 80 ms one way misses tracking's 10 ms; jitter 50 ms is just within Y.1541's 50; 5 % loss is not
    assert far.latency_ms == pytest.approx(80.0) and far.jitter_ms == pytest.approx(50.0) and far.loss_pct == pytest.approx(5.0)
    assert (far.meets_latency, far.meets_jitter, far.meets_loss, far.meets) == (False, True, False, False)
    video = rows[("video", "far")]
    assert video.meets_latency is True and video.meets is False  # within 100 ms, but the loss
    bulk = rows[("large_bulk", "far")]
    assert bulk.latency_need_ms is None and bulk.meets is None and "throughput" in bulk.source
    assert rows[("audio", "near")].flows == 0 and rows[("audio", "near")].meets is True
