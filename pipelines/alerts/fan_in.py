"""Fan-in floods: many sources to one destination, its packets/s and bytes/s far above
its own baseline.

A destination is flagged in an interval when (1) the daily `fan_in` job's rule holds on
the interval (jobs/security_rules.FanInRule: at least [security] fan_in_min_sources
distinct sources and a robust z-score >= fan_in_min_z against every destination's count),
(2) its packet rate reaches [alerts] fan_in_min_pps, and (3) its packet rate, byte rate
and distinct sources all reach [alerts] fan_in_factor times its baseline. The baseline is an exponentially
weighted mean of the destination's rates with a time constant of [alerts] baseline_minutes
(an absence counts as zero); a flood does not teach it (not updated while flagged). A
popular server thus stays quiet, a host that suddenly draws a crowd does not.
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flowlake.pipelines.security_rules import FanInRule, robust_scale

from .base import Detector, Finding, Interval, severity, si


def distinct_sources(f: pa.Table, dsts: pa.Array) -> np.ndarray:
    """Distinct src_addr of each of dsts in the flows f (count_distinct of a group-by, without
    its per-group hash sets): both addresses as dictionary codes, the distinct pairs of codes."""
    d = f["dst_addr"].combine_chunks().dictionary_encode()
    s = f["src_addr"].combine_chunks().dictionary_encode()
    n_src = max(len(s.dictionary), 1)
    pairs = pc.unique(pa.array(d.indices.to_numpy().astype(np.int64) * n_src + s.indices.to_numpy())).to_numpy()
    per_code = np.bincount(pairs // n_src, minlength=len(d.dictionary))
    return per_code[pc.index_in(dsts, value_set=d.dictionary).to_numpy()]


class FanInDetector(Detector):
    name = "fan_in"

    def __init__(self, rule: FanInRule, factor: float, min_pps: float, baseline_minutes: float,
                 warmup_minutes: float, max_tracked: int, critical_factor: float = 4.0, sample: int = 10):
        self.rule, self.factor, self.min_pps = rule, factor, min_pps
        self.tau_ms = baseline_minutes * 60_000
        self.warmup_ms = warmup_minutes * 60_000
        self.max_tracked, self.critical_factor, self.sample = max_tracked, critical_factor, sample
        self.base: dict[str, list] = {}  # dst -> [pps, bps, at_ms]
        self.learning_since: int | None = None

    @classmethod
    def from_config(cls, cfg) -> "FanInDetector":
        a = cfg.alerts
        return cls(FanInRule.from_config(cfg), float(a.fan_in_factor), float(a.fan_in_min_pps),
                   float(a.baseline_minutes), float(a.warmup_minutes), int(a.max_tracked),
                   float(a.critical_factor), int(cfg.security.sample_size))

    def _baseline(self, dst: str, now_ms: int) -> tuple[float, float, float]:
        """(pps, bps, sources) the destination usually has, as of now_ms: the EWMA (silence
        since it was last seen counts as zero traffic), divided by the weight its history
        has (1 - exp(-age/tau)), so a destination seen for minutes is not taken as near zero."""
        b = self.base.get(dst)
        if b is None:
            return 0.0, 0.0, 0.0
        decay = math.exp(-max(0, now_ms - b[2]) / self.tau_ms)
        weight = max(1.0 - math.exp(-max(1, now_ms - b[4]) / self.tau_ms), 1e-9)
        return b[0] * decay / weight, b[1] * decay / weight, b[3] * decay / weight

    def evaluate(self, iv: Interval) -> list[Finding]:
        if self.learning_since is None:
            self.learning_since = iv.start_ms
        f = iv.flows
        if f.num_rows == 0:
            return []
        scaled = pa.table({"dst_addr": f["dst_addr"], "packets": iv.in_interval("packets"), "bytes": iv.in_interval("bytes")})
        per = scaled.group_by("dst_addr").aggregate([("packets", "sum"), ("bytes", "sum")])
        dst = per["dst_addr"].to_pylist()
        sources = distinct_sources(f, per["dst_addr"])
        pps = per["packets_sum"].to_numpy() / iv.seconds
        bps = per["bytes_sum"].to_numpy() * 8.0 / iv.seconds
        med = float(np.median(sources))
        dev = np.abs(sources - med)
        scale = robust_scale(float(np.median(dev)), float(dev.mean()))
        z = (sources - med) / scale if scale > 0 else np.zeros(len(sources))
        candidates = np.flatnonzero((sources >= self.rule.min_sources) & (z >= self.rule.min_z)
                                    & (pps >= self.min_pps))
        warm = iv.end_ms - self.learning_since >= self.warmup_ms
        flagged, hits, out = set(), [], []
        for i in candidates.tolist():
            base_pps, base_bps, base_src = self._baseline(dst[i], iv.start_ms)
            if not (pps[i] >= self.factor * base_pps and bps[i] >= self.factor * base_bps
                    and sources[i] >= self.factor * base_src):
                continue
            if not warm:  # still learning: everything teaches the baselines
                continue
            flagged.add(i)
            hits.append((i, base_pps, base_bps, base_src))
        evidence = self._evidence(f, [dst[i] for i, *_ in hits]) if hits else {}
        for i, base_pps, base_bps, base_src in hits:
            ratio = pps[i] / max(base_pps, self.min_pps / self.factor)
            top, sample = evidence[dst[i]]
            summary = (f"fan-in to {dst[i]}: {int(sources[i])} sources, {si(pps[i], 'pkt/s')}, {si(bps[i], 'bit/s')} "
                       f"(baseline {si(base_pps, 'pkt/s')}, {si(base_bps, 'bit/s')}; robust z {z[i]:.1f}; "
                       f"top port {top})")
            details = {"sources": int(sources[i]), "pps": float(pps[i]), "bps": float(bps[i]),
                       "baseline_pps": base_pps, "baseline_bps": base_bps, "baseline_sources": base_src, "robust_z": float(z[i]),
                       "median_sources": med, "top_port": top, "sample_sources": sample}
            out.append(Finding(self.name, dst[i], summary, float(ratio), self.factor, details,
                               severity(ratio, self.factor, self.critical_factor)))
        self._learn(dst, pps, bps, sources, flagged, iv)
        return out

    def _evidence(self, f: pa.Table, dsts: list[str]) -> dict[str, tuple[int, list[str]]]:
        """dst -> (its top port, its first sample_size distinct sources) for all flagged
        destinations in one pass (a flood flags many: not one filter of the interval each).
        The top port is pc.mode's: the most flows, the smallest of equals; the sources in
        order of first appearance, as pc.unique gives them."""
        sub = f.select(["dst_addr", "src_addr", "dst_port"])
        sub = sub.filter(pc.is_in(sub["dst_addr"], value_set=pa.array(dsts, pa.string())))
        d = sub["dst_addr"].combine_chunks().dictionary_encode()
        s = sub["src_addr"].combine_chunks().dictionary_encode()
        di = d.indices.to_numpy().astype(np.int64)
        port = sub["dst_port"].combine_chunks().to_numpy(zero_copy_only=False).astype(np.int64)
        low = int(port.min()) if len(port) else 0
        span = (int(port.max()) if len(port) else 0) - low + 1
        keys, counts = np.unique(di * span + (port - low), return_counts=True)
        udi, uport = keys // span, keys % span + low
        order = np.lexsort((uport, -counts, udi))  # per destination: most flows first, then the smallest port
        first = order[np.r_[True, udi[order][1:] != udi[order][:-1]]]
        top = dict(zip(udi[first].tolist(), uport[first].tolist()))
        n_src = max(len(s.dictionary), 1)
        pairs, at = np.unique(di * n_src + s.indices.to_numpy(), return_index=True)
        pdi, psi = pairs // n_src, pairs % n_src
        order = np.lexsort((at, pdi))  # per destination, its sources in order of first appearance
        pdi, psi = pdi[order], psi[order]
        starts = np.r_[0, np.flatnonzero(pdi[1:] != pdi[:-1]) + 1]
        rank = np.arange(len(pdi)) - np.repeat(starts, np.diff(np.r_[starts, len(pdi)]))
        keep = rank < self.sample
        names = s.dictionary.take(pa.array(psi[keep])).to_pylist()
        samples: dict[int, list] = {}
        for code, name in zip(pdi[keep].tolist(), names):
            samples.setdefault(code, []).append(name)
        return {name: (top[code], samples.get(code, [])) for code, name in enumerate(d.dictionary.to_pylist())}

    def _learn(self, dst, pps, bps, sources, flagged, iv: Interval) -> None:
        alpha = 1.0 - math.exp(-iv.seconds * 1000 / self.tau_ms)
        base, start, end, tau = self.base, iv.start_ms, iv.end_ms, self.tau_ms
        decays: dict = {}  # last seen -> its decay: most destinations share a few (the interval ends)
        # Python floats, not numpy scalars, in the loop (same IEEE doubles, a fraction of the cost)
        for i, d, p, bb, s in zip(range(len(dst)), dst, pps.tolist(), bps.tolist(), sources.tolist()):
            if i in flagged:
                continue
            b = base.get(d)
            if b is None:  # [pps, bps, last seen, sources, first seen]: raw EWMAs from zero
                b = base[d] = [0.0, 0.0, start, 0.0, start]
            decay = decays.get(b[2])
            if decay is None:
                decay = decays[b[2]] = math.exp(-max(0, start - b[2]) / tau) * (1 - alpha)
            b[0], b[1], b[3] = b[0] * decay + alpha * p, b[1] * decay + alpha * bb, b[3] * decay + alpha * float(s)
            b[2] = end
        if len(self.base) > self.max_tracked:  # forget the least recently seen, a tenth at once (not per interval)
            keep = sorted(self.base.items(), key=lambda kv: kv[1][2])[-int(self.max_tracked * 0.9):]
            self.base = dict(keep)

    def state(self) -> dict:
        return {"base": self.base, "learning_since": self.learning_since}

    def restore(self, state: dict) -> None:
        self.base = {k: list(v) for k, v in (state.get("base") or {}).items()}
        self.learning_since = state.get("learning_since")
