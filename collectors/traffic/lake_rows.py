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


def lake_table(f: np.ndarray, params, source_file: str = "model", version: int = 10):
    """pyarrow Table of the flows with the lake's columns (and `date`, `hour` of time_start);
    VLANs as nfcapd keeps them from NetFlow `version` (model.landed_vlans)."""
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
    return pa.table(cols)


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
