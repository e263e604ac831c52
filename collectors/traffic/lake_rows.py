"""The traffic model's flows as the lake would hold them (columns of schemas.FLOWS_TABLE),
without the network in between: the fast path for building long histories (a year of
rollups) whose truth is the model itself.

Sampled routers: the lake's packets and bytes are sampling-corrected (wire counts x rate),
as the lake's contract says; sampling_rate carries the rate.
"""
from __future__ import annotations

import ipaddress

import numpy as np


def _v4_text(v: np.ndarray) -> np.ndarray:
    uniq, inv = np.unique(v, return_inverse=True)
    txt = np.array([str(ipaddress.IPv4Address(int(u))) for u in uniq.tolist()], dtype=object)
    return txt[inv]


def _v6_text(pairs: np.ndarray) -> np.ndarray:
    uniq, inv = np.unique(pairs, axis=0, return_inverse=True)
    txt = np.array([str(ipaddress.IPv6Address((int(h) << 64) | int(lo))) for h, lo in uniq.tolist()], dtype=object)
    return txt[inv.reshape(-1)]


def addresses(f: np.ndarray, side: str) -> np.ndarray:
    out = np.empty(len(f), dtype=object)
    v6 = f["ipv6"]
    if (~v6).any():
        out[~v6] = _v4_text(f[f"{side}4"][~v6])
    if v6.any():
        out[v6] = _v6_text(f[f"{side}6"][v6])
    return out


