"""PingER metrics from one ping run: RTT min/avg/max, loss, duplicates, reorders,
IPDV and jitter (inter-quartile range of IPDV).

Definitions (stated so tests can check them by hand):
- loss = (sent - distinct sequence numbers answered) / sent.
- duplicates = replies whose sequence number was already answered.
- reorders = first replies that arrive after a reply with a higher sequence number.
- IPDV = RTT(k+1) - RTT(k) over consecutive *answered* sequence numbers in sequence
  order (first reply of each; a lost packet is skipped, as PingER does).
- jitter = IQR of IPDV = P75 - P25 with linear interpolation (numpy's default);
  needs at least two IPDV values, otherwise it is left out.
"""
from __future__ import annotations

import math
from typing import Iterable


def _percentile(sorted_vals: list[float], q: float) -> float:
    # Linear interpolation between closest ranks, identical to numpy.percentile's default.
    pos = (len(sorted_vals) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def metrics(replies: Iterable[tuple[int, float]], sent: int) -> dict[str, float]:
    """replies: (sequence number, RTT ms) in arrival order; sent: echo requests sent."""
    if sent <= 0:
        raise ValueError("sent must be positive")
    first: dict[int, float] = {}
    dups = reorders = 0
    highest = None
    for seq, rtt in replies:
        if seq in first:
            dups += 1
            continue
        if highest is not None and seq < highest:
            reorders += 1
        highest = seq if highest is None else max(highest, seq)
        first[seq] = float(rtt)
    received = len(first)
    out = {
        "sent": float(sent),
        "received": float(received),
        "loss": max(0.0, (sent - received) / sent),
        "duplicates": float(dups),
        "reorders": float(reorders),
    }
    if not received:
        return out
    in_order = [first[s] for s in sorted(first)]
    rtts = sorted(in_order)
    out.update(
        rtt_min_ms=rtts[0],
        rtt_avg_ms=sum(rtts) / received,
        rtt_max_ms=rtts[-1],
        rtt_median_ms=_percentile(rtts, 0.5),
    )
    ipdv = [b - a for a, b in zip(in_order, in_order[1:])]
    if ipdv:
        out["ipdv_mean_abs_ms"] = sum(abs(x) for x in ipdv) / len(ipdv)
    if len(ipdv) >= 2:
        s = sorted(ipdv)
        out["ipdv_p25_ms"] = _percentile(s, 0.25)
        out["ipdv_p75_ms"] = _percentile(s, 0.75)
        out["jitter_ms"] = out["ipdv_p75_ms"] - out["ipdv_p25_ms"]
    return out
