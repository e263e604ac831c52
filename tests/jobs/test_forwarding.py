"""Reports of flow record revision 3 (issue 32 part 5): forwarding_status (per exporter and
IE 89 class, with the top reasons) and mpls_vrf_mix (by MPLS top label and VRF), on small
hand-made Spark frames, each expected value computed here from the rows themselves; and
both jobs run whole (runner, lake, declared columns) on a lake without the new columns."""
from __future__ import annotations

import datetime as dt
import ipaddress
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import ArrayType, IntegerType, LongType, StructType

from flowlake.jobs import common, runner
from flowlake.jobs.forwarding_status import forwarding_status
from flowlake.jobs.mpls_vrf_mix import mpls_vrf_mix
from flowlake.schemas import FLOWS_TABLE, registry
from flowlake.schemas.forwarding import REASON_NAMES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from test_jobs import private_cfg  # noqa: E402

from flow_rows import lake_row  # noqa: E402

pytestmark = pytest.mark.integration
UTC = dt.UTC
DAY = dt.date(2026, 3, 12)
LOCAL = ["10.0.0.0/8"]
# the revision-3 columns these reports read, with their Spark types (the brief's contract)
REV3 = {"forwarding_status": IntegerType(), "mpls_labels": ArrayType(IntegerType()), "ingress_vrf": LongType(),
        "egress_vrf": LongType()}


def rows_of(specs: list[dict]) -> list[dict]:
    """Lake rows (tests/flow_rows.py) with the revision-3 columns set explicitly (null unless given)."""
    names = [f.name for f in FLOWS_TABLE.fields]
    out = []
    for i, s in enumerate(specs):
        ts = dt.datetime(2026, 3, 12, s.get("hour", 10), 5, tzinfo=UTC)
        given = {"time_start": ts, "time_end": ts, "exporter": s.get("exporter", "192.0.2.1"),
                 "src_addr": s.get("src", "10.0.0.1"), "dst_addr": s.get("dst", "203.0.113.1"),
                 "src_port": 40000 + i, "dst_port": 443, "proto": 6, "packets": s["packets"], "bytes": s["bytes"],
                 "source_file": "t", "file_seq": i, "date": DAY.isoformat(), "hour": ts.hour}
        row = dict(zip(names, lake_row(**{k: v for k, v in given.items() if k in names}), strict=True))
        row.update({c: s.get(c) for c in REV3})
        out.append(row)
    return out


def frame(spark, specs: list[dict], rev3: bool = True):
    schema = StructType(FLOWS_TABLE.spark_schema().fields)
    for c, t in REV3.items():
        if c not in schema.fieldNames():
            schema = schema.add(c, t)
    df = spark.createDataFrame([tuple(r[n] for n in schema.fieldNames()) for r in rows_of(specs)], schema)
    return df if rev3 else df.drop(*REV3)


# ---- forwarding_status --------------------------------------------------------------------
FS_SPECS = [
    {"exporter": "192.0.2.1", "forwarding_status": 64, "packets": 10, "bytes": 1000},
    {"exporter": "192.0.2.1", "forwarding_status": 66, "packets": 3, "bytes": 300},
    {"exporter": "192.0.2.1", "forwarding_status": 129, "packets": 5, "bytes": 700},   # ACL deny
    {"exporter": "192.0.2.1", "forwarding_status": 129, "packets": 1, "bytes": 60},
    {"exporter": "192.0.2.1", "forwarding_status": 137, "packets": 2, "bytes": 500},   # bad TTL
    {"exporter": "192.0.2.1", "forwarding_status": 131, "packets": 1, "bytes": 40},    # unroutable: 3rd, cut
    {"exporter": "192.0.2.1", "forwarding_status": 190, "packets": 1, "bytes": 20},    # unassigned reason 62
    {"exporter": "192.0.2.1", "forwarding_status": None, "packets": 4, "bytes": 400},
    {"exporter": "192.0.2.2", "forwarding_status": 195, "packets": 7, "bytes": 900},   # consumed, for us
    {"exporter": "192.0.2.2", "forwarding_status": 0, "packets": 2, "bytes": 80},
    {"exporter": "192.0.2.2", "forwarding_status": 300, "packets": 1, "bytes": 10},
    {"exporter": "192.0.2.2", "forwarding_status": 138, "packets": 9, "bytes": 2000},  # policer
]


