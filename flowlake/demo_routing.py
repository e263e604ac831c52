"""The demo's routing: each modelled router sends its BGP view to flowlake's BMP collector.

Each border router of the demo site (demo_site.ROUTERS) opens a BMP session from its own
address (so the collector names its table after the exporter, as a router's own BMP
would) and sends, as pre-policy Adj-RIB-In of its upstream neighbour (RFC 7854 Route
Monitoring after a Peer Up), a route for every remote prefix the traffic model draws from
(collectors/traffic/bmp.py encodes them):

- border-a, transit Cogent (AS 174): every prefix via 174, then the origin;
- border-c, transit Lumen (AS 3356): every prefix via 3356, then the origin;
- border-b, the AMS-IX peering LAN: a quarter of the prefixes from their origin AS directly
  (bilateral peers), the rest via the route server's peer Hurricane Electric (AS 6939).

Origins are the demo MMDB's ASes (demo_site.mmdb_networks: AS 20000+o for o.0.0.0/8,
30000+k for 2a00:k000::/20, the PingER sites' own /16s and /21s inside them), tagged with
the neighbour's communities (and a large community with the site's ASN) as operators tag
where a route was learnt. The ingest then puts AS path, communities and prefixes on every
flow, and the Peering dashboard has its day. The sessions stay open until the demo ends
(a session that ends takes its routes with it: the stack's later flows are unrouted).
"""
from __future__ import annotations

import ipaddress
import socket
import time

from . import demo_site
from .collectors.traffic import bmp

IX_DIRECT = 4  # one prefix in IX_DIRECT comes from a bilateral peer at the IX
# router -> (neighbour address, neighbour AS, next hop, community tag)
NEIGHBOURS = {
    "127.0.0.2": ("198.51.100.1", 174, "198.51.100.1", "174:21100"),     # Cogent
    "127.0.0.3": ("80.249.208.1", 6939, "80.249.208.1", "6939:7000"),    # AMS-IX (via HE)
    "127.0.0.4": ("198.51.100.9", 3356, "198.51.100.9", "3356:123"),     # Lumen
}


def prefixes() -> list[tuple[str, int]]:
    """(prefix, origin AS) of every remote network the model draws from."""
    out = [(f"{o}.0.0.0/8", 20000 + o) for o in demo_site.PUBLIC_FIRST]
    out += [(str(ipaddress.ip_network(f"2a00:{k:x}000::/20")), 30000 + k) for k in range(16)]
    out += [(prefix, asn) for prefix, (asn, _cc) in demo_site.COLLABORATORS.items()]
    return out


def routes(router: str) -> list[dict]:
    """The routes a modelled router learns from its upstream: prefix, AS path, next hop,
    communities, large communities (the site's own tag: 64496:<router's 3rd octet>:1)."""
    _peer, asn, nh, tag = NEIGHBOURS[router]
    out = []
    for i, (prefix, origin) in enumerate(prefixes()):
        v6 = ":" in prefix
        direct = router == "127.0.0.3" and i % IX_DIRECT == 0
        path = [origin] if direct else [asn, origin]
        out.append({"prefix": prefix, "as_path": path, "next_hop": "2001:db8:ffff::1" if v6 else nh,
                    "communities": [f"{path[0]}:100"] if direct else [tag],
                    "large": [f"{demo_site.SITE_ASN}:{router.rsplit('.', 1)[1]}:1"]})
    return out


def messages(router: str) -> bytes:
    """The router's whole BMP feed: Initiation, Peer Up, Route Monitoring of every route."""
    peer, asn, _nh, _tag = NEIGHBOURS[router]
    out = [bmp.initiation(demo_site.ROUTERS[router][0]),
           bmp.peer_up(peer, asn, local=router, local_as=demo_site.SITE_ASN)]
    for r in routes(router):
        for update in bmp.updates([r["prefix"]], r["as_path"], r["next_hop"], r["communities"], r["large"]):
            out.append(bmp.route_monitoring(peer, asn, update))
    return b"".join(out)


class Feeds:
    """The open BMP sessions of the modelled routers (close() ends them)."""

    def __init__(self, cfg, timeout: float = 30.0):
        host = cfg.routing.bmp_bind if cfg.routing.bmp_bind not in ("0.0.0.0", "::") else "127.0.0.1"
        self.sockets: list[socket.socket] = []
        self.routes = 0
        try:
            for router in demo_site.ROUTERS:
                s = socket.create_connection((host, int(cfg.routing.bmp_port)), timeout=timeout,
                                             source_address=(router, 0))
                s.sendall(messages(router))
                self.sockets.append(s)
                self.routes += len(routes(router))
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        for s in self.sockets:
            s.close()
        self.sockets = []


def announce(cfg, timeout: float = 60.0) -> Feeds:
    """Open every router's session and wait until the collector answers with their routes."""
    from .collectors.routing import service  # noqa: PLC0415  (start-up: only the demo asks)

    feeds = Feeds(cfg)
    probe = {r: routes(r)[-1] for r in demo_site.ROUTERS}  # the last route each router sent
    deadline = time.monotonic() + timeout
    while True:
        try:
            with service.Client(cfg) as c:
                got = {r: c.lookup_batch(r, [_inside(p["prefix"])])[0] for r, p in probe.items()}
            if all(g and g.get("prefix") == probe[r]["prefix"] for r, g in got.items()):
                return feeds
        except Exception:  # noqa: BLE001, S110 - not up yet: asked again below
            pass
        if time.monotonic() > deadline:
            feeds.close()
            raise TimeoutError("the routing collector did not hold the modelled routers' routes "
                               f"within {timeout:.0f} s")
        time.sleep(0.2)


def _inside(prefix: str) -> str:
    net = ipaddress.ip_network(prefix)
    return str(net.network_address + 1)
