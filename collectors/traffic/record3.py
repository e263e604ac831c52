"""Flow record revision 3 in the traffic model (issue 32): what a router exports beyond the
first 21 fields, drawn per flow, and what the lake must hold after nfcapd 1.7.1.

A router with `Router.record3 = True` exports, in v9 and IPFIX alike (the same element ids):
next hop 15/62, BGP next hop 18/63, flowDirection 61, prefix lengths 9/13 (IPv6 29/30),
forwardingStatus 89 (mostly forwarded, some drops and consumed), MACs 56/80/81/57, an MPLS
stack in 70-72 (none, or 1-3 labels, bottom-of-stack bit on the last), VRFs 234/235, NAT
225-228 + natEvent 230 (IPv4; a NAT'd share of the outbound flows, zeros otherwise) and
out counters 23/24 (OUT_BYTES/OUT_PKTS: a share of the TCP flows are biflows, RFC 5103
style, as softflowd -b exports them; zero for one-way flows).

What nfcapd 1.7.1 keeps of it (measured, pinned by tests/collectors/test_record3.py):
everything except forwardingStatus from IPFIX (it stores 0: the lake reads null) and
NAT addresses of IPv6 (281/282, not exported here). `lake_rows()` is the truth: one
row per flow, and a second one (biflow_half 2) for every biflow.
"""
from __future__ import annotations

import ipaddress

import numpy as np

from .model import landed_vlans

# (ie, length) after the base record, IPv4 and IPv6 templates
V4_FIELDS = ((15, 4), (18, 4), (61, 1), (9, 1), (13, 1), (89, 1), (56, 6), (80, 6), (81, 6), (57, 6),
             (70, 3), (71, 3), (72, 3), (234, 4), (235, 4), (225, 4), (226, 4), (227, 2), (228, 2),
             (230, 1), (23, 8), (24, 8))
V6_FIELDS = ((62, 16), (63, 16), (61, 1), (29, 1), (30, 1), (89, 1), (56, 6), (80, 6), (81, 6), (57, 6),
             (70, 3), (71, 3), (72, 3), (234, 4), (235, 4), (23, 8), (24, 8))

# per flow, as drawn (aligned with the model's flows)
X_DTYPE = np.dtype([
    ("dir", "u1"), ("src_mask", "u1"), ("dst_mask", "u1"), ("fwd", "u1"),
    ("nh4", "u4"), ("bgp4", "u4"), ("nh6", "u8", (2,)), ("bgp6", "u8", (2,)),
    ("in_src_mac", "u8"), ("in_dst_mac", "u8"), ("out_src_mac", "u8"), ("out_dst_mac", "u8"),
    ("mpls", "u4", (3,)),  # raw 3-byte stack entries: label << 4 | exp << 1 | bottom of stack
    ("in_vrf", "u4"), ("eg_vrf", "u4"),
    ("nat_src", "u4"), ("nat_dst", "u4"), ("nat_sport", "u2"), ("nat_dport", "u2"), ("nat_event", "u1"),
    ("out_packets", "u8"), ("out_bytes", "u8"),
])

NAT_POOL = int(ipaddress.IPv4Address("198.18.0.0"))
# forwardingStatus values (RFC 7270: 64-127 forwarded, 128-191 dropped, 192-255 consumed)
FWD = np.array([64, 66, 128, 130, 131, 192], np.uint8)
FWD_P = np.array([0.85, 0.05, 0.03, 0.03, 0.02, 0.02])
# What nfcapd 1.7.1 drops, by NetFlow version (measured): IPFIX forwardingStatus 89.
NFCAPD_DROPS = {10: {"forwarding_status"}, 9: set()}


