"""The routing context on flows (issue 33, Flow revision 4) end to end, with real routers.

The traffic model's routers export half an hour of flows to a real nfcapd 1.7.1; the
shipper sends the file to a real Kafka broker; two Debian gobgpd speakers play the router
(as in test_routing.py: A announces, B sends BMP to flowlake's collector, started as the
stack starts it); A announces prefixes covering the flows' destinations (and some of their
sources) with AS paths, communities and large communities; the ingest (Spark, the real
micro-batch) looks every flow up in its exporter's table. Every landed flow carries the
attributes of the longest matching route announced (worked out here with `ipaddress`), its
AS numbers per [routing] as_sources, its BGP next hop from the route only where it exported
none. Then a more specific route is withdrawn and the same file shipped again: the flows of
the second batch carry the covering route's attributes, within the bound printed.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from test_record3 import model_capture
from test_routing import A_ADDR, A_AS, B_ADDR, B_AS, CHANGE_BOUND_S, ROUTER, wait
from test_shipper import dump

from flowlake.base import config, delta
from flowlake.collectors import kafka as kafka_service
from flowlake.collectors import ship as ship_mod
from flowlake.collectors.routing import service
from flowlake.pipelines import ingest
from flowlake.pipelines.enrich import routing as routing_enrich

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from services.bgp import BmpServer, GoBGP, Neighbor, free_port  # noqa: E402

pytestmark = pytest.mark.integration
ROUTED = 24  # destination prefixes announced
# withdraw -> the next batch committed with it: lookups change within CHANGE_BOUND_S, the
# rest is one ingest batch (Spark) on a loaded 2-core machine
LAKE_BOUND_S = 180.0


def covering(addr: str) -> str:
    a = ipaddress.ip_address(addr)
    return str(ipaddress.ip_network(f"{addr}/{24 if a.version == 4 else 48}", strict=False))


def plan_routes(rows: list[dict]) -> list[dict]:
    """Prefixes over the flows' most frequent destinations and a few sources, each with its own
    attributes; one /25 (or /49) more specific inside the first, with other attributes."""
    dst = [p for p, _ in Counter(covering(r["dst_addr"]) for r in rows).most_common(ROUTED)]
    src = [p for p, _ in Counter(covering(r["src_addr"]) for r in rows).most_common(6) if p not in dst][:3]
    out = []
    for i, prefix in enumerate(dst + src):
        v6 = ":" in prefix
        out.append({"prefix": prefix, "as_path": [64600 + i % 5] + [65000 + i] * (i % 3),
                    "next_hop": f"2001:db8::{1 + i % 3:x}" if v6 else f"192.0.2.{1 + i % 3}",
                    "communities": [f"65401:{i}", "65401:1000"] if i % 2 else [],
                    "large": [f"{A_AS}:{i}:{2 * i}"] if i % 3 == 0 else []})
    net = ipaddress.ip_network(dst[0])
    upper = list(net.subnets(1))[1]
    out.append({"prefix": str(upper), "as_path": [64650, 4200000001], "next_hop": "2001:db8::9" if net.version == 6
                else "192.0.2.9", "communities": ["65402:7"], "large": []})
    return out


def best(routes: list[dict], addr: str) -> dict | None:
    a = ipaddress.ip_address(addr)
    hits = [r for r in routes if a in ipaddress.ip_network(r["prefix"])]
    return max(hits, key=lambda r: ipaddress.ip_network(r["prefix"]).prefixlen) if hits else None


def expected(row: dict, routes: list[dict]) -> dict:
    d, s = best(routes, row["dst_addr"]), best(routes, row["src_addr"])
    own_nh = row.get("bgp_next_hop")
    no_nh = own_nh in (None, "", "0.0.0.0", "::")
    return {
        "dst_as_path": [A_AS, *d["as_path"]] if d else [],
        "dst_communities": d["communities"] if d else [],
        "dst_large_communities": d["large"] if d else [],
        "dst_prefix": d["prefix"] if d else "", "src_prefix": s["prefix"] if s else "",
        # as_sources = routing, flow, geoip: the route's origin AS first
        "dst_as": d["as_path"][-1] if d else row["dst_as"], "src_as": s["as_path"][-1] if s else row["src_as"],
        "bgp_next_hop": d["next_hop"] if (d and no_nh) else own_nh,
    }


COLS = ("dst_as_path", "dst_communities", "dst_large_communities", "dst_prefix", "src_prefix", "dst_as", "src_as",
        "bgp_next_hop")


@pytest.fixture(scope="module")
def stack(kafka, tmp_path_factory):
    home = tmp_path_factory.mktemp("routing-flows")
    env = {**os.environ, "FLOWLAKE_HOME": str(home), "FLOWLAKE_KAFKA_FLOWS_TOPIC": "flows.test-routing",
           "FLOWLAKE_KAFKA_ACTIVE_TOPIC": "active.test-routing", "FLOWLAKE_KAFKA_LEDGER_TOPIC": "ledger.test-routing",
           "FLOWLAKE_ROUTING_ENABLED": "true", "FLOWLAKE_ROUTING_BMP_PORT": str(free_port()),
           "FLOWLAKE_ROUTING_AS_SOURCES": "routing,flow,geoip"}
    cfg = config.load(env=env)
    kafka_service.ensure_topics(cfg)
    nf, _, _ = model_capture(home / "capture", "ipfix")
    rows = dump(nf)
    comp = service.Routing(cfg)
    a = b = None
    try:
        comp.start()
        port_a, port_b = free_port(A_ADDR), free_port(B_ADDR)
        a = GoBGP(home / "a", A_AS, "10.0.0.1", A_ADDR, port=port_a, neighbors=[Neighbor(B_ADDR, B_AS, port_b)])
        b = GoBGP(home / "b", B_AS, "10.0.0.2", B_ADDR, port=port_b, neighbors=[Neighbor(A_ADDR, A_AS, port_a)],
                  bmp=[BmpServer("127.0.0.1", cfg.routing.bmp_port)])
        a.start()
        b.start()
        wait(lambda: b.established(A_ADDR), 30, "B's BGP session with A")
        yield cfg, nf, rows, a
    finally:
        for p in (b, a):
            if p is not None:
                p.stop()
        comp.stop()


def lookup_prefix(cfg, addr: str) -> str:
    with service.Client(cfg) as c:
        return c.lookup([{"addr": addr, "exporter": ROUTER}])[0]["prefix"]


def ship(cfg, nf: Path, name: str) -> None:
    spool = cfg.path("nfcapd")
    spool.mkdir(parents=True, exist_ok=True)
    path = spool / name
    shutil.copy(nf, path)
    res = subprocess.run(ship_mod.ship_argv(cfg, [path]), capture_output=True, text=True, env=ship_mod.child_env(cfg))
    assert res.returncode == 0, res.stderr[-2000:]


def landed(cfg, name: str) -> list[dict]:
    files = delta.version_files(cfg.lake / "flows")[1]
    con = duckdb.connect()
    got = con.execute(f"select file_seq, src_addr, dst_addr, {', '.join(COLS)} "
                      f"from read_parquet({files!r}, union_by_name = true) where source_file = ? order by file_seq",
                      [name]).fetchall()
    return [dict(zip(("file_seq", "src_addr", "dst_addr", *COLS), g, strict=True)) for g in got]


def check(lake: list[dict], rows: list[dict], routes: list[dict], what: str) -> int:
    by_seq = {r["file_seq"]: r for r in rows}
    assert sorted(r["file_seq"] for r in lake) == sorted(by_seq), f"{what}: every flow landed once"
    routed = 0
    for got in lake:
        want = expected(by_seq[got["file_seq"]], routes)
        mine = {k: got[k] for k in COLS}
        assert mine == want, f"{what}: flow {got['file_seq']} {got['src_addr']} -> {got['dst_addr']}"
        routed += bool(want["dst_prefix"])
    return routed


def test_flows_get_the_routes_in_force_and_a_withdraw_reaches_the_lake(stack):
    cfg, nf, rows, a = stack
    routes = plan_routes(rows)
    for r in routes:
        a.announce(r["prefix"], r["as_path"], r["next_hop"], r["communities"], r["large"])
    specific = routes[-1]
    probe = str(ipaddress.ip_network(specific["prefix"]).network_address + 1)
    # network address + 1: the more specific is the upper half of its covering prefix
    wait(lambda: all(lookup_prefix(cfg, str(ipaddress.ip_network(r["prefix"])[1])) == r["prefix"] for r in routes),
         30, "every announced route in the collector's table")

    ship(cfg, nf, "nfcapd.202604080000")
    ingest.run(cfg, once=True)
    first = landed(cfg, "nfcapd.202604080000")
    routed = check(first, rows, routes, "routes in force")
    in_specific = sum(1 for r in first if r["dst_prefix"] == specific["prefix"])
    print(f"{len(first)} flows, {routed} with a route to the destination, {in_specific} in the more specific")
    assert routed > len(first) // 4 and in_specific > 0, "the announced prefixes cover the model's destinations"
    assert any(r["dst_communities"] for r in first) and any(r["dst_large_communities"] for r in first)
    assert any(not r["dst_prefix"] for r in first) or routed == len(first)

    # withdraw the more specific: the next batch's flows in it get the covering route
    t0 = time.monotonic()
    a.withdraw(specific["prefix"])
    gone = wait(lambda: lookup_prefix(cfg, probe) != specific["prefix"], CHANGE_BOUND_S, "the withdraw in lookups")
    # the ingest keeps the collector's answers CACHE_SECONDS (its documented lag): a batch
    # sooner than that after the first may still carry the withdrawn route (as on a fast box)
    time.sleep(routing_enrich.CACHE_SECONDS)
    ship(cfg, nf, "nfcapd.202604080005")
    ingest.run(cfg, once=True)
    seconds = time.monotonic() - t0
    second = landed(cfg, "nfcapd.202604080005")
    after = routes[:-1]
    check(second, rows, after, "after the withdraw")
    assert not any(r["dst_prefix"] == specific["prefix"] for r in second)
    print(f"withdraw: gone from lookups after {gone:.2f} s, in the lake (next batch committed) after {seconds:.1f} s")
    assert seconds <= LAKE_BOUND_S
    # the first batch keeps the route that was in force when it landed
    assert sum(1 for r in landed(cfg, "nfcapd.202604080000") if r["dst_prefix"] == specific["prefix"]) == in_specific
