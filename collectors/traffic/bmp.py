"""BMP messages built byte by byte (RFC 7854, RFC 4271): what the modelled routers send the
routing collector in the demo (flowlake/demo_routing.py), and what tests send it, as a
router would, or as no router should (bad input)."""
from __future__ import annotations

import ipaddress
import struct

ROUTE_MONITORING, PEER_DOWN, PEER_UP, INITIATION = 0, 2, 3, 4


def header(msg_type: int, body: bytes) -> bytes:
    return struct.pack("!BIB", 3, 6 + len(body), msg_type) + body


def peer_header(peer: str, asn: int, post_policy: bool = False, peer_type: int = 0) -> bytes:
    addr = ipaddress.ip_address(peer)
    flags = (0x80 if addr.version == 6 else 0) | (0x40 if post_policy else 0)
    packed = addr.packed if addr.version == 6 else bytes(12) + addr.packed
    return struct.pack("!BBQ", peer_type, flags, 0) + packed + struct.pack("!I4sII", asn, bytes([10, 0, 0, 1]), 0, 0)


def _attr(flags: int, code: int, value: bytes) -> bytes:
    if len(value) > 255:
        return struct.pack("!BBH", flags | 0x10, code, len(value)) + value
    return struct.pack("!BBB", flags, code, len(value)) + value


def bgp_update(prefixes: list[str], as_path: list[int], next_hop: str, withdrawn: list[str] = ()) -> bytes:
    """A BGP UPDATE of IPv4 unicast routes (NLRI, withdrawn routes), 4-byte AS numbers."""
    def nlri(p: str) -> bytes:
        net = ipaddress.ip_network(p)
        n = (net.prefixlen + 7) // 8
        return bytes([net.prefixlen]) + net.network_address.packed[:n]

    w = b"".join(nlri(p) for p in withdrawn)
    attrs = b""
    if prefixes:
        seg = struct.pack("!BB", 2, len(as_path)) + b"".join(struct.pack("!I", a) for a in as_path)
        attrs = (_attr(0x40, 1, b"\x00") + _attr(0x40, 2, seg)
                 + _attr(0x40, 3, ipaddress.ip_address(next_hop).packed))
    body = struct.pack("!H", len(w)) + w + struct.pack("!H", len(attrs)) + attrs + b"".join(nlri(p) for p in prefixes)
    return b"\xff" * 16 + struct.pack("!HB", 19 + len(body), 2) + body


def _nlri(p: str) -> bytes:
    net = ipaddress.ip_network(p)
    return bytes([net.prefixlen]) + net.network_address.packed[:(net.prefixlen + 7) // 8]


def path_attributes(as_path: list[int], next_hop: str, communities=(), large=(), mp_nlri: bytes = b"") -> bytes:
    """ORIGIN, AS_PATH (4-byte), NEXT_HOP (IPv4) or MP_REACH_NLRI (IPv6, `mp_nlri`),
    COMMUNITIES ("65401:10"), LARGE_COMMUNITY ("64501:1:2")."""
    parts = [as_path[i:i + 255] for i in range(0, len(as_path), 255)]
    seg = b"".join(struct.pack("!BB", 2, len(p)) + b"".join(struct.pack("!I", a) for a in p) for p in parts)
    out = _attr(0x40, 1, b"\x00") + _attr(0x40, 2, seg)
    nh = ipaddress.ip_address(next_hop)
    if nh.version == 4:
        out += _attr(0x40, 3, nh.packed)
    if communities:
        out += _attr(0xC0, 8, b"".join(struct.pack("!HH", *map(int, c.split(":"))) for c in communities))
    if large:
        out += _attr(0xC0, 32, b"".join(struct.pack("!III", *map(int, c.split(":"))) for c in large))
    if mp_nlri:
        out += _attr(0x80, 14, struct.pack("!HBB", 2, 1, 16) + nh.packed + b"\x00" + mp_nlri)
    return out


def updates(prefixes: list[str], as_path: list[int], next_hop: str, communities=(), large=(),
            max_bytes: int = 4096) -> list[bytes]:
    """BGP UPDATEs announcing `prefixes` (all IPv4 or all IPv6) with one set of attributes,
    as many prefixes per message as fit in max_bytes."""
    v6 = ":" in next_hop
    base = len(path_attributes(as_path, next_hop, communities, large, b"x" if v6 else b""))
    room = max_bytes - 19 - 4 - base - (4 if v6 else 0)
    out, chunk, size = [], [], 0
    for p in prefixes + [None]:
        n = _nlri(p) if p else b""
        if chunk and (p is None or size + len(n) > room):
            blob = b"".join(chunk)
            if v6:
                attrs, nlri = path_attributes(as_path, next_hop, communities, large, blob), b""
            else:
                attrs, nlri = path_attributes(as_path, next_hop, communities, large), blob
            body = struct.pack("!H", 0) + struct.pack("!H", len(attrs)) + attrs + nlri
            out.append(b"\xff" * 16 + struct.pack("!HB", 19 + len(body), 2) + body)
            chunk, size = [], 0
        if p:
            chunk.append(n)
            size += len(n)
    return out


def peer_up(peer: str, asn: int, local: str = "192.0.2.254", local_as: int = 64512) -> bytes:
    """A Peer Up with both OPENs (4-byte AS capability)."""
    def bgp_open(a: int, ident: str) -> bytes:
        cap = bytes([2, 6, 65, 4]) + struct.pack("!I", a)
        body = struct.pack("!BHH4sB", 4, min(a, 23456), 90, ipaddress.ip_address(ident).packed, len(cap)) + cap
        return b"\xff" * 16 + struct.pack("!HB", 19 + len(body), 1) + body

    la = ipaddress.ip_address(local)
    addr = la.packed if la.version == 6 else bytes(12) + la.packed
    body = addr + struct.pack("!HH", 179, 40000) + bgp_open(local_as, "10.0.0.2") + bgp_open(asn, "10.0.0.1")
    return header(PEER_UP, peer_header(peer, asn) + body)


def route_monitoring(peer: str, asn: int, update: bytes, post_policy: bool = False, peer_type: int = 0) -> bytes:
    """peer_type 3: the Loc-RIB (RFC 9069; peer address 0.0.0.0, asn the router's own)."""
    return header(ROUTE_MONITORING, peer_header(peer, asn, post_policy, peer_type) + update)


def initiation(sys_name: str) -> bytes:
    name = sys_name.encode()
    return header(INITIATION, struct.pack("!HH", 2, len(name)) + name)