def draw(f: np.ndarray, seed: int) -> np.ndarray:
    """The revision-3 values of every flow (deterministic in seed)."""
    rng = np.random.default_rng(seed + 32)
    n = len(f)
    x = np.zeros(n, X_DTYPE)
    x["dir"] = rng.random(n) < 0.2
    v6 = f["ipv6"]
    x["src_mask"] = np.where(v6, rng.integers(32, 65, n), rng.integers(8, 33, n))
    x["dst_mask"] = np.where(v6, rng.integers(32, 65, n), rng.integers(8, 33, n))
    x["fwd"] = rng.choice(FWD, n, p=FWD_P)
    x["nh4"] = int(ipaddress.IPv4Address("10.255.0.0")) + f["router"].astype(np.uint32) * 256 + f["out_if"] % 256
    x["bgp4"] = int(ipaddress.IPv4Address("192.0.2.0")) + rng.integers(1, 9, n).astype(np.uint32)
    x["nh6"][:, 0] = np.uint64(0x20010DB8FFFF0000) + f["router"].astype(np.uint64)
    x["nh6"][:, 1] = f["out_if"]
    x["bgp6"][:, 0] = np.uint64(0x20010DB8EEEE0000)
    x["bgp6"][:, 1] = rng.integers(1, 9, n)
    router_mac = np.uint64(0x02_00_5E_00_00_00) + (f["router"].astype(np.uint64) << np.uint64(8))
    host_mac = np.uint64(0x0A_00_00_00_00_00) + rng.integers(1, 1 << 20, n).astype(np.uint64)
    x["in_src_mac"], x["in_dst_mac"] = host_mac, router_mac + f["in_if"]
    x["out_src_mac"], x["out_dst_mac"] = router_mac + f["out_if"], host_mac ^ np.uint64(0xFF)
    depth = rng.choice(4, n, p=[0.6, 0.2, 0.1, 0.1])
    labels = rng.integers(16, 1 << 20, (n, 3)).astype(np.uint32)
    exp = rng.integers(0, 8, (n, 3)).astype(np.uint32)
    for k in range(3):
        raw = (labels[:, k] << 4) | (exp[:, k] << 1) | (depth == k + 1)
        x["mpls"][:, k] = np.where(depth > k, raw, 0)
    x["in_vrf"] = rng.choice(np.array([0, 10, 20], np.uint32), n)
    x["eg_vrf"] = rng.choice(np.array([0, 10, 30], np.uint32), n)
    nat = ~v6 & ~f["inbound"] & (rng.random(n) < 0.3)
    x["nat_src"] = np.where(nat, NAT_POOL + rng.integers(1, 255, n), 0)
    x["nat_dst"] = np.where(nat, f["dst4"], 0)
    x["nat_sport"] = np.where(nat, rng.integers(1024, 65536, n), 0)
    x["nat_dport"] = np.where(nat, f["dst_port"], 0)
    x["nat_event"] = np.where(nat, 1, 0)
    bi = (f["proto"] == 6) & (rng.random(n) < 0.15)
    out_p = np.maximum(1, (f["packets"].astype(np.float64) * rng.uniform(0.5, 1.5, n)).astype(np.uint64))
    x["out_packets"] = np.where(bi, out_p, 0)
    x["out_bytes"] = np.where(bi, out_p * rng.integers(40, 1500, n).astype(np.uint64), 0)
    return x


def wire_values(x: np.ndarray, v6: bool) -> np.ndarray:
    """The extra fields of a record (V4_FIELDS or V6_FIELDS), big-endian, packed."""
    fields = V6_FIELDS if v6 else V4_FIELDS
    dt = np.dtype([(f"ie{ie}", f"V{n}") if n in (3, 6, 16) else (f"ie{ie}", {1: "u1", 2: ">u2", 4: ">u4", 8: ">u8"}[n])
                   for ie, n in fields])
    out = np.zeros(len(x), dt)

    def be(v, n):  # unsigned ints -> n big-endian bytes each
        v = np.asarray(v, np.uint64)
        b = v.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 8 - n:]
        return np.ascontiguousarray(b).view(f"V{n}").reshape(-1)

    def be128(pairs):
        b = np.ascontiguousarray(pairs.astype(">u8")).view(np.uint8).reshape(-1, 16)
        return np.ascontiguousarray(b).view("V16").reshape(-1)

    vals = {61: x["dir"], 89: x["fwd"], 56: be(x["in_src_mac"], 6), 80: be(x["in_dst_mac"], 6),
            81: be(x["out_src_mac"], 6), 57: be(x["out_dst_mac"], 6),
            70: be(x["mpls"][:, 0], 3), 71: be(x["mpls"][:, 1], 3), 72: be(x["mpls"][:, 2], 3),
            234: x["in_vrf"], 235: x["eg_vrf"], 23: x["out_bytes"], 24: x["out_packets"]}
    if v6:
        vals.update({62: be128(x["nh6"]), 63: be128(x["bgp6"]), 29: x["src_mask"], 30: x["dst_mask"]})
    else:
        vals.update({15: x["nh4"], 18: x["bgp4"], 9: x["src_mask"], 13: x["dst_mask"], 225: x["nat_src"],
                     226: x["nat_dst"], 227: x["nat_sport"], 228: x["nat_dport"], 230: x["nat_event"]})
    for ie, _ in fields:
        out[f"ie{ie}"] = vals[ie]
    return out


