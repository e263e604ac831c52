"""The small report tables behind the Daily-operations dashboard (traffic_totals,
largest_flows): Spark transforms on hand-made flows, checked against plain Python."""
from __future__ import annotations

import datetime as dt
import itertools
import random

import pytest

LOCAL = ["10.0.0.0/8", "2001:db8::/32"]
UTC = dt.timezone.utc
DIRS = ("inbound", "outbound", "internal", "transit")


def random_flows(n: int, seed: int = 5) -> list[dict]:
    rng = random.Random(seed)
    local = [f"10.0.{i}.{j}" for i in range(3) for j in range(1, 5)] + ["2001:db8::7"]
    remote = ["203.0.113.9", "198.51.100.3", "8.8.8.8", "2001:db9::1"]
    rows = []
    for i in range(n):
        src, dst = rng.choice(local + remote), rng.choice(local + remote)
        if (":" in src) != (":" in dst):
            dst = src
        ts = dt.datetime(2026, 3, 10, rng.choice([0, 7, 23]), rng.randrange(60), tzinfo=UTC)
        rows.append({"time_start": ts, "time_end": ts + dt.timedelta(seconds=rng.randrange(0, 90)),
                     "exporter": rng.choice(["192.0.2.1", "192.0.2.2", "192.0.2.3"]), "input_if": rng.randrange(1, 4),
                     "output_if": rng.randrange(4, 6), "src_addr": src, "dst_addr": dst,
                     "src_port": rng.randrange(1024, 1100), "dst_port": rng.choice([22, 443, 53]),
                     "proto": rng.choice([6, 17, 1]), "tcp_flags": 0, "tos": 0,
                     "packets": rng.randrange(1, 50), "bytes": rng.choice([40, 1500, 1500, 9000, 10**6, 10**6 + 1]),
                     "sampling_rate": 1, "src_as": 0, "dst_as": 0, "source_file": "t", "file_seq": i,
                     "date": "2026-03-10", "hour": ts.hour})
    return rows


def direction(row) -> str:
    import ipaddress

    nets = [ipaddress.ip_network(p) for p in LOCAL]

    def local(a):
        ip = ipaddress.ip_address(a)
        return any(ip.version == n.version and ip in n for n in nets)

    s, d = local(row["src_addr"]), local(row["dst_addr"])
    return "internal" if s and d else "outbound" if s else "inbound" if d else "transit"


@pytest.fixture(scope="module")
def flows(spark):
    from flowlake.jobs import common
    from flowlake.schemas import FLOWS_TABLE

    rows = random_flows(400)
    df = common.with_direction(spark.createDataFrame(rows, FLOWS_TABLE.spark_schema()), LOCAL)
    for r in rows:
        r["direction"] = direction(r)
    return rows, df


@pytest.mark.integration
def test_traffic_totals_every_level_exact(flows):
    from flowlake.jobs import traffic_totals

    rows, df = flows
    got = {(r.hour, r.direction, r.exporter): r for r in traffic_totals.traffic_totals(df).collect()}
    exporters = sorted({r["exporter"] for r in rows})
    expected_keys = set()
    for hour, d, e in itertools.product([None, 0, 7, 23], ("all",) + DIRS, ["all"] + exporters):
        sel = [r for r in rows if (hour is None or r["time_start"].hour == hour)
               and d in ("all", r["direction"]) and e in ("all", r["exporter"])]
        if not sel:
            assert (hour, d, e) not in got
            continue
        expected_keys.add((hour, d, e))
        g = got[(hour, d, e)]
        assert (g.flows, g.packets, g.bytes) == (len(sel), sum(r["packets"] for r in sel), sum(r["bytes"] for r in sel))
        assert g.src_addrs == len({r["src_addr"] for r in sel}), (hour, d, e)
        assert g.dst_addrs == len({r["dst_addr"] for r in sel}), (hour, d, e)
    assert set(got) == expected_keys
    # the dashboard's rule: flows/packets/bytes add up over the exporters; distinct counts need the 'all' row
    day = [g for (h, d, e), g in got.items() if h is None and d == "all" and e != "all"]
    assert sum(g.bytes for g in day) == got[(None, "all", "all")].bytes
    assert sum(g.src_addrs for g in day) > got[(None, "all", "all")].src_addrs  # shared sources counted twice


@pytest.mark.integration
def test_largest_flows_top_n_per_direction_and_exporter(flows):
    from flowlake.jobs import largest_flows

    rows, df = flows
    n = 5
    out = largest_flows.largest_flows(df, n).collect()

    def key(r):  # the documented order
        return (-r["bytes"], -r["packets"], r["time_start"], r["src_addr"], r["dst_addr"], r["src_port"],
                r["dst_port"], r["proto"])

    exporters = sorted({r["exporter"] for r in rows})
    for d, e in itertools.product(("all",) + DIRS, exporters):
        want = sorted((r for r in rows if d in ("all", r["direction"]) and r["exporter"] == e), key=key)[:n]
        got = sorted((r for r in out if r.direction == d and r.exporter == e), key=lambda r: r.rank)
        assert [g.rank for g in got] == list(range(1, len(want) + 1))
        assert [(g.bytes, g.packets, g.src_addr, g.src_port, g.dst_addr, g.time_start) for g in got] == \
            [(w["bytes"], w["packets"], w["src_addr"], w["src_port"], w["dst_addr"], w["time_start"].replace(tzinfo=None))
             for w in want]
        assert all(g.flow_direction == w["direction"] for g, w in zip(got, want))
        assert all(g.duration_s == (w["time_end"] - w["time_start"]).total_seconds() for g, w in zip(got, want))
    # the global top N of any direction is exact from the union over exporters
    overall = sorted((r for r in out if r.direction == "all"), key=lambda r: (-r.bytes, -r.packets))[:n]
    assert [r.bytes for r in overall] == [w["bytes"] for w in sorted(rows, key=key)[:n]]
    assert {r.proto_name for r in out} <= {"TCP", "UDP", "ICMP"}
    with pytest.raises(ValueError, match="top_n"):
        largest_flows.largest_flows(df, 0)


@pytest.mark.integration
def test_empty_day_gives_empty_tables_with_declared_columns(spark):
    from flowlake.jobs import common, largest_flows, traffic_totals
    from flowlake.schemas import FLOWS_TABLE, registry

    empty = common.with_direction(spark.createDataFrame([], FLOWS_TABLE.spark_schema()), LOCAL)
    for name, df in (("traffic_totals", traffic_totals.traffic_totals(empty)),
                     ("largest_flows", largest_flows.largest_flows(empty, 3))):
        declared = [c for c in registry()[name].names if c not in ("date", "count_at")]  # count_at: ctx.write
        assert set(declared) <= set(df.columns), name
        assert df.count() == 0, name
