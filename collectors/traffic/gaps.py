"""Record forms nfcapd 1.7.1 cannot decode (issue 32, part 2), exported with truth.

Each form comes from its own exporter (source address), so counts per exporter tell the
forms apart. The flows are the traffic model's (model.generate); only their export differs:

- "micro":  IPFIX timed only by flowStart/EndMicroseconds (154/155, NTP format): nfcapd
            stores time 0.
- "nat":    IPFIX NAT events (NEL style) timed only by observationTimeMilliseconds 323,
            with natEvent 230 and the translation 225-228: nfcapd stores time 0. `bad`
            adds NAT events without addresses (counted, reason "NAT event without
            addresses"; they land as nfcapd stores them, with the event's time).
- "icmp":   NetFlow v9 as Cisco exports ICMP: type*256+code in L4_DST_PORT 11, no
            ICMP_TYPE 32: nfcapd stores destination port 0.
- "frame":  IPFIX whose only addresses are in a dataLinkFrameSection 315 (Ethernet,
            optional 802.1Q, IPv4/IPv6, TCP/UDP/ICMP headers): nfcapd stores 0.0.0.0
            and ports 0. `bad` adds frames that do not parse (reason "packet section is
            not a parseable frame"; they land as nfcapd stores them).
- "reverse": IPFIX biflows with RFC 5103 reverse elements (enterprise 29305: octets 1,
            packets 2, tcpControlBits 6, flowStart/EndMilliseconds 152/153). nfcapd
            keeps the reverse counters but stores the reverse flags and times as the
            forward ones (it ignores their enterprise number); the lake gets the forward
            values back and the reverse flags on the reverse half. `bad` adds records
            whose reverseOctetDeltaCount is truncated (variable length 0: reason
            "truncated reverse element"; their reverse half lands with bytes 0).
- "physif": IPFIX with interfaces only as ingress/egressPhysicalInterface 252/253 (a
            Cisco layout): nfcapd stores input and output interface 0 (measured; the
            addresses it keeps in this layout).

`build()` returns the datagrams per exporter and the rows the lake must hold.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field

import numpy as np

from . import api, model

FORMS = ("micro", "nat", "icmp", "frame", "reverse", "physif")
EXPORTERS = {"micro": "127.0.0.81", "nat": "127.0.0.82", "icmp": "127.0.0.83", "frame": "127.0.0.84",
             "reverse": "127.0.0.85", "physif": "127.0.0.86"}
NTP_EPOCH = 2208988800  # seconds from 1900-01-01 to 1970-01-01
PEN_REVERSE = 29305
NAT_POOL = int(ipaddress.IPv4Address("198.18.0.0"))
ICMP_KINDS = (8 * 256, 0, 3 * 256 + 3, 11 * 256, 3 * 256 + 1)  # echo, reply, port/host unreachable, TTL


@dataclass
class Export:
    """One form's export: datagrams in sending order, the lake rows it must give, and the
    records flowlake is expected to count (completed by what, undecodable by reason)."""
    form: str
    exporter: str
    datagrams: list[bytes] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    completed: dict[str, int] = field(default_factory=dict)
    undecodable: dict[str, int] = field(default_factory=dict)


def ntp(ms: int) -> int:
    """Epoch ms -> IPFIX dateTimeMicroseconds (NTP 32.32); decodes back to exactly ms."""
    micro = (ms % 1000) * 1000
    return ((ms // 1000 + NTP_EPOCH) << 32) | ((micro << 32) // 1_000_000 + 1)


def _set(set_id: int, body: bytes) -> bytes:
    pad = (-(len(body) + 4)) % 4
    return struct.pack(">HH", set_id, len(body) + 4 + pad) + body + b"\0" * pad


def _template(tid: int, fields) -> bytes:
    """fields: (ie, length) or (ie, length, enterprise number)."""
    out = struct.pack(">HH", tid, len(fields))
    for f in fields:
        out += struct.pack(">HHI", f[0] | 0x8000, f[1], f[2]) if len(f) == 3 else struct.pack(">HH", *f)
    return out


def _addr(fl, which: str) -> str:
    if fl["ipv6"]:
        hi, lo = (int(x) for x in fl[which + "6"])
        return str(ipaddress.IPv6Address((hi << 64) | lo))
    return str(ipaddress.IPv4Address(int(fl[which + "4"])))


def _addr_bytes(fl, which: str) -> bytes:
    return ipaddress.ip_address(_addr(fl, which)).packed


def base_row(exporter: str, fl) -> dict:
    proto, dport = int(fl["proto"]), int(fl["dst_port"])
    icmp = proto in (1, 58)
    return {"exporter": exporter, "time_start": int(fl["t_start"]), "time_end": int(fl["t_end"]),
            "src_addr": _addr(fl, "src"), "dst_addr": _addr(fl, "dst"), "src_port": int(fl["src_port"]),
            "dst_port": dport, "proto": proto, "input_if": int(fl["in_if"]), "output_if": int(fl["out_if"]),
            "packets": int(fl["packets"]), "bytes": int(fl["bytes"]),
            "icmp_type": dport >> 8 if icmp else None, "icmp_code": dport & 0xFF if icmp else None,
            "biflow_half": 0}


class _Ipfix:
    def __init__(self, domain: int):
        self.domain, self.seq = domain, 0

    def message(self, export_ms: int, sets: bytes, records: int) -> bytes:
        hdr = struct.pack(">HHIII", 10, 16 + len(sets), -(-export_ms // 1000), self.seq, self.domain)
        self.seq += records
        return hdr + sets


def _chunks(rows: list, per: int):
    for i in range(0, len(rows), per):
        yield rows[i:i + per]


def _ipfix_export(form: str, tmpl: bytes, recs: list[tuple[int, int, bytes]], per: int) -> list[bytes]:
    """recs: (template id, export ms, record bytes) in order -> messages, templates every 20."""
    ipx = _Ipfix(domain=FORMS.index(form) + 1)
    out = []
    for k, chunk in enumerate(_chunks(recs, per)):
        body = _set(2, tmpl) if k % 20 == 0 else b""
        tid = chunk[0][0]
        same = [c for c in chunk if c[0] == tid]
        rest = [c for c in chunk if c[0] != tid]
        body += _set(tid, b"".join(c[2] for c in same))
        if rest:
            body += _set(rest[0][0], b"".join(c[2] for c in rest))
        out.append(ipx.message(chunk[-1][1], body, len(chunk)))
    return out


def _micro(f, ex: Export) -> None:
    head = [(1, 8), (2, 8), (154, 8), (155, 8)]
    tail = [(10, 4), (14, 4), (7, 2), (11, 2), (4, 1), (6, 1)]
    tmpl = _template(256, head + [(8, 4), (12, 4)] + tail + [(32, 2)]) + \
        _template(257, head + [(27, 16), (28, 16)] + tail + [(139, 2)])
    recs = []
    for fl in f:
        r = struct.pack(">QQQQ", int(fl["bytes"]), int(fl["packets"]), ntp(int(fl["t_start"])), ntp(int(fl["t_end"])))
        r += _addr_bytes(fl, "src") + _addr_bytes(fl, "dst")
        icmp = int(fl["dst_port"]) if int(fl["proto"]) in (1, 58) else 0
        r += struct.pack(">IIHHBBH", int(fl["in_if"]), int(fl["out_if"]), int(fl["src_port"]), int(fl["dst_port"]),
                         int(fl["proto"]), int(fl["tcp_flags"]), icmp)
        recs.append((257 if fl["ipv6"] else 256, int(fl["t_end"]), r))
        ex.rows.append(base_row(ex.exporter, fl))
    ex.completed["times from flowStart/EndMicroseconds 154/155"] = len(f)
    ex.datagrams = _ipfix_export("micro", tmpl, recs, 12)


def _nat(f, ex: Export, bad: bool, rng) -> None:
    f = f[~f["ipv6"]]
    tmpl = _template(256, [(323, 8), (8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (225, 4), (226, 4), (227, 2),
                           (228, 2), (230, 1)])
    recs = []
    for i, fl in enumerate(f):
        t = int(fl["t_start"])
        event = 1 if i % 3 else 2  # NAT44 session create / delete
        empty = bad and i % 25 == 7
        src, dst = (0, 0) if empty else (int(fl["src4"]), int(fl["dst4"]))
        nsrc, nport = NAT_POOL + 1 + int(rng.integers(0, 254)), int(rng.integers(1024, 65536))
        nsrc, nport = (0, 0) if empty else (nsrc, nport)
        r = struct.pack(">QIIHHBIIHHB", t, src, dst, int(fl["src_port"]), int(fl["dst_port"]), int(fl["proto"]),
                        nsrc, dst, nport, int(fl["dst_port"]), event)
        recs.append((256, t, r))
        row = base_row(ex.exporter, fl)
        row.update(time_start=t, time_end=t, packets=0, bytes=0, input_if=0, output_if=0,
                   src_addr_nat=str(ipaddress.IPv4Address(nsrc)), dst_addr_nat=str(ipaddress.IPv4Address(dst)),
                   src_port_nat=nport, dst_port_nat=int(fl["dst_port"]), nat_event=event)
        if empty:
            row.update(src_addr="0.0.0.0", dst_addr="0.0.0.0")
            ex.undecodable["NAT event without addresses"] = ex.undecodable.get("NAT event without addresses", 0) + 1
        ex.rows.append(row)
    ex.completed["time from observationTimeMilliseconds 323"] = len(f)
    ex.datagrams = _ipfix_export("nat", tmpl, recs, 25)


def _cisco_icmp(f, ex: Export, boot_ms: int) -> None:
    """NetFlow v9, IPv4 and IPv6, ICMP type*256+code only in L4_DST_PORT."""
    head = [(1, 8), (2, 8), (22, 4), (21, 4)]
    tail = [(10, 4), (14, 4), (7, 2), (11, 2), (4, 1), (6, 1)]
    tmpl = _set(0, _template(256, head + [(8, 4), (12, 4)] + tail) + _template(257, head + [(27, 16), (28, 16)] + tail))
    out, seq = [], 0
    for k, chunk in enumerate(_chunks(list(f), 12)):
        body = tmpl if k % 20 == 0 else b""
        count = 2 if k % 20 == 0 else 0
        for v6 in (False, True):
            recs = b""
            for fl in chunk:
                if bool(fl["ipv6"]) != v6:
                    continue
                recs += struct.pack(">QQII", int(fl["bytes"]), int(fl["packets"]), int(fl["t_start"]) - boot_ms,
                                    int(fl["t_end"]) - boot_ms)
                recs += _addr_bytes(fl, "src") + _addr_bytes(fl, "dst")
                recs += struct.pack(">IIHHBB", int(fl["in_if"]), int(fl["out_if"]), int(fl["src_port"]),
                                    int(fl["dst_port"]), int(fl["proto"]), int(fl["tcp_flags"]))
                count += 1
            if recs:
                body += _set(257 if v6 else 256, recs)
        export_ms = int(chunk[-1]["t_end"])
        secs = -(-export_ms // 1000)
        out.append(struct.pack(">HHIIII", 9, count, secs * 1000 - boot_ms, secs, seq, FORMS.index("icmp") + 1) + body)
        seq += 1
    ex.datagrams = out
    ex.rows = [base_row(ex.exporter, fl) for fl in f]
    ex.completed["ICMP type/code from the destination port"] = int(np.isin(f["proto"], (1, 58)).sum())


def frame_of(fl) -> bytes:
    """The first bytes of the packet as a router's packet section shows them: Ethernet
    (802.1Q on odd destination ports), IPv4 or IPv6, then the transport header."""
    proto, v6 = int(fl["proto"]), bool(fl["ipv6"])
    eth = bytes.fromhex("02005e000001") + bytes.fromhex("0a0000000001")
    if int(fl["dst_port"]) % 2:
        eth += struct.pack(">HH", 0x8100, 100)
    eth += struct.pack(">H", 0x86DD if v6 else 0x0800)
    if proto in (6, 17):
        l4 = struct.pack(">HH", int(fl["src_port"]), int(fl["dst_port"])) + (
            b"\0" * 16 if proto == 6 else struct.pack(">HH", 8, 0))
    else:
        l4 = struct.pack(">BBH", int(fl["dst_port"]) >> 8, int(fl["dst_port"]) & 0xFF, 0) + b"\0" * 4
    if v6:
        ip = struct.pack(">IHBB", 6 << 28, len(l4), proto, 64) + _addr_bytes(fl, "src") + _addr_bytes(fl, "dst")
    else:
        ip = struct.pack(">BBHHHBBH", 0x45, 0, 20 + len(l4), 0, 0, 64, proto, 0) + _addr_bytes(fl, "src") + \
            _addr_bytes(fl, "dst")
    return eth + ip + l4


def _frame(f, ex: Export, bad: bool) -> None:
    tmpl = _template(256, [(1, 8), (2, 8), (152, 8), (153, 8), (10, 4), (14, 4), (315, 0xFFFF)])
    recs = []
    for i, fl in enumerate(f):
        broken = bad and i % 30 == 11
        frame = frame_of(fl)
        if broken:  # an Ethernet header and an IPv4 header cut after 6 bytes
            frame = frame[:12] + struct.pack(">H", 0x0800) + bytes([0x45, 0, 0, 60, 0, 0])
        r = struct.pack(">QQQQII", int(fl["bytes"]), int(fl["packets"]), int(fl["t_start"]), int(fl["t_end"]),
                        int(fl["in_if"]), int(fl["out_if"])) + bytes([len(frame)]) + frame
        recs.append((256, int(fl["t_end"]), r))
        row = base_row(ex.exporter, fl)
        if broken:
            row.update(src_addr="0.0.0.0", dst_addr="0.0.0.0", src_port=0, dst_port=0, proto=0, icmp_type=None,
                       icmp_code=None)
            ex.undecodable["packet section is not a parseable frame"] = \
                ex.undecodable.get("packet section is not a parseable frame", 0) + 1
        ex.rows.append(row)
    ex.completed["addresses from packet section 315"] = len(f) - sum(ex.undecodable.values())
    ex.datagrams = _ipfix_export("frame", tmpl, recs, 10)


def _reverse(f, ex: Export, bad: bool, rng) -> None:
    """RFC 5103 biflows: forward elements, then reverse ones (enterprise 29305) with the
    same ids: octets 1, packets 2, tcpControlBits 6, flowStart/EndMilliseconds 152/153.
    nfcapd 1.7.1 keeps the reverse counters but ignores the enterprise number of the other
    reverse elements: the forward record gets the reverse flags and times (measured)."""
    f = f[~f["ipv6"]]
    common = [(1, 8), (2, 8), (152, 8), (153, 8), (8, 4), (12, 4), (10, 4), (14, 4), (7, 2), (11, 2), (4, 1), (6, 1)]
    rest = [(2, 8, PEN_REVERSE), (6, 1, PEN_REVERSE), (152, 8, PEN_REVERSE), (153, 8, PEN_REVERSE)]
    tmpl = _template(256, common + [(1, 8, PEN_REVERSE)] + rest) + \
        _template(258, common + [(1, 0xFFFF, PEN_REVERSE)] + rest)
    recs = []
    for i, fl in enumerate(f):
        broken = bad and i % 40 == 13
        bi = i % 3 != 0
        rp = int(rng.integers(1, 50)) if bi else 0
        rb = rp * int(rng.integers(40, 1500)) if bi else 0
        rflags = int(rng.choice([0x12, 0x14, 0x18, 0x11])) if bi else 0
        rstart, rend = (int(fl["t_start"]) + 1, int(fl["t_end"])) if bi else (0, 0)
        r = struct.pack(">QQQQIIIIHHBB", int(fl["bytes"]), int(fl["packets"]), int(fl["t_start"]), int(fl["t_end"]),
                        int(fl["src4"]), int(fl["dst4"]), int(fl["in_if"]), int(fl["out_if"]), int(fl["src_port"]),
                        int(fl["dst_port"]), int(fl["proto"]), int(fl["tcp_flags"]))
        tail = struct.pack(">QBQQ", rp, rflags, rstart, rend)
        row = dict(base_row(ex.exporter, fl), tcp_flags=int(fl["tcp_flags"]))
        if broken:  # reverse bytes cut to nothing: the reverse packets still land (bytes 0)
            recs.append((258, int(fl["t_end"]), r + b"\0" + tail))
            ex.undecodable["truncated reverse element"] = ex.undecodable.get("truncated reverse element", 0) + 1
            rb = 0
        else:
            recs.append((256, int(fl["t_end"]), r + struct.pack(">Q", rb) + tail))
        ex.completed["reverse elements (RFC 5103)"] = ex.completed.get("reverse elements (RFC 5103)", 0) + 1
        if not bi:
            ex.rows.append(row)
            continue
        rev = dict(row, biflow_half=2, packets=rp, bytes=rb, tcp_flags=rflags)
        for a, b in (("src_addr", "dst_addr"), ("src_port", "dst_port"), ("input_if", "output_if")):
            rev[a], rev[b] = row[b], row[a]
        icmp = row["proto"] in (1, 58)
        rev["icmp_type"] = rev["dst_port"] >> 8 if icmp else None
        rev["icmp_code"] = rev["dst_port"] & 0xFF if icmp else None
        ex.rows += [dict(row, biflow_half=1), rev]
    ex.datagrams = _ipfix_export("reverse", tmpl, recs, 10)


def _physif(f, ex: Export) -> None:
    head = [(1, 8), (2, 8), (152, 8), (153, 8)]
    tail = [(252, 4), (253, 4), (7, 2), (11, 2), (4, 1), (6, 1)]
    tmpl = _template(256, head + [(8, 4), (12, 4)] + tail + [(32, 2)]) + \
        _template(257, head + [(27, 16), (28, 16)] + tail + [(139, 2)])
    recs = []
    for fl in f:
        icmp = int(fl["dst_port"]) if int(fl["proto"]) in (1, 58) else 0
        r = struct.pack(">QQQQ", int(fl["bytes"]), int(fl["packets"]), int(fl["t_start"]), int(fl["t_end"]))
        r += _addr_bytes(fl, "src") + _addr_bytes(fl, "dst")
        r += struct.pack(">IIHHBBH", int(fl["in_if"]), int(fl["out_if"]), int(fl["src_port"]), int(fl["dst_port"]),
                         int(fl["proto"]), int(fl["tcp_flags"]), icmp)
        recs.append((257 if fl["ipv6"] else 256, int(fl["t_end"]), r))
        ex.rows.append(base_row(ex.exporter, fl))
    ex.completed["interfaces from physical interfaces 252/253"] = len(f)
    ex.datagrams = _ipfix_export("physif", tmpl, recs, 12)


def build(start_ms: int, duration_ms: int, n: int, seed: int = 32, bad: bool = True,
          forms: tuple[str, ...] = FORMS) -> dict[str, Export]:
    """n model flows per form, exported in that form; bad adds the malformed records."""
    params = api.params_for("ipfix")
    rng = np.random.default_rng(seed + 315)
    out = {}
    for k, form in enumerate(forms):
        f, _ = model.generate(params, start_ms, duration_ms, n, seed=seed + k, allow_v6=True)
        f = np.sort(f, order="t_end")
        icmp = np.isin(f["proto"], (1, 58))
        kinds = rng.choice(np.array(ICMP_KINDS), int(icmp.sum()))
        f["dst_port"][icmp] = np.where(f["proto"][icmp] == 58, (kinds >> 8) + 128 << 8 | (kinds & 0xFF), kinds)
        ex = Export(form, EXPORTERS[form])
        if form == "micro":
            _micro(f, ex)
        elif form == "nat":
            _nat(f, ex, bad, rng)
        elif form == "icmp":
            _cisco_icmp(f, ex, start_ms - 3_600_000)
        elif form == "frame":
            _frame(f, ex, bad)
        elif form == "reverse":
            _reverse(f, ex, bad, rng)
        elif form == "physif":
            _physif(f, ex)
        out[form] = ex
    return out
