"""BMP messages built byte by byte (RFC 7854, RFC 4271) for tests that send the routing
collector what a router would, or what no router should (bad input)."""
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


def route_monitoring(peer: str, asn: int, update: bytes, post_policy: bool = False) -> bytes:
    return header(ROUTE_MONITORING, peer_header(peer, asn, post_policy) + update)


def initiation(sys_name: str) -> bytes:
    name = sys_name.encode()
    return header(INITIATION, struct.pack("!HH", 2, len(name)) + name)