def lake_table(f: np.ndarray, params, source_file: str = "model", version: int = 10, record3=None):
    """pyarrow Table of the flows with the lake's columns (and `date`, `hour` of time_start);
    VLANs as nfcapd keeps them from NetFlow `version` (model.landed_vlans).

    record3: the flows' revision-3 values (record3.draw, aligned with f) to fill flow record
    revision 3's columns as the pipeline lands them (routers with `record3` set; the others
    give what nfcapd stores without those elements), a biflow as two rows; None leaves the
    columns out (a lake from before revision 3)."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    from .model import landed_vlans  # noqa: PLC0415  (start-up: scipy)

    src_vlan, dst_vlan = landed_vlans(f, params, version)

    rates = np.array([r.sampling_rate for r in params.routers], np.int64)[f["router"]]
    exporters = np.array([r.address for r in params.routers], dtype=object)[f["router"]]
    ts = f["t_start"].astype(np.int64)
    day = (ts // 86_400_000).astype("datetime64[D]")
    cols = {
        "time_start": pa.array(ts, pa.timestamp("ms", tz="UTC")),
        "time_end": pa.array(f["t_end"].astype(np.int64), pa.timestamp("ms", tz="UTC")),
        "exporter": pa.array(exporters, pa.string()),
        "input_if": pa.array(f["in_if"].astype(np.int64)),
        "output_if": pa.array(f["out_if"].astype(np.int64)),
        "src_addr": pa.array(addresses(f, "src"), pa.string()),
        "dst_addr": pa.array(addresses(f, "dst"), pa.string()),
        "src_port": pa.array(f["src_port"].astype(np.int32)),
        "dst_port": pa.array(f["dst_port"].astype(np.int32)),
        "proto": pa.array(f["proto"].astype(np.int32)),
        "tcp_flags": pa.array(f["tcp_flags"].astype(np.int32)),
        "tos": pa.array(f["tos"].astype(np.int32)),
        "packets": pa.array(f["packets"].astype(np.int64) * rates),
        "bytes": pa.array(f["bytes"].astype(np.int64) * rates),
        "sampling_rate": pa.array(rates.astype(np.int32)),
        "src_as": pa.array(f["src_as"].astype(np.int64)),
        "dst_as": pa.array(f["dst_as"].astype(np.int64)),
        "source_file": pa.array(np.full(len(f), source_file, dtype=object), pa.string()),
        "file_seq": pa.array(np.arange(len(f), dtype=np.int64)),
        "src_vlan": pa.array(src_vlan.astype(np.int32)),
        "dst_vlan": pa.array(dst_vlan.astype(np.int32)),
        "date": pa.array(np.datetime_as_string(day), pa.string()),
        "hour": pa.array(((ts // 3_600_000) % 24).astype(np.int32)),
    }
    if record3 is None:
        return pa.table(cols)
    return _with_record3(pa.table(cols), f, params, version, record3, rates)


_SWAP = (("src_addr", "dst_addr"), ("src_port", "dst_port"), ("input_if", "output_if"), ("src_mac", "dst_mac"),
         ("src_mask", "dst_mask"), ("src_as", "dst_as"), ("src_vlan", "dst_vlan"))


def _mac_text(v: np.ndarray) -> np.ndarray:
    uniq, inv = np.unique(v, return_inverse=True)
    txt = np.array([":".join(f"{(int(u) >> (8 * i)) & 0xFF:02x}" for i in range(5, -1, -1)) if u else None
                    for u in uniq.tolist()], dtype=object)
    return txt[inv]


def _with_record3(table, f: np.ndarray, params, version: int, x: np.ndarray, rates: np.ndarray):
    """The table with revision 3's columns (as record3.lake_rows has them, vectorised) and
    the reverse halves of the biflows appended (file_seq -(seq + 1), counters x rate)."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    from .record3 import NFCAPD_DROPS  # noqa: PLC0415  (start-up: scipy)

    n = len(f)
    on = np.array([bool(r.record3) for r in params.routers])[f["router"]] & (version != 5)
    v6 = f["ipv6"]
    icmp = (f["proto"] == 1) | (f["proto"] == 58)

    def ints(v, kind=np.int32, mask=None):
        return pa.array(np.asarray(v).astype(kind), mask=mask)

    def texts(values, mask):
        return pa.array(np.where(mask, None, values), pa.string())

    nh, bgp = np.empty(n, dtype=object), np.empty(n, dtype=object)
    if (~v6).any():
        nh[~v6], bgp[~v6] = _v4_text(x["nh4"][~v6]), _v4_text(x["bgp4"][~v6])
    if v6.any():
        nh[v6], bgp[v6] = _v6_text(x["nh6"][v6]), _v6_text(x["bgp6"][v6])
    src_mac = np.where(x["in_src_mac"] != 0, x["in_src_mac"], x["out_src_mac"])
    dst_mac = np.where(x["in_dst_mac"] != 0, x["in_dst_mac"], x["out_dst_mac"])
    raw = x["mpls"]
    depth = np.zeros(n, np.int32)  # labels up to the bottom of stack or an empty slot
    going = np.ones(n, bool)
    for k in range(raw.shape[1]):
        going &= raw[:, k] != 0
        depth += going
        going &= (raw[:, k] & 1) == 0
    depth = np.where(on, depth, 0)
    labels = (raw >> 4).astype(np.int32)[np.arange(raw.shape[1]) < depth[:, None]]
    offsets = np.concatenate([[0], np.cumsum(depth)]).astype(np.int32)
    mpls = pa.ListArray.from_arrays(pa.array(offsets), pa.array(labels, pa.int32()), mask=pa.array(depth == 0))
    fwd_null = ~on | (x["fwd"] == 0) | ("forwarding_status" in NFCAPD_DROPS.get(version, set()))
    nat_null = ~on | v6
    biflow = on & ((x["out_packets"] > 0) | (x["out_bytes"] > 0))
    dport = f["dst_port"].astype(np.int32)
    add = {
        # without the elements nfcapd still stores the interfaces' element (v9/IPFIX): direction and masks 0
        "flow_direction": ints(np.where(on, x["dir"], 0)),
        "next_hop": texts(nh, ~on), "bgp_next_hop": texts(bgp, ~on),
        "src_mask": ints(np.where(on, x["src_mask"], 0)), "dst_mask": ints(np.where(on, x["dst_mask"], 0)),
        "src_mac": texts(_mac_text(src_mac), ~on), "dst_mac": texts(_mac_text(dst_mac), ~on),
        "mpls_labels": mpls,
        "ingress_vrf": ints(x["in_vrf"], np.int64, ~on), "egress_vrf": ints(x["eg_vrf"], np.int64, ~on),
        "forwarding_status": ints(x["fwd"], mask=fwd_null),
        "icmp_type": ints(dport >> 8, mask=~icmp), "icmp_code": ints(dport & 0xFF, mask=~icmp),
        "src_addr_nat": texts(_v4_text(x["nat_src"]), nat_null),
        "dst_addr_nat": texts(_v4_text(x["nat_dst"]), nat_null),
        "src_port_nat": ints(x["nat_sport"], mask=nat_null), "dst_port_nat": ints(x["nat_dport"], mask=nat_null),
        "nat_event": ints(x["nat_event"], mask=nat_null),
        "biflow_half": ints(np.where(biflow, 1, 0)),
    }
    if version == 5:  # v5 carries none of them, but its masks (0 in the model)
        for k in add:
            if k not in ("src_mask", "dst_mask", "flow_direction", "icmp_type", "icmp_code", "biflow_half"):
                add[k] = pa.nulls(n, add[k].type)
    names = table.column_names[:-2]  # before date, hour
    table = pa.table({**{c: table.column(c) for c in names}, **add,
                      "date": table.column("date"), "hour": table.column("hour")})
    idx = np.flatnonzero(biflow)
    rev = table.take(pa.array(idx))
    for a, b in _SWAP:
        ca, cb = rev.column(a), rev.column(b)
        rev = rev.set_column(rev.schema.get_field_index(a), a, cb).set_column(rev.schema.get_field_index(b), b, ca)
    sets = {"packets": pa.array(x["out_packets"][idx].astype(np.int64) * rates[idx]),
            "bytes": pa.array(x["out_bytes"][idx].astype(np.int64) * rates[idx]),
            "file_seq": pa.array(-(idx.astype(np.int64) + 1)), "biflow_half": ints(np.full(len(idx), 2)),
            "icmp_type": ints(rev.column("dst_port").to_numpy() >> 8, mask=~icmp[idx]),
            "icmp_code": ints(rev.column("dst_port").to_numpy() & 0xFF, mask=~icmp[idx])}
    for c, v in sets.items():
        rev = rev.set_column(rev.schema.get_field_index(c), c, v)
    return pa.concat_tables([table, rev])


def growing_days(params, first_day_ms: int, days: int, flows_per_day: int, growth: float, seed: int = 1):
    """(day index, flows) for `days` consecutive days whose volume grows linearly by
    `growth` (0.5 = +50 %) from the first to the last: one modelled day, generated once,
    is subsampled (a seeded random subset per day) and shifted, so a year costs seconds
    and every day's flows are exact, known records."""
    from .model import generate  # noqa: PLC0415  (start-up: scipy)

    most = int(flows_per_day * (1 + growth))
    base, _ = generate(params, first_day_ms, 86_400_000, most, seed=seed, allow_v6=params.ipv6_fraction > 0)
    rng = np.random.default_rng(seed)
    for d in range(days):
        n = int(flows_per_day * (1 + growth * d / max(1, days - 1)))
        day = base[np.sort(rng.permutation(most)[:n])].copy()
        day["t_start"] += d * 86_400_000
        day["t_end"] += d * 86_400_000
        yield d, day
