"""The BMP collector (collectors/routing) against real routers and a real reference.

Two Debian gobgpd speakers on loopback: A (AS 64501) announces IPv4 and IPv6 routes with
AS paths, communities and large communities to B (AS 64512); B sends BMP ("all": pre- and
post-policy Adj-RIB-In and its Loc-RIB, the Loc-RIB without a Peer Up first) to flowlake's
collector, started as the stack starts it (the `routing` component), and to pmacct's
pmbmpd, the independent decoder. The collector's table equals pmbmpd's route for route
(pre- and post-policy; pmbmpd 1.7.7 drops Loc-RIB messages without a Peer Up) and its
Loc-RIB equals B's own RIB (`gobgp global rib`); a withdraw and a restart of B are seen in
lookups within seconds; bad input (malformed, truncated, an unknown type, a flood over
max_routes_per_router) resets that session only, counted by reason.
"""
from __future__ import annotations

import base64
import ipaddress
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from flowlake.base import config
from flowlake.base.gobuild import ROUTING, go_binary
from flowlake.collectors.routing import service

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from flowlake.collectors.traffic import bmp as bmpgen  # noqa: E402
from services.bgp import BmpServer, GoBGP, Neighbor, PmBmpd, free_port  # noqa: E402

pytestmark = pytest.mark.integration

A_ADDR, B_ADDR = "127.0.0.11", "127.0.0.12"
A_AS, B_AS = 64501, 64512
ROUTER = "127.0.0.1"  # B's BMP session comes from the default loopback source
CHANGE_BOUND_S = 10.0  # a withdraw or a router going away is gone from lookups within this (typically < 0.1 s)


def routes() -> list[dict]:
    """What A announces: covering prefixes and more specifics, IPv4 and IPv6, AS paths of
    several lengths, with and without (large) communities, two next hops per family."""
    out = []
    for i in range(16):
        out.append({"prefix": f"198.18.{i}.0/24", "as_path": [64600 + i % 3] + [64700 + j for j in range(i % 4)],
                    "next_hop": f"192.0.2.{1 + i % 2}", "communities": [f"65401:{i}", "65401:1000"] if i % 3 else [],
                    "large": [f"{A_AS}:{i}:{2 * i}"] if i % 2 else []})
    for i in range(0, 16, 4):  # more specifics inside some of them, another origin
        out.append({"prefix": f"198.18.{i}.128/25", "as_path": [64650, 4200000000 + i], "next_hop": "192.0.2.3",
                    "communities": [f"65402:{i}"], "large": []})
    for i in range(6):
        out.append({"prefix": f"2001:db8:{100 + i:x}::/48", "as_path": [64601, 64800 + i],
                    "next_hop": f"2001:db8::{11 + i % 2:x}", "communities": [f"65401:{30 + i}"] if i % 2 else [],
                    "large": [f"{A_AS}:3:{i}"]})
    out.append({"prefix": "2001:db8:100:8000::/49", "as_path": [64650], "next_hop": "2001:db8::13",
                "communities": ["65402:1"], "large": []})
    return out


ROUTES = routes()


def inside(prefix: str) -> str:
    """An address in the prefix's upper half (in a /25 more specific where there is one)."""
    net = ipaddress.ip_network(prefix)
    return str(net.network_address + net.num_addresses - 2)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("routing")
    env = {"FLOWLAKE_HOME": str(home), "FLOWLAKE_ROUTING_ENABLED": "true",
           "FLOWLAKE_ROUTING_BMP_PORT": str(free_port())}
    cfg = config.load(env=env)
    comp = service.Routing(cfg)
    pm = a = b = None
    try:
        comp.start()
        pm = PmBmpd(home / "pmbmpd").start()
        port_a, port_b = free_port(A_ADDR), free_port(B_ADDR)
        a = GoBGP(home / "a", A_AS, "10.0.0.1", A_ADDR, port=port_a, neighbors=[Neighbor(B_ADDR, B_AS, port_b)])
        b = GoBGP(home / "b", B_AS, "10.0.0.2", B_ADDR, port=port_b, neighbors=[Neighbor(A_ADDR, A_AS, port_a)],
                  bmp=[BmpServer("127.0.0.1", cfg.routing.bmp_port), BmpServer("127.0.0.1", pm.port)])
        a.start()
        b.start()
        wait(lambda: b.established(A_ADDR), 30, "B's BGP session with A")
        for r in ROUTES:
            a.announce(r["prefix"], r["as_path"], r["next_hop"], r["communities"], r["large"])
        ns = SimpleNamespace(cfg=cfg, env={**os.environ, **env}, comp=comp, pm=pm, a=a, b=b, home=home)
        wait(lambda: len(ours(ns)) == 2 * len(ROUTES), 30, "the collector to hold every route twice (pre/post)")
        yield ns
    finally:
        for p in (b, a, pm):
            if p is not None:
                p.stop()
        comp.stop()


