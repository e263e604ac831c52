"""The modelled routers' interface counters (collectors/traffic/if_counters): spread over
each flow's lifetime, every packet with its framing, each flow in once and out once unless
dropped, and the pass_persist agent that serves them to snmpd (ifmib_agent)."""
from __future__ import annotations

import io

import numpy as np
import pytest

from flowlake.collectors.traffic import if_counters, ifmib_agent, model, record3


def test_a_flow_is_spread_evenly_over_its_lifetime():
    t = np.array([0, 10, 20, 30], np.int64)
    got = if_counters.cumulative(t, np.array([5, 10, 12, 40]), np.array([25, 10, 12, 50]), np.array([100, 7, 3, 9]))
    # 100 over (5, 25): 25 by 10, 75 by 20; 7 at 10 (no duration) counts from 10; 3 at 12 from 20;
    # the flow at 40-50 is after the grid
    assert got.tolist() == [0, 25 + 7, 75 + 7 + 3, 100 + 7 + 3]


@pytest.fixture(scope="module")
def day():
    p = model.ModelParams()
    for r in p.routers:
        r.record3 = True
    start = 1_763_596_800_000  # 2025-11-20 00:00 UTC
    f, _ = model.generate(p, start, 86_400_000, 20_000, seed=5)
    x = record3.draw(f, 5)
    return p, f, x, start, if_counters.series(f, p, start, start + 86_400_000, rev3=x)


def test_counters_count_every_packet_in_once_and_out_unless_dropped(day):
    p, f, x, start, doc = day
    t = doc["times_ms"]
    assert t[0] == start and all(b - a == 300_000 for a, b in zip(t, t[1:], strict=False)) and t[-1] >= f["t_end"].max()
    for i, r in enumerate(p.routers):
        sel = f["router"] == i
        rate = max(1, r.sampling_rate)
        pk = f["packets"][sel].astype(float) * rate
        octets = f["bytes"][sel].astype(float) * rate + if_counters.FRAMING * pk
        rpk = x["out_packets"][sel].astype(float) * rate
        roct = x["out_bytes"][sel].astype(float) * rate + if_counters.FRAMING * rpk
        leaves = x["fwd"][sel] < 128
        dropped = (x["fwd"][sel] >= 128) & (x["fwd"][sel] < 192)
        ifs = doc["routers"][r.address]["interfaces"]
        assert set(ifs) == {r.uplink_if, *r.lan_ifs}
        last = {k: sum(c[k][-1] for c in ifs.values()) for k in if_counters.COUNTERS}
        assert last["in_octets"] == pytest.approx(octets.sum() + roct.sum(), abs=len(ifs))
        assert last["out_octets"] == pytest.approx(octets[leaves].sum() + roct[leaves].sum(), abs=len(ifs))
        assert last["in_ucast_pkts"] == pytest.approx(pk.sum() + rpk.sum(), abs=len(ifs))
        assert last["in_discards"] == pytest.approx(pk[dropped].sum() + rpk[dropped].sum(), abs=len(ifs))
        assert 0 < last["in_discards"] < last["in_ucast_pkts"] * 0.2
        up = ifs[r.uplink_if]
        inbound = sel & (f["in_if"] == r.uplink_if)
        assert up["in_octets"][-1] > 0 and inbound.any()
        for c in ifs.values():  # counters never go back
            for values in c.values():
                assert all(b >= a for a, b in zip(values, values[1:], strict=False))
        assert up["in_octets"][0] == 0  # nothing before the day's first flow


def test_the_agent_answers_snmpd_in_the_pass_persist_protocol(tmp_path):
    state = tmp_path / "ifmib.json"
    state.write_text('{"interfaces": {"1": {"name": "et-0/0/1", "alias": "Transit: x", "speed_mbps": 10000,'
                     ' "counters": {"in_octets": 18446744073709551621, "in_discards": 4294967301}},'
                     ' "10": {"name": "xe-1/0/10", "speed_mbps": 100000}}}')
    ifx = ifmib_agent.Table(str(state), (1, 3, 6, 1, 2, 1, 31, 1, 1))
    asked = io.StringIO("PING\nget\n.1.3.6.1.2.1.31.1.1.1.6.1\ngetnext\n.1.3.6.1.2.1.31.1.1.1.1.10\n"
                        "get\n.1.3.6.1.2.1.2.2.1.13.1\ngetnext\n.1.3.6.1.2.1.31.1.1.1.18.10\n"
                        "set\n.1.3.6.1.2.1.31.1.1.1.18.1\nstring x\n")
    out = io.StringIO()
    ifmib_agent.serve(ifx, asked, out)
    assert out.getvalue().splitlines() == [
        "PONG",
        ".1.3.6.1.2.1.31.1.1.1.6.1", "counter64", "5",           # wrapped at 2^64
        ".1.3.6.1.2.1.31.1.1.1.6.1", "counter64", "5",           # the next column's first row
        "NONE",                                                   # ifTable is not this registration's
        "NONE",                                                   # past the subtree's end
        "not-writable"]
    if_table = ifmib_agent.Table(str(state), (1, 3, 6, 1, 2, 1, 2, 2))
    assert if_table.get((1, 3, 6, 1, 2, 1, 2, 2, 1, 13, 1))[1:] == ("counter", "5")      # Counter32 wraps at 2^32
    assert if_table.get((1, 3, 6, 1, 2, 1, 2, 2, 1, 5, 10))[1:] == ("gauge", "4294967295")  # ifSpeed saturates
