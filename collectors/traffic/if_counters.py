"""The interface counters of the modelled routers (pure: numpy in, arrays out).

What each router's SNMP agent would count on its interfaces while it forwards the model's
flows: IF-MIB ifHCIn/OutOctets and ifHCIn/OutUcastPkts, and ifInDiscards, as cumulative
values at every poll time of a grid. The demo serves them from a real snmpd per router
(flowlake/demo_snmp.py) and polls them with flowlake's own poller.

- Every packet is counted, also on a sampled router (a record of a 1:N router stands for
  N times its packets and bytes, as the lake's scaled counts do).
- Octets are frames: a flow's IP bytes plus FRAMING per packet (RFC 2863 counts "framing
  characters"; Ethernet's header and FCS). The flow coverage of an interface is therefore
  bytes / (bytes + 18 x packets), a little below 1, as on a real router.
- A flow enters on its input interface and leaves on its output interface; the reverse
  half of a biflow (flow record revision 3) the other way round. A flow the router dropped
  or consumed (forwardingStatus 128-255; a biflow's status is both halves') is counted
  coming in (dropped: in ifInDiscards as well) and never goes out (job interface_capacity
  leaves it out of the out side's coverage).
- A flow's bytes are spread evenly over [t_start, t_end] (a counter moves while the flow
  lasts), so a long transfer raises several polls' deltas.
"""
from __future__ import annotations

import numpy as np

FRAMING = 18  # Ethernet header (14) + FCS (4) per packet
COUNTERS = ("in_octets", "out_octets", "in_ucast_pkts", "out_ucast_pkts", "in_discards")


def grid(start_ms: int, end_ms: int, step_ms: int) -> np.ndarray:
    """Poll times start, start+step, ... up to the first at or after end."""
    n = max(1, -(-(end_ms - start_ms) // step_ms))
    return start_ms + step_ms * np.arange(n + 1, dtype=np.int64)


def cumulative(t: np.ndarray, s: np.ndarray, e: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum over flows of w * (share of [s, e] before each t[k]): w spread evenly over the flow
    (all of it at s when e <= s). Exact: whole flows by a cumulative sum, the grid points
    inside a flow (long flows only) one by one."""
    s = s.astype(np.int64)
    e = np.maximum(e.astype(np.int64), s)
    w = w.astype(np.float64)
    full = np.searchsorted(t, e, side="left")    # first t[k] >= e: the whole flow counted from there
    first = np.searchsorted(t, s, side="right")  # first t[k] > s
    add = np.zeros(len(t) + 1)
    np.add.at(add, full, w)
    out = np.cumsum(add)[:len(t)]
    inside = full - first                        # grid points strictly inside (s, e)
    sel = np.nonzero(inside > 0)[0]
    if len(sel):
        cnt = inside[sel]
        idx = np.repeat(sel, cnt)
        k = first[idx] + (np.arange(len(idx)) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        np.add.at(out, k, w[idx] * (t[k] - s[idx]) / (e[idx] - s[idx]))
    return out


def series(f: np.ndarray, params, start_ms: int, end_ms: int, step_ms: int = 300_000,
           rev3: np.ndarray | None = None) -> dict:
    """{"start_ms", "step_ms", "times_ms": [...], "routers": {address: {"name", "interfaces":
    {if_index: {counter: [cumulative integer per poll time]}}}}} for the model's flows f
    (model.FLOW_DTYPE) and, when the routers export revision 3, their drawn values rev3
    (record3.X_DTYPE, aligned with f: reverse halves and forwarding status)."""
    last = int(f["t_end"].max()) + 1 if len(f) else end_ms
    t = grid(start_ms, max(end_ms, last), step_ms)
    out = {"start_ms": int(t[0]), "step_ms": int(step_ms), "times_ms": t.tolist(), "routers": {}}
    for i, r in enumerate(params.routers):
        sel = f["router"] == i
        sub = f[sel]
        x = rev3[sel] if rev3 is not None and r.record3 else None
        rate = float(max(1, r.sampling_rate))
        pk = sub["packets"].astype(np.float64) * rate
        octets = sub["bytes"].astype(np.float64) * rate + FRAMING * pk
        fwd = x["fwd"] if x is not None else np.full(len(sub), 64, np.uint8)
        leaves = fwd < 128
        dropped = (fwd >= 128) & (fwd < 192)
        rpk = x["out_packets"].astype(np.float64) * rate if x is not None else np.zeros(len(sub))
        roct = x["out_bytes"].astype(np.float64) * rate + FRAMING * rpk if x is not None else np.zeros(len(sub))
        ifs = {}
        for idx in (r.uplink_if, *r.lan_ifs):
            fin, fout = sub["in_if"] == idx, sub["out_if"] == idx

            def side(forward, reverse, fw, rw, sub=sub):
                mask = forward | reverse
                w = np.where(forward, fw, 0.0) + np.where(reverse, rw, 0.0)
                return cumulative(t, sub["t_start"][mask], sub["t_end"][mask], w[mask])

            # a biflow's status is both halves' (the lake gives the reverse row the record's)
            c = {"in_octets": side(fin, fout, octets, roct),
                 "out_octets": side(fout & leaves, fin & leaves, octets, roct),
                 "in_ucast_pkts": side(fin, fout, pk, rpk),
                 "out_ucast_pkts": side(fout & leaves, fin & leaves, pk, rpk),
                 "in_discards": side(fin & dropped, fout & dropped, pk, rpk)}
            # counters are integers; rounding a non-decreasing sum keeps it non-decreasing
            ifs[int(idx)] = {k: np.rint(v).astype(np.int64).tolist() for k, v in c.items()}
        out["routers"][r.address] = {"name": r.name, "interfaces": ifs}
    return out