def wait(check, timeout: float, what: str) -> float:
    """Seconds until check() holds (fails the test after timeout)."""
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - t0


def ask(lab, req: dict) -> dict:
    return service.ask(lab.cfg, req)


def dump(lab, router: str = ROUTER) -> list[dict]:
    try:
        return ask(lab, {"op": "dump", "router": router})["paths"]
    except ValueError:  # no such router yet
        return []


def ours(lab, views=("pre-policy", "post-policy")) -> dict[tuple, dict]:
    return {(ROUTER, p["peer"], p["rib"], p["prefix"]): {k: p[k] for k in ("as_path", "communities",
                                                                           "large_communities", "next_hop")}
            for p in dump(lab) if p["rib"] in views}


def lookup(lab, addr: str, exporter: str = ROUTER) -> dict:
    with service.Client(lab.cfg) as c:
        return c.lookup([{"addr": addr, "exporter": exporter}])[0]


def flowlake(lab, *args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", *args], env=lab.env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def assert_same_as_pmbmpd(lab) -> None:
    wait(lambda: ours(lab) == lab.pm.table(), 15, "the collector and pmbmpd to agree")
    mine, ref = ours(lab), lab.pm.table()
    assert mine == ref, {k: (mine.get(k), ref.get(k)) for k in set(mine) | set(ref) if mine.get(k) != ref.get(k)}


def test_table_equals_pmbmpd_route_for_route(lab):
    assert_same_as_pmbmpd(lab)
    mine = ours(lab)
    assert len(mine) == 2 * len(ROUTES)
    # and both hold what A announced (B's eBGP session puts A's AS first)
    for r in ROUTES:
        for view in ("pre-policy", "post-policy"):
            got = mine[(ROUTER, A_ADDR, view, r["prefix"])]
            assert got == {"as_path": [A_AS, *r["as_path"]], "communities": r["communities"],
                           "large_communities": r["large"], "next_hop": r["next_hop"]}


def test_loc_rib_without_peer_up_equals_the_routers_own_rib(lab):
    """gobgpd sends its Loc-RIB with no Peer Up (RFC 9069): accepted; it equals `gobgp global rib`."""
    loc = {p["prefix"]: p for p in dump(lab) if p["rib"] == "loc-rib"}
    rib = {r["prefix"]: r for fam in ("ipv4", "ipv6") for r in lab.b.rib(fam)}
    assert set(loc) == set(rib) == {r["prefix"] for r in ROUTES}
    for prefix, r in rib.items():
        p = loc[prefix]
        assert (p["as_path"], p["next_hop"], p["communities"], p["large_communities"]) == \
            (r["as_path"], r["next_hop"], r["communities"], r["large"]), prefix


def test_lookups_give_the_longest_match_and_its_attributes(lab):
    queries = [{"addr": inside(r["prefix"]), "exporter": ROUTER} for r in ROUTES]
    t0 = time.perf_counter()
    with service.Client(lab.cfg) as c:
        results = c.lookup(queries * 100)
    seconds = time.perf_counter() - t0
    print(f"{len(queries) * 100} lookups in one batch: {seconds * 1000:.1f} ms over the socket")
    by_prefix = {r["prefix"]: r for r in ROUTES}
    for q, res in zip(queries, results[:len(queries)], strict=True):
        want = max((p for p in by_prefix if ipaddress.ip_address(q["addr"]) in ipaddress.ip_network(p)),
                   key=lambda p: ipaddress.ip_network(p).prefixlen)
        r = by_prefix[want]
        assert res["prefix"] == want and res["router"] == ROUTER and res["rib"] == "loc-rib"
        assert res["as_path"] == [A_AS, *r["as_path"]] and res["origin_as"] == r["as_path"][-1]
        assert (res["communities"], res["large_communities"], res["next_hop"]) == \
            (r["communities"], r["large"], r["next_hop"])
    # the compact batch form gives the same answers
    with service.Client(lab.cfg) as c:
        compact = c.lookup_batch(ROUTER, [q["addr"] for q in queries] + ["10.255.0.1"])
    assert compact[:-1] == results[:len(queries)] and compact[-1] is None
    # an unknown destination: explicit and empty
    miss = lookup(lab, "10.255.0.1")
    assert (miss["prefix"], miss["as_path"], miss["communities"], miss["origin_as"]) == ("", [], [], 0)
    # one router sends BMP: every exporter uses its table
    other = lookup(lab, inside(ROUTES[0]["prefix"]), exporter="192.0.2.77")
    assert other == lookup(lab, inside(ROUTES[0]["prefix"])) and other["router"] == ROUTER

    # the CLI and flowlake status say the same
    r = ROUTES[1]
    out = json.loads(flowlake(lab, "routing", "lookup", inside(r["prefix"]), "--exporter", ROUTER, "--json").stdout)
    assert out[0]["prefix"] == r["prefix"] and out[0]["as_path"] == [A_AS, *r["as_path"]]
    text = flowlake(lab, "routing", "lookup", inside(r["prefix"])).stdout
    assert r["prefix"] in text and " ".join(str(a) for a in [A_AS, *r["as_path"]]) in text
    st = json.loads(flowlake(lab, "routing", "status", "--json").stdout)
    v4 = sum(1 for x in ROUTES if ":" not in x["prefix"])
    router = st["routers"][ROUTER]
    assert router["session"] == "up" and router["routes"] == {"ipv4": v4, "ipv6": len(ROUTES) - v4}
    assert router["paths"] == 3 * len(ROUTES) and router["lookup_view"] == "loc-rib" and router["sys_name"] == "GoBGP"
    assert st["memory_bytes"] > 0 and router["last_update"]
    full = json.loads(flowlake(lab, "status", "--json").stdout)
    assert full["routing"]["routers"][ROUTER]["routes"] == router["routes"]
    assert full["components"]["routing"]["state"] == "running"
    assert "Routing (BMP on" in flowlake(lab, "routing", "status").stdout
    metrics = flowlake(lab, "metrics").stdout
    assert f'flowlake_routing_routers_paths{{component="routing",key1="{ROUTER}"}} {float(router["paths"])}' in metrics
    assert 'flowlake_component_up{component="routing"} 1.0' in metrics


def test_the_ingests_packed_lookup_equals_the_lookups_one_by_one(lab):
    """pipelines/enrich/routing.py asks with `lookup_packed` (addresses and answers as packed
    arrays, issue 33's CPU bound): per row the same route and attributes as `lookup`, for
    IPv4, IPv6, IPv4-mapped, unrouted and null addresses, two exporters, and a second table
    answered partly from the ingest's cache."""
    from flowlake.pipelines.enrich import routing as routing_enrich  # noqa: PLC0415  (pyarrow: only here)

    pa = pytest.importorskip("pyarrow")
    addrs = [inside(r["prefix"]) for r in ROUTES] + ["10.255.0.1", "::ffff:" + inside(ROUTES[2]["prefix"]),
                                                      "2001:db8:ffff::1", None]
    rows = addrs + addrs[::-1]
    exporters = [ROUTER] * len(addrs) + ["192.0.2.77"] * len(addrs)
    srcs = [addrs[(i * 7) % len(addrs)] for i in range(len(rows))]
    lk = routing_enrich.Lookup(str(service.socket_path(lab.cfg)))
    try:
        outs = []
        for part in (slice(0, len(rows) // 2), slice(None)):  # the second table meets the first's answers
            cols = {"src_addr": pa.array(srcs[part], pa.string()), "dst_addr": pa.array(rows[part], pa.string()),
                    "bgp_next_hop": pa.array([None] * len(rows[part]), pa.string())}
            outs.append((part, routing_enrich.routing_columns(lk, cols, pa.array(exporters[part]).dictionary_encode())))
        # ROUTER's addresses of the second table were all in the first: asked again only if
        # CACHE_SECONDS went by in between (a loaded box)
        assert lk.errors == 0 and 2 <= lk.requests <= 3, (lk.errors, lk.requests)
    finally:
        lk.close()
    for part, out in outs:
        for i, (exporter, dst, src) in enumerate(zip(exporters[part], rows[part], srcs[part], strict=True)):
            want = lookup(lab, dst, exporter) if dst else {"prefix": "", "as_path": [], "communities": [],
                                                           "large_communities": [], "origin_as": 0, "next_hop": ""}
            got = {"prefix": out["dst_prefix"][i].as_py(), "as_path": out["dst_as_path"][i].as_py(),
                   "communities": out["dst_communities"][i].as_py(),
                   "large_communities": out["dst_large_communities"][i].as_py(),
                   "origin_as": out["dst_as_routing"][i].as_py(), "next_hop": out["bgp_next_hop"][i].as_py() or ""}
            assert got == {k: want[k] for k in got}, (exporter, dst)
            assert out["src_prefix"][i].as_py() == (lookup(lab, src, exporter)["prefix"] if src else ""), src
    assert sum(1 for _, out in outs for p in out["dst_prefix"].to_pylist() if p) > len(ROUTES)  # not all unknown
    # a bad request is refused with the reason, the connection stays usable
    with service.Client(lab.cfg) as c:
        with pytest.raises(ValueError, match="offsets"):
            c.request({"op": "lookup_packed", "exporter": ROUTER, "offsets": "AAA=", "data": ""})
        with pytest.raises(ValueError, match="not an IP address"):
            c.request({"op": "lookup_packed", "exporter": ROUTER, "data": base64.b64encode(b"xyz").decode(),
                       "offsets": base64.b64encode(struct.pack("<2i", 0, 3)).decode()})
        assert c.request({"op": "status"})["routers"][ROUTER]["session"] == "up"


def test_a_withdraw_is_gone_from_lookups_within_seconds(lab):
    specific = next(r for r in ROUTES if r["prefix"].endswith("/25"))
    covering = specific["prefix"].replace(".128/25", ".0/24")
    addr = inside(specific["prefix"])
    assert lookup(lab, addr)["prefix"] == specific["prefix"]
    lab.a.withdraw(specific["prefix"])
    seconds = wait(lambda: lookup(lab, addr)["prefix"] == covering, CHANGE_BOUND_S, "the withdraw in lookups")
    print(f"withdraw seen in lookups after {seconds:.2f} s")
    assert_same_as_pmbmpd(lab)
    assert all(k[3] != specific["prefix"] for k in ours(lab))
    lab.a.announce(specific["prefix"], specific["as_path"], specific["next_hop"], specific["communities"])
    wait(lambda: lookup(lab, addr)["prefix"] == specific["prefix"], CHANGE_BOUND_S, "the route back")


def _status(lab) -> dict:
    return ask(lab, {"op": "status"})


def test_bad_input_resets_only_that_session(lab):
    before = dump(lab)
    assert before
    good = bmpgen.route_monitoring("192.0.2.50", 64999, bmpgen.bgp_update(["203.0.113.0/24"], [64999], "192.0.2.50"))
    bad_marker = bytearray(good)
    bad_marker[48] = 0  # the BGP marker inside the Route Monitoring
    cases = {
        "malformed": (bmpgen.initiation("bad-1") + good + bytes(bad_marker), False),
        "unknown_type": (bmpgen.initiation("bad-2") + good + bmpgen.header(9, b"\x00" * 50), False),
        "truncated": (bmpgen.initiation("bad-3") + good + good[:30], True),  # then the connection closes
        "bad_version": (bmpgen.initiation("bad-4") + b"\x01" + good[1:], False),
    }
    port = lab.cfg.routing.bmp_port
    for i, (reason, (data, close)) in enumerate(cases.items()):
        src = f"127.0.0.{20 + i}"
        resets = _status(lab)["resets"].get(reason, 0)
        with socket.create_connection(("127.0.0.1", port), source_address=(src, 0)) as s:
            s.sendall(data)
            if close:
                s.shutdown(socket.SHUT_WR)
            wait(lambda reason=reason, resets=resets: _status(lab)["resets"].get(reason, 0) == resets + 1, 10,
                 f"the {reason} session to be reset")
        st = _status(lab)
        r = st["routers"][src]
        assert r["session"] == "closed" and r["resets"] == {reason: 1} and r["paths"] == 0
        assert r["last_error"].startswith(reason) and r["sys_name"] == f"bad-{i + 1}", r
        assert st["routers"][ROUTER]["session"] == "up"
        assert dump(lab) == before, f"B's table changed after a {reason} session"
    assert lookup(lab, inside(ROUTES[1]["prefix"]))["prefix"] == ROUTES[1]["prefix"]
    log = lab.comp.managed().logfile.read_text()
    for reason in cases:
        assert f"BMP session reset: {reason}" in log


def test_a_router_restart_is_seen_within_seconds(lab):
    addr = inside(ROUTES[2]["prefix"])
    assert lookup(lab, addr)["prefix"] == ROUTES[2]["prefix"]
    lab.b.stop()
    gone = wait(lambda: lookup(lab, addr)["prefix"] == "", CHANGE_BOUND_S, "B's routes to leave lookups")
    assert _status(lab)["routers"][ROUTER]["session"] == "closed"
    lab.b.start()
    back = wait(lambda: lookup(lab, addr)["prefix"] == ROUTES[2]["prefix"], 60, "B's routes after its restart")
    print(f"router down: routes gone after {gone:.2f} s; restarted: re-learned after {back:.2f} s")
    wait(lambda: len(ours(lab)) == 2 * len(ROUTES), 30, "every route re-learned")
    assert _status(lab)["routers"][ROUTER]["sessions"] >= 2
    assert_same_as_pmbmpd(lab)


def test_a_router_over_max_routes_is_cut_off(tmp_path):
    """A flood over [routing] max_routes_per_router: that session is cut off with a clear
    error and held down; another router's table stays."""
    env = {"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_ROUTING_ENABLED": "true",
           "FLOWLAKE_ROUTING_BMP_PORT": str(free_port()), "FLOWLAKE_ROUTING_MAX_ROUTES_PER_ROUTER": "20"}
    cfg = config.load(env=env)
    comp = service.Routing(cfg)
    comp.start()
    try:
        port = cfg.routing.bmp_port
        small = bmpgen.route_monitoring("192.0.2.1", 64900, bmpgen.bgp_update(
            [f"10.1.{i}.0/24" for i in range(10)], [64900], "192.0.2.1"))
        keep = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.30", 0))
        keep.sendall(bmpgen.initiation("small") + small)
        flood = b"".join(bmpgen.route_monitoring("192.0.2.2", 64901, bmpgen.bgp_update(
            [f"10.{2 + k}.{i}.0/24" for i in range(10)], [64901], "192.0.2.2")) for k in range(3))
        with socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.31", 0)) as s:
            s.sendall(bmpgen.initiation("flood") + flood)
            wait(lambda: service.ask(cfg, {"op": "status"})["resets"].get("max_routes") == 1, 10, "the cut-off")
        st = service.ask(cfg, {"op": "status"})
        assert "max_routes_per_router = 20" in st["routers"]["127.0.0.31"]["last_error"]
        assert st["routers"]["127.0.0.31"]["paths"] == 0
        assert st["routers"]["127.0.0.30"]["paths"] == 10 and st["routers"]["127.0.0.30"]["session"] == "up"
        # held down: a reconnect is refused (counted), not re-flooded
        with socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.31", 0)) as s:
            s.sendall(bmpgen.initiation("flood"))
            wait(lambda: service.ask(cfg, {"op": "status"})["refused"] == 1, 10, "the refused reconnect")
        keep.close()
    finally:
        comp.stop()


def test_go_unit_tests():
    """The decoder's and table's own tests on crafted bytes (collectors/routing/*_test.go)."""
    res = subprocess.run([go_binary(), "test", "-count=1", "."], cwd=ROUTING.source, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
