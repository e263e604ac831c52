"""Write small pcap files with known flows, for softflowd to turn into real NetFlow."""
from __future__ import annotations

import random
import socket
import struct

ETH_V4, ETH_V6 = b"\x08\x00", b"\x86\xdd"


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def _l4(proto: int, sport: int, dport: int, payload: bytes, flags: int) -> bytes:
    if proto == 6:
        return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, flags, 65535, 0, 0) + payload
    if proto == 17:
        return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    return struct.pack("!BBHHH", 8, 0, 0, sport & 0xFFFF, 1) + payload  # ICMP echo request


def packet(src: str, dst: str, proto: int, sport: int, dport: int, size: int, flags: int = 0x18) -> bytes:
    v6 = ":" in src
    hdr = 40 if v6 else 20
    l4h = {6: 20, 17: 8}.get(proto, 8)
    payload = b"\xab" * max(0, size - hdr - l4h)
    if v6:
        nxt = 58 if proto == 1 else proto
        l4 = _l4(128 if proto == 1 else proto, sport, dport, payload, flags) if proto == 1 else _l4(proto, sport, dport, payload, flags)
        ip = struct.pack("!IHBB16s16s", 6 << 28, len(l4), nxt, 64,
                         socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst))
        return b"\x00" * 6 + b"\x02" * 6 + ETH_V6 + ip + l4
    l4 = _l4(proto, sport, dport, payload, flags)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, 0, 64, proto, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    return b"\x00" * 6 + b"\x02" * 6 + ETH_V4 + ip + l4


def write_pcap(path, flows: int, seed: int = 1, start: float | None = None, ipv6_share: float = 0.2,
               packets_per_flow: int = 1) -> int:
    """`flows` distinct 5-tuples (TCP, UDP, ICMP; IPv4 and IPv6), `packets_per_flow` each.
    Returns the number of packets written. Packets start an hour ago unless `start` (epoch s)
    says otherwise: softflowd -r exports a year-old capture with wrapped uptimes, which
    nfcapd lands weeks in the future and the shipper quarantines as impossible."""
    if start is None:
        import time

        start = float(int(time.time()) - 3600)
    rng = random.Random(seed)
    out = open(path, "wb")
    out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    t = start
    written = 0
    for i in range(flows):
        proto = rng.choices([6, 17, 1], [0.6, 0.35, 0.05])[0]
        if rng.random() < ipv6_share:
            src, dst = f"2001:db8::{i % 65000 + 1:x}", f"2001:db8:1::{rng.randrange(1, 50):x}"
        else:
            src = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255 or 1}"
            dst = f"192.0.2.{rng.randrange(1, 30)}"
        sport, dport = 1024 + (i % 60000), rng.choice([22, 53, 80, 443, 5021, 2811, 5201])
        size = rng.choice([60, 120, 576, 1500])
        for _ in range(packets_per_flow):
            pkt = packet(src, dst, proto, sport, dport, size)
            t += 0.0001
            out.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(pkt), len(pkt)) + pkt)
            written += 1
    out.close()
    return written


def udp_payloads(path) -> list[bytes]:
    """The UDP payloads of a pcap file (Ethernet or Linux cooked capture, IPv4/IPv6,
    VLAN tags), in capture order: what a router sent, to replay to a collector."""
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    link = struct.unpack(end + "I", data[20:24])[0]
    if link not in (1, 113):
        raise ValueError(f"{path}: link type {link} is not Ethernet (1) or Linux cooked (113)")
    out, pos = [], 24
    while pos + 16 <= len(data):
        incl = struct.unpack(end + "I", data[pos + 8:pos + 12])[0]
        pkt, pos = data[pos + 16:pos + 16 + incl], pos + 16 + incl
        eth, p = (struct.unpack("!H", pkt[12:14])[0], pkt[14:]) if link == 1 else (struct.unpack("!H", pkt[14:16])[0], pkt[16:])
        while eth == 0x8100:
            eth, p = struct.unpack("!H", p[2:4])[0], p[4:]
        if eth == 0x0800 and p[9] == 17:
            l4 = p[(p[0] & 15) * 4:]
        elif eth == 0x86DD and p[6] == 17:
            l4 = p[40:]
        else:
            continue
        out.append(l4[8:struct.unpack("!H", l4[4:6])[0]])
    return out
