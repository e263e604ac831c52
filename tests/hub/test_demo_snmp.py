"""The demo's SNMP (flowlake/demo_snmp.py, flowlake/demo_ifmib.py): real snmpd agents for the
modelled routers, polled by flowlake's poller on the demo's clock; the counters move with the
flows in the lake."""
from __future__ import annotations

import datetime as dt
import json
import random

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowlake import demo_ifmib, demo_site, demo_snmp
from flowlake.base import config as _config
from flowlake.base.ports import private_env

DAY = dt.date(2026, 11, 27)


def test_ifmib_answers_get_and_getnext_in_oid_order(tmp_path):
    state = tmp_path / "ifmib.json"
    ifaces = demo_snmp.interfaces()["127.0.0.2"]
    state.write_text(json.dumps({"interfaces": {str(i): {**v, "counters": {"in_octets": 2 ** 40 + i}}
                                                for i, v in ifaces.items()}}))
    table = demo_ifmib.Table(str(state))
    table.load()
    objs = table.objects(demo_ifmib.IF_X_TABLE, demo_ifmib.IFX_COLUMNS)
    assert [o[0] for o in objs] == sorted(o[0] for o in objs)
    hc_in = demo_ifmib.IF_X_TABLE + (6,)
    # getnext from the column walks its rows in ifIndex order, then leaves for the next column
    walked, oid = [], hc_in
    while True:
        name, typ, value = demo_ifmib.answer(objs, "getnext", oid)
        if name[:len(hc_in)] != hc_in:
            break
        walked.append((name[-1], typ, value))
        oid = name
    assert walked == [(i, "counter64", 2 ** 40 + i) for i in sorted(ifaces)]
    assert demo_ifmib.answer(objs, "get", demo_ifmib.IF_X_TABLE + (18, 1))[2] == ifaces[1]["alias"]
    assert demo_ifmib.answer(objs, "get", demo_ifmib.IF_X_TABLE + (18, 99)) is None
    assert demo_ifmib.answer(objs, "getnext", objs[-1][0]) is None
    speeds = table.objects(demo_ifmib.IF_TABLE, demo_ifmib.IF_COLUMNS)
    assert demo_ifmib.answer(speeds, "get", demo_ifmib.IF_TABLE + (5, 1))[2] == 2 ** 32 - 1  # 10 Gbit/s caps ifSpeed


@pytest.mark.integration
def test_demo_agents_serve_counters_that_move_with_the_flows(tmp_path, monkeypatch):
    """Three snmpd agents polled every 3 modelled hours: each interface's counter deltas over
    the day equal its flows' bytes plus 18 bytes of framing per packet (in on input_if, out on
    output_if), the names and speeds are the demo site's, and every poll is stamped with the
    demo's clock."""
    if demo_snmp.snmpd_path() is None:
        pytest.fail("snmpd missing: apt-get install snmpd (make setup)")
    for k, v in private_env(tmp_path / "home").items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(demo_snmp, "STEP_MS", 3 * 3_600_000)
    cfg = _config.load(_config.DEFAULTS_FILE)
    lo = demo_snmp.demo_day_ms(DAY)
    rng = random.Random(7)
    n = 600
    starts = [lo + rng.randrange(0, 80_000_000) for _ in range(n)]  # all end within the day
    flows = pa.table({
        "exporter": [rng.choice(list(demo_site.ROUTERS)) for _ in range(n)],
        "input_if": [rng.choice([1, 10, 11]) for _ in range(n)],
        "output_if": [rng.choice([1, 12, 13]) for _ in range(n)],
        "time_start": pa.array(starts, pa.timestamp("ms", tz="UTC")),
        "time_end": pa.array([s + rng.randrange(0, 4_000_000) for s in starts], pa.timestamp("ms", tz="UTC")),
        "bytes": [rng.randrange(40, 10 ** 8) for _ in range(n)],
        "packets": [rng.randrange(1, 10 ** 5) for _ in range(n)]})
    part = cfg.lake / "flows" / f"date={DAY}" / "hour=0"
    part.mkdir(parents=True)
    pq.write_table(flows, part / "part-0.parquet")

    got = demo_snmp.run_day(cfg, DAY)
    assert got["errors"] == 0 and got["polls"] == 3 * 9, got
    con = duckdb.connect()
    con.register("flows", flows)
    files = str(cfg.lake / "interface_counters" / "*" / "*.parquet")
    rows = con.execute(f"""SELECT exporter, if_index, any_value(if_name), max(speed_mbps), count(*),
                                  sum(in_octets), sum(out_octets), sum(in_ucast_pkts), min(epoch_ms(time)),
                                  max(epoch_ms(time)), count(DISTINCT interval_s) FILTER (WHERE interval_s IS NOT NULL)
                           FROM read_parquet('{files}') GROUP BY ALL""").fetchall()
    want = {}
    for side, col in (("in", "input_if"), ("out", "output_if")):
        sql = f"SELECT exporter, {col}, sum(bytes), sum(packets) FROM flows GROUP BY ALL"
        for e, i, b, p in con.execute(sql).fetchall():
            want.setdefault((e, i), {})[side] = (b + demo_snmp.FRAMING_BYTES * p, p)
    names = demo_snmp.interfaces()
    assert {(e, i) for e, i, *_ in rows} == {(e, i) for e, v in names.items() for i in v}
    for e, i, name, speed, polls, in_oct, out_oct, in_pkts, first, last, intervals in rows:
        assert (name, speed, polls) == (names[e][i]["name"], names[e][i]["speed_mbps"], 9), (e, i)
        assert (first, last, intervals) == (lo, lo + 86_400_000, 1), (e, i)  # the demo's clock, every 3 h
        w = want.get((e, i), {})
        assert abs(in_oct - w.get("in", (0, 0))[0]) <= 9 and abs(out_oct - w.get("out", (0, 0))[0]) <= 9, (e, i)
        assert abs(in_pkts - w.get("in", (0, 0))[1]) <= 9, (e, i)
    assert any(w for w in want.values())