def _mac(v: int) -> str | None:
    return ":".join(f"{(v >> (8 * i)) & 0xFF:02x}" for i in range(5, -1, -1)) if v else None


def _v6(pair) -> str:
    return str(ipaddress.IPv6Address((int(pair[0]) << 64) | int(pair[1])))


def lake_rows(f: np.ndarray, x: np.ndarray, params, version: int) -> list[dict]:
    """The rows the lake must hold for these flows (exported by record3 routers, unsampled),
    with the revision-3 columns and the keys to match them by: exporter, times, addresses,
    ports, proto, interfaces, packets, bytes. A biflow gives two rows (biflow_half 1, 2)."""
    drops = NFCAPD_DROPS[version]
    src_vlan, dst_vlan = landed_vlans(f, params, version)
    rows = []
    for i in range(len(f)):
        fl, e = f[i], x[i]
        v6 = bool(fl["ipv6"])
        if v6:
            src, dst = _v6(fl["src6"]), _v6(fl["dst6"])
        else:
            src, dst = str(ipaddress.IPv4Address(int(fl["src4"]))), str(ipaddress.IPv4Address(int(fl["dst4"])))
        proto, dport = int(fl["proto"]), int(fl["dst_port"])
        icmp = proto in (1, 58)
        labels = []
        for raw in e["mpls"].tolist():
            if raw == 0:
                break
            labels.append(raw >> 4)
            if raw & 1:
                break
        in_src, in_dst = int(e["in_src_mac"]), int(e["in_dst_mac"])
        src_mac = in_src or int(e["out_src_mac"])
        dst_mac = in_dst or int(e["out_dst_mac"])
        fwd = None if "forwarding_status" in drops or int(e["fwd"]) == 0 else int(e["fwd"])
        row = {
            "exporter": params.routers[int(fl["router"])].address, "time_start": int(fl["t_start"]),
            "time_end": int(fl["t_end"]), "src_addr": src, "dst_addr": dst,
            "src_port": int(fl["src_port"]), "dst_port": dport, "proto": proto,
            "input_if": int(fl["in_if"]), "output_if": int(fl["out_if"]),
            "packets": int(fl["packets"]), "bytes": int(fl["bytes"]),
            "src_as": int(fl["src_as"]), "dst_as": int(fl["dst_as"]),
            "src_vlan": int(src_vlan[i]), "dst_vlan": int(dst_vlan[i]),
            "flow_direction": int(e["dir"]),
            "next_hop": _v6(e["nh6"]) if v6 else str(ipaddress.IPv4Address(int(e["nh4"]))),
            "bgp_next_hop": _v6(e["bgp6"]) if v6 else str(ipaddress.IPv4Address(int(e["bgp4"]))),
            "src_mask": int(e["src_mask"]), "dst_mask": int(e["dst_mask"]),
            "src_mac": _mac(src_mac), "dst_mac": _mac(dst_mac), "mpls_labels": labels or None,
            "ingress_vrf": int(e["in_vrf"]), "egress_vrf": int(e["eg_vrf"]), "forwarding_status": fwd,
            "icmp_type": dport >> 8 if icmp else None, "icmp_code": dport & 0xFF if icmp else None,
            "src_addr_nat": None if v6 else str(ipaddress.IPv4Address(int(e["nat_src"]))),
            "dst_addr_nat": None if v6 else str(ipaddress.IPv4Address(int(e["nat_dst"]))),
            "src_port_nat": None if v6 else int(e["nat_sport"]), "dst_port_nat": None if v6 else int(e["nat_dport"]),
            "nat_event": None if v6 else int(e["nat_event"]), "biflow_half": 0,
        }
        if int(e["out_packets"]) or int(e["out_bytes"]):
            row["biflow_half"] = 1
            rev = dict(row, biflow_half=2, packets=int(e["out_packets"]), bytes=int(e["out_bytes"]))
            for a, b in (("src_addr", "dst_addr"), ("src_port", "dst_port"), ("input_if", "output_if"),
                         ("src_mac", "dst_mac"), ("src_mask", "dst_mask"), ("src_as", "dst_as"),
                         ("src_vlan", "dst_vlan")):
                rev[a], rev[b] = row[b], row[a]
            icmp_port = rev["dst_port"]
            rev["icmp_type"] = icmp_port >> 8 if icmp else None
            rev["icmp_code"] = icmp_port & 0xFF if icmp else None
            rows.append(row)
            rows.append(rev)
        else:
            rows.append(row)
    return rows