def expected_forwarding(specs: list[dict], top: int) -> list[tuple]:
    classes = {0: "unknown", 1: "forwarded", 2: "dropped", 3: "consumed"}
    totals: dict = defaultdict(lambda: [0, 0, 0])
    codes: dict = defaultdict(lambda: [0, 0, 0])
    by_exporter: dict = defaultdict(int)
    for s in specs:
        v = s["forwarding_status"]
        klass = "not exported" if v is None else "out of range" if v > 255 else classes[v // 64]
        targets = [(totals, (s["exporter"], klass))]
        if v is not None and v <= 255:
            targets.append((codes, (s["exporter"], klass, v)))
        for d, key in targets:
            d[key][0] += 1
            d[key][1] += s["packets"]
            d[key][2] += s["bytes"]
        by_exporter[s["exporter"]] += s["bytes"]
    out = []
    for (exp, klass), (f, p, b) in totals.items():
        status = None if klass in ("not exported", "out of range") else {v: k for k, v in classes.items()}[klass]
        out.append((exp, klass, status, None, None, None, None, f, p, b, round(b / by_exporter[exp], 9)))
        ranked = sorted(((k[2], v) for k, v in codes.items() if k[:2] == (exp, klass)),
                        key=lambda kv: (-kv[1][2], -kv[1][0], kv[0]))
        for rank, (code, (f2, p2, b2)) in enumerate(ranked[:top], 1):
            out.append((exp, klass, code // 64, code % 64, code, REASON_NAMES.get(code, ""), rank, f2, p2, b2,
                        round(b2 / by_exporter[exp], 9)))
    return sorted(out, key=repr)


def table(df, cols: list[str]) -> list[tuple]:
    rows = (tuple(round(v, 9) if isinstance(v, float) else v for v in (r[c] for c in cols)) for r in df.collect())
    return sorted(rows, key=repr)


FS_COLS = ["exporter", "status_class", "status", "reason", "forwarding_status", "reason_name", "rank",
           "flows", "packets", "bytes", "bytes_share"]


def test_forwarding_status_classes_and_top_reasons(spark):
    got = table(forwarding_status(frame(spark, FS_SPECS), top=2), FS_COLS)
    want = expected_forwarding(FS_SPECS, top=2)
    assert got == want
    # spot checks that do not go through the expected-value code
    dropped = {r[1:7]: r[7:10] for r in got if r[0] == "192.0.2.1" and r[1] == "dropped"}
    assert dropped[("dropped", 2, None, None, None, None)] == (5, 10, 1320)
    assert dropped[("dropped", 2, 1, 129, "ACL deny", 1)] == (2, 6, 760)
    assert dropped[("dropped", 2, 9, 137, "bad TTL", 2)] == (1, 2, 500)
    assert len(dropped) == 3  # unroutable (40 bytes) and reason 62 (20) are beyond the top 2
    assert ("192.0.2.2", "out of range", None, None, None, None, None, 1, 1, 10, round(10 / 2990, 9)) in got


def test_forwarding_status_of_a_lake_without_the_column(spark):
    got = table(forwarding_status(frame(spark, FS_SPECS, rev3=False)), FS_COLS)
    per_exporter = defaultdict(lambda: [0, 0, 0])
    for s in FS_SPECS:
        t = per_exporter[s["exporter"]]
        t[0], t[1], t[2] = t[0] + 1, t[1] + s["packets"], t[2] + s["bytes"]
    assert got == sorted(((e, "not exported", None, None, None, None, None, *t, 1.0) for e, t in per_exporter.items()),
                         key=repr)


# ---- mpls_vrf_mix ------------------------------------------------------------------------
MIX_SPECS = [
    {"hour": 10, "mpls_labels": [16004, 3], "ingress_vrf": 7, "egress_vrf": 9, "packets": 10, "bytes": 1000},
    {"hour": 10, "mpls_labels": [16004], "ingress_vrf": 7, "packets": 2, "bytes": 200,
     "src": "203.0.113.9", "dst": "10.0.0.2"},
    {"hour": 11, "mpls_labels": [24001, 16004], "ingress_vrf": 8, "egress_vrf": 9, "packets": 5, "bytes": 500},
    {"hour": 11, "mpls_labels": [], "packets": 1, "bytes": 50},          # an empty stack: none
    {"hour": 11, "packets": 3, "bytes": 30, "src": "203.0.113.9", "dst": "10.0.0.2"},  # no MPLS, no VRF
]
MIX_COLS = ["hour", "direction", "side", "value", "value_label", "flows", "packets", "bytes",
            "flows_share", "packets_share", "bytes_share"]


def expected_mix(specs: list[dict]) -> list[tuple]:
    local = [ipaddress.ip_network(p) for p in LOCAL]

    def is_local(a):
        return any(ipaddress.ip_address(a) in n for n in local)

    sums: dict = defaultdict(lambda: [0, 0, 0])
    for s in specs:
        src_l, dst_l = is_local(s.get("src", "10.0.0.1")), is_local(s.get("dst", "203.0.113.1"))
        direction = "internal" if src_l and dst_l else "outbound" if src_l else "inbound" if dst_l else "transit"
        labels = s.get("mpls_labels") or []
        values = {"mpls": labels[0] if labels else None, "vrf_in": s.get("ingress_vrf"), "vrf_out": s.get("egress_vrf")}
        for side, value in values.items():
            for hour in (s["hour"], None):
                for d in (direction, "all"):
                    t = sums[(hour, d, side, value)]
                    t[0], t[1], t[2] = t[0] + 1, t[1] + s["packets"], t[2] + s["bytes"]
    out = []
    for (hour, d, side, value), (f, p, b) in sums.items():
        group = [v for k, v in sums.items() if k[0] == hour and k[1] == d and k[2] == side]
        tf, tp, tb = (sum(v[i] for v in group) for i in range(3))
        label = "(none)" if value is None else ("label " if side == "mpls" else "vrf ") + str(value)
        out.append((hour, d, side, value, label, f, p, b, round(f / tf, 9), round(p / tp, 9), round(b / tb, 9)))
    return sorted(out, key=repr)


def test_mpls_vrf_mix_by_top_label_and_vrf(spark):
    flows = common.with_direction(frame(spark, MIX_SPECS), LOCAL)
    got = table(mpls_vrf_mix(flows), MIX_COLS)
    assert got == expected_mix(MIX_SPECS)
    day_all = {(r[2], r[4]): r[7] for r in got if r[0] is None and r[1] == "all"}
    assert day_all[("mpls", "label 16004")] == 1200 and day_all[("mpls", "label 24001")] == 500
    assert day_all[("mpls", "(none)")] == 80 and day_all[("vrf_out", "vrf 9")] == 1500


def test_mpls_vrf_mix_keeps_the_top_n_and_folds_the_rest(spark):
    """[reports] mpls_vrf_top_n: per hour, direction and side the top labels / VRFs by bytes,
    the rest in one '(other)' row (value -1); '(none)' is no label and always stays; every
    list adds up to the unbounded one's totals, shares to 1."""
    flows = common.with_direction(frame(spark, MIX_SPECS), LOCAL)
    whole = table(mpls_vrf_mix(flows), MIX_COLS)
    got = table(mpls_vrf_mix(flows, top_n=1), MIX_COLS)

    def lists(rows):
        out = defaultdict(list)
        for r in rows:
            out[r[:3]].append(r)
        return out

    bounded, unbounded = lists(got), lists(whole)
    assert bounded.keys() == unbounded.keys()
    for key, rows in bounded.items():
        assert [sum(r[i] for r in rows) for i in (5, 6, 7)] == [sum(r[i] for r in unbounded[key]) for i in (5, 6, 7)]
        assert sum(r[10] for r in rows) == pytest.approx(1.0)
        assert len([r for r in rows if r[3] is not None and r[3] >= 0]) <= 1
    day_all = {(r[2], r[4]): (r[3], r[7]) for r in got if r[0] is None and r[1] == "all"}
    assert day_all[("mpls", "label 16004")] == (16004, 1200) and day_all[("mpls", "(other)")] == (-1, 500)
    assert day_all[("mpls", "(none)")] == (None, 80) and ("mpls", "label 24001") not in day_all
    assert day_all[("vrf_in", "vrf 7")] == (7, 1200) and day_all[("vrf_in", "(other)")] == (-1, 500)
    assert ("vrf_out", "(other)") not in day_all    # one VRF: nothing to fold
    with pytest.raises(ValueError, match="mpls_vrf_top_n"):
        mpls_vrf_mix(flows, top_n=0)


def test_both_jobs_run_whole_on_a_lake_without_the_new_columns(spark, tmp_path):
    """A lake written before revision 3 (no forwarding_status, labels or VRFs in its files):
    the jobs write their declared columns, every flow counted once as none / not exported."""
    cfg = private_cfg(tmp_path)
    old = frame(spark, MIX_SPECS, rev3=False)
    assert not set(REV3) & set(old.columns)
    old.write.partitionBy("date", "hour").parquet(str(cfg.lake / "flows"))
    outcomes = runner.run_jobs(spark, cfg, DAY, runner.order(runner.discover(), ["forwarding_status", "mpls_vrf_mix"]))
    assert [(o.job, o.status, o.error) for o in outcomes] == [("forwarding_status", "ok", ""),
                                                              ("mpls_vrf_mix", "ok", "")]
    fs = pq.read_table(cfg.lake / "reports" / "forwarding_status" / f"date={DAY}").to_pylist()
    assert [(r["status_class"], r["flows"], r["bytes"]) for r in fs] == [("not exported", 5, 1780)]
    mix = pq.read_table(cfg.lake / "reports" / "mpls_vrf_mix" / f"date={DAY}")
    assert mix.column_names == [c for c in registry()["mpls_vrf_mix"].names if c != "date"]
    day = [r for r in mix.to_pylist() if r["hour"] is None and r["direction"] == "all"]
    assert sorted((r["side"], r["value_label"], r["flows"], r["bytes_share"]) for r in day) == [
        ("mpls", "(none)", 5, 1.0), ("vrf_in", "(none)", 5, 1.0), ("vrf_out", "(none)", 5, 1.0)]
