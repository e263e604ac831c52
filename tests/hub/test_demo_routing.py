"""The demo's routing (flowlake/demo_routing.py): each modelled router's BMP session, from its
own address, fills its table in flowlake's real routing collector (the Go binary `flowlake
up` starts), and every remote address of the traffic model gets the route the router's
upstream gave it (longest match: the PingER sites' /16s and /21s inside the /8s)."""
from __future__ import annotations

import ipaddress
import time

import pytest

from flowlake import demo_routing, demo_site
from flowlake.base import config
from flowlake.base.ports import free_port
from flowlake.collectors.routing import service
from flowlake.collectors.traffic import lake_rows, model

pytestmark = pytest.mark.integration  # the real routing collector


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    home = tmp_path_factory.mktemp("demo-routing")
    cfg = config.load(env={"FLOWLAKE_HOME": str(home), "FLOWLAKE_ROUTING_ENABLED": "true",
                           "FLOWLAKE_ROUTING_BMP_PORT": str(free_port())})
    comp = service.Routing(cfg)
    comp.start()
    try:
        yield cfg
    finally:
        comp.stop()


def _expected(router: str, addr: str) -> dict:
    a = ipaddress.ip_address(addr)
    hits = [r for r in demo_routing.routes(router) if a in ipaddress.ip_network(r["prefix"])]
    return max(hits, key=lambda r: ipaddress.ip_network(r["prefix"]).prefixlen)


def test_every_modelled_remote_address_gets_its_routers_route(collector):
    cfg = collector
    p = model.ModelParams()
    f, _ = model.generate(p, 1_700_000_000_000, 3_600_000, 5000, seed=11)
    table = lake_rows.lake_table(f, p)
    remote = {}
    for exp, src, dst, inbound in zip(table["exporter"].to_pylist(), table["src_addr"].to_pylist(),
                                      table["dst_addr"].to_pylist(), f["inbound"].tolist(), strict=True):
        remote.setdefault(exp, set()).add(src if inbound else dst)
    t0 = time.monotonic()
    feeds = demo_routing.announce(cfg)
    took = time.monotonic() - t0
    try:
        assert feeds.routes == 3 * len(demo_routing.prefixes())
        with service.Client(cfg) as c:
            for router in demo_site.ROUTERS:
                addrs = sorted(remote[router])
                assert len(addrs) > 100
                for addr, got in zip(addrs, c.lookup_batch(router, addrs), strict=True):
                    want = _expected(router, addr)
                    assert got is not None, (router, addr)
                    assert (got["prefix"], got["as_path"], got["communities"], got["large_communities"]) == (
                        want["prefix"], want["as_path"], want["communities"], want["large"]), (router, addr)
        # the IX router: some prefixes from their origin directly, the rest via the route server's peer
        ix = demo_routing.routes("127.0.0.3")
        assert {len(r["as_path"]) for r in ix} == {1, 2} and sum(len(r["as_path"]) == 1 for r in ix) > 40
    finally:
        feeds.close()
    print(f"\nthe three routers' {feeds.routes} routes answered {took:.2f} s after the sessions opened")
    deadline = time.monotonic() + 10  # a session that ends takes its routes with it
    while service.lookup(cfg, "1.0.0.1", exporter="127.0.0.2")[0].get("prefix"):
        assert time.monotonic() < deadline, "the ended sessions' routes are still answered"
        time.sleep(0.1)
