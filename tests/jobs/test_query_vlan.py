"""nfdump's `vlan N`, `src vlan N`, `dst vlan N` in `flowlake query`, checked against nfdump
1.7.1 itself on a real nfcapd file that carries VLANs (the traffic model's IPFIX export:
vlanId 58 / postVlanId 59), on both engines.

nfdump reads a record without VLANs as VLAN 0 (measured: on the NetFlow v5 file of
bench/query.py `vlan 0` selects every flow, `not vlan 0` none). Lake files written before
the schema's VLAN revision have no VLAN columns: their flows must answer the same way,
and a filter on VLANs must not fail on them."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from test_query import PROTO_NAMES, nfdump_flows, nfdump_records, nfdump_stats
from test_vlan import START, model_capture, nfdump_bin_module  # noqa: F401 (a fixture)

FILTERS = ["vlan 100", "src vlan 100", "dst vlan 100", "vlan 0", "not vlan 0", "dst vlan 0",
           "src vlan 210 and proto tcp", "dst vlan 211 or src vlan 101", "not src vlan 100 and dst vlan 100",
           "VLAN 213", "vlan 4095"]
OLD = START + dt.timedelta(days=1)  # the day the same flows lie in files without VLAN columns


@pytest.fixture(scope="module")
def vlan_nf(tmp_path_factory, nfdump_bin_module) -> Path:
    return model_capture(tmp_path_factory.mktemp("query-vlan") / "spool", "ipfix")[0]


@pytest.fixture(scope="module")
def vlan_home(spark, vlan_nf, tmp_path_factory):
    """A private FLOWLAKE_HOME: the file's flows on START's day (with VLANs) and again a day
    later in Parquet files without the VLAN columns (an older revision of the lake)."""
    from flowlake.base import config
    from flowlake.schemas import FLOWS_TABLE

    home = tmp_path_factory.mktemp("query-vlan-home")
    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(home)})
    rows = nfdump_flows(vlan_nf)
    assert len({r["src_vlan"] for r in rows}) > 5 and len({r["dst_vlan"] for r in rows}) > 5
    base = str(Path(cfg.lake) / "flows")
    spark.createDataFrame(rows, FLOWS_TABLE.spark_schema()).write.partitionBy("date", "hour").parquet(base)
    day = dt.timedelta(days=1)
    old = [{**r, "time_start": r["time_start"] + day, "time_end": r["time_end"] + day,
            "date": (r["time_start"] + day).strftime("%Y-%m-%d")} for r in rows]
    (spark.createDataFrame(old, FLOWS_TABLE.spark_schema()).drop("src_vlan", "dst_vlan")
     .write.mode("append").partitionBy("date", "hour").parquet(base))
    return home, cfg, len(rows)


def _key(r) -> tuple:
    return (r["src_addr"], r["dst_addr"], r["src_port"], r["dst_port"], PROTO_NAMES.get(r["proto"], str(r["proto"])),
            r["packets"], r["bytes"])


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_vlan_filters_match_nfdump(vlan_home, vlan_nf, engine):
    from flowlake.jobs.query import parse
    from flowlake.jobs.query.engines import open_engine

    _, cfg, total = vlan_home
    selective = 0
    eng = open_engine(cfg, START, START + dt.timedelta(days=1), engine=engine)
    try:
        for flt in FILTERS:
            got = Counter(_key(r) for r in eng.records(parse(flt), 0))
            want = nfdump_records(vlan_nf, flt)
            assert got == want, f"{flt!r}: {engine} {sum(got.values())} flows, nfdump {sum(want.values())}"
            selective += 0 < sum(want.values()) < total
    finally:
        eng.close()
    assert selective >= 8  # the filters really select
    # files without VLAN columns: every flow is VLAN 0, as nfdump reads a record without VLANs
    eng = open_engine(cfg, OLD, OLD + dt.timedelta(days=1), engine=engine)
    try:
        count = {flt: sum(1 for _ in eng.records(parse(flt), 0)) for flt in ("vlan 0", "not vlan 0", "src vlan 100")}
        tops = eng.tops(parse("dst vlan 0"), [("proto", "flows")], 0)["proto/flows"]
    finally:
        eng.close()
    assert count == {"vlan 0": total, "not vlan 0": 0, "src vlan 100": 0}
    assert sum(r["flows"] for r in tops) == total


@pytest.mark.integration
def test_cli_vlan_top_n_equals_nfdump(vlan_home, vlan_nf):
    """The whole command, as an analyst runs it: a top-N under a VLAN filter equals `nfdump -s`."""
    home, _, _ = vlan_home
    flowlake = str(Path(sys.executable).with_name("flowlake"))
    env = {**os.environ, "FLOWLAKE_HOME": str(home), "FLOWLAKE_QUERY_ENGINE": "local"}
    flt = "src vlan 100 and proto tcp"
    res = subprocess.run([flowlake, "query", flt, "-s", "dstip/bytes", "-n", "5", "--format", "json",
                          "--from", f"{START:%Y-%m-%d}", "--to", f"{OLD:%Y-%m-%d}"],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    got = [(r["val"], r["flows"], r["bytes"]) for r in json.loads(res.stdout)["dstip/bytes"]]
    want = [(v, fl, byt) for v, fl, _, byt, _ in nfdump_stats(vlan_nf, "dstip/bytes", flt)[:5]]
    assert len(want) == 5 and got == want
    bad = subprocess.run([flowlake, "query", "vlan > 5"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "syntax error at '>'" in bad.stderr  # as nfdump: equality only
