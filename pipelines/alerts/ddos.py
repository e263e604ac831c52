"""Volumetric DDoS detection (issue 36): a detector of the alerts service, on the live stream.

Per destination address inside the operator's networks ([site] local_prefixes and the
prefixes of the [enrich] networks file) and per attack class, the packets/s, bits/s and
new flows/s over a sliding window of [ddos] window_seconds, judged against absolute
thresholds and against the host's learned baseline; carpet bombs per prefix
(prefix_length_v4/_v6). docs/guide/attacks.md says why it is built this way.

Rates in an interval (one rotated nfcapd file, its flows' own clock, pipelines/alerts/base.py):
each flow's packets and bytes are spread evenly over its duration into 1-second bins of
the interval (the part outside the interval is not counted), a flow counts as new in the
bin it started; the window's rate is the highest sum of window_seconds consecutive bins
over window_seconds. A destination is binned only when its interval total could reach a
threshold over one window (total >= lowest threshold x window): a few candidates, not
every host. Classes (a flow may be in several; "total" is every flow):

    amplification  UDP from one of [ddos] amplification_ports (DNS, NTP, SNMP, CLDAP, SSDP, ...)
    fragments      TCP or UDP with both ports 0 (non-first fragments carry no ports)
    syn            TCP with SYN and without ACK among its flags
    icmp           ICMP and ICMPv6
    udp            UDP

An attack opens when one class (or the total) is over a threshold, and is one record per
victim while it lasts: its class is the most specific class over its threshold
(amplification, fragments, syn, icmp, udp, then total). It ends after end_after_seconds
without holding. Counters come scaled by the sampling rate (the shipper scales them).
"""
from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flowlake.schemas.attacks import ATTACK_CLASSES

from .base import Detector, Finding, Interval, si

log = logging.getLogger(__name__)

CLASSES = ATTACK_CLASSES  # most specific first: the attack's class is the first one over its threshold
METRICS = ("pps", "bps", "flows")
KEYS = tuple(f"threshold_{m}" for m in METRICS) + tuple(f"prefix_threshold_{m}" for m in METRICS)
MAX_BINS = 300  # at most this many 1 s bins per interval (see _bins)
BIN_MS = 1000
TOP = 10


class DdosConfigError(ValueError):
    """[ddos] is malformed; the message names the key."""


@dataclass
class Override:
    net: object | None  # ipaddress network or None
    cls: str | None
    values: dict


@dataclass
class DdosSettings:
    thresholds: dict  # threshold_pps ... prefix_threshold_flows -> float
    overrides: list[Override] = field(default_factory=list)
    window_s: float = 2.0
    amp_ports: tuple = (53, 123, 161, 389, 1900, 11211, 19, 17)
    prefix_v4: int = 24
    prefix_v6: int = 64
    prefix_min_hosts: int = 16
    min_sources: int = 5
    baseline_factor: float = 10.0
    baseline_min_pps: float = 10000.0
    baseline_min_bps: float = 5e8
    baseline_minutes: float = 60.0
    warmup_minutes: float = 10.0
    max_tracked: int = 100000
    end_after_s: float = 60.0
    lake_update_s: float = 30.0
    critical_factor: float = 4.0

    @classmethod
    def from_config(cls, cfg) -> DdosSettings:
        d = cfg.ddos
        try:
            thresholds = {k: float(getattr(d, k)) for k in KEYS}
            ports = tuple(int(p) for p in d.amplification_ports)
        except (TypeError, ValueError) as exc:
            raise DdosConfigError(f"config [ddos]: {exc}") from None
        return cls(thresholds, parse_overrides(d.overrides), float(d.window_seconds), ports,
                   int(d.prefix_length_v4), int(d.prefix_length_v6), int(d.prefix_min_hosts), int(d.min_sources),
                   float(d.baseline_factor), float(d.baseline_min_pps), float(d.baseline_min_bps),
                   float(d.baseline_minutes), float(d.warmup_minutes), int(d.max_tracked),
                   float(d.end_after_seconds), float(d.lake_update_seconds), float(cfg.alerts.critical_factor))

    def threshold(self, key: str, addr, cls: str) -> float:
        """The threshold `key` for an address (ipaddress object or None) and class: the most
        specific override naming it (prefix and class, then prefix, then class), longest prefix first."""
        best, rank = self.thresholds[key], (-1, -1)
        for o in self.overrides:
            if key not in o.values or (o.cls is not None and o.cls != cls):
                continue
            if o.net is not None and (addr is None or addr.version != o.net.version or addr not in o.net):
                continue
            r = (o.net.prefixlen if o.net is not None else -1, 1 if o.cls is not None else 0)
            if o.net is not None and o.cls is not None:
                r = (r[0] + 1000, 1)
            if r > rank:
                best, rank = o.values[key], r
        return best

    def lowest(self, prefix: bool) -> dict:
        """Per metric, the lowest threshold anywhere (overrides, baseline floors): what a
        destination's interval total must reach over one window to be looked at."""
        p = "prefix_" if prefix else ""
        out = {}
        for m in METRICS:
            vals = [self.thresholds[f"{p}threshold_{m}"]] + [o.values[f"{p}threshold_{m}"] for o in self.overrides
                                                             if f"{p}threshold_{m}" in o.values]
            if not prefix and self.baseline_factor > 0:
                vals.append({"pps": self.baseline_min_pps, "bps": self.baseline_min_bps, "flows": 0.0}[m])
            vals = [v for v in vals if v > 0]
            out[m] = min(vals) if vals else math.inf
        return out


def parse_overrides(items) -> list[Override]:
    out = []
    for i, item in enumerate(items or []):
        where = f"config [ddos] overrides[{i}]"
        if not isinstance(item, dict):
            raise DdosConfigError(f"{where}: {item!r} is not a table like "
                                  "{prefix = \"192.0.2.0/24\", threshold_pps = 5e4}")
        net = None
        if item.get("prefix") is not None:
            try:
                net = ipaddress.ip_network(str(item["prefix"]), strict=False)
            except ValueError as exc:
                raise DdosConfigError(f"{where}: prefix {item['prefix']!r}: {exc}") from None
        cls = item.get("class")
        if cls is not None and cls not in CLASSES:
            raise DdosConfigError(f"{where}: class {cls!r}: one of {', '.join(CLASSES)}")
        values = {}
        for k, v in item.items():
            if k in ("prefix", "class"):
                continue
            if k not in KEYS:
                raise DdosConfigError(f"{where}: unknown key {k!r} (known: prefix, class, {', '.join(KEYS)})")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise DdosConfigError(f"{where}: {k} = {v!r}: a number >= 0")
            values[k] = float(v)
        out.append(Override(net, cls, values))
    return out


class Networks:
    """Is an address one of the operator's? [site] local_prefixes (pipelines/locality.py's
    rule: IPv4-mapped IPv6 counts as its IPv4 address) plus the [enrich] networks file's
    prefixes; answers cached per address text."""

    def __init__(self, prefixes, cache_max: int = 500_000):
        self.nets = list(prefixes)
        self.cache: dict[str, object] = {}
        self.cache_max = cache_max

    @classmethod
    def from_config(cls, cfg) -> Networks:
        from flowlake.pipelines.locality import parse_prefixes  # noqa: PLC0415  (start-up)

        nets = parse_prefixes(cfg.site.local_prefixes)
        path = str(cfg.enrich.networks or "")
        if path:
            from flowlake.pipelines.enrich import networks  # noqa: PLC0415  (only with a networks file)

            p = cfg.base_dir / path if not path.startswith("/") else path
            try:
                nets += [ipaddress.ip_network(pfx, strict=False) for pfx, _ in networks.parse(p)]
            except Exception as exc:  # the ingest refuses a broken file loudly; detection keeps local_prefixes
                log.warning("ddos: [enrich] networks %s not used: %s", path, exc)
        return cls(nets)

    def address(self, text) -> object | None:
        """The ipaddress object of a local address text, else None (cached)."""
        hit = self.cache.get(text, False)
        if hit is not False:
            return hit
        out = None
        if isinstance(text, str):
            try:
                a = ipaddress.ip_address(text.strip())
                if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
                    a = a.ipv4_mapped
                if any(a.version == n.version and a in n for n in self.nets):
                    out = a
            except ValueError:
                out = None
        if len(self.cache) >= self.cache_max:
            self.cache.clear()
        self.cache[text] = out
        return out


def _col(f: pa.Table, name: str, dtype, fill) -> np.ndarray:
    if name not in f.column_names:
        return np.full(f.num_rows, fill, dtype=dtype)
    c = f[name]
    return pc.fill_null(pc.cast(c, pa.float64() if dtype == np.float64 else pa.int64(), safe=False),
                        fill).to_numpy(zero_copy_only=False).astype(dtype)


def _codes(f: pa.Table, name: str) -> np.ndarray:
    """A text column as integer codes (null: -1), for counting distinct values."""
    if name not in f.column_names or f.num_rows == 0:
        return np.full(f.num_rows, -1, dtype=np.int64)
    c = f[name].combine_chunks()
    if pa.types.is_dictionary(c.type):
        c = c.cast(pa.string())
    return pc.fill_null(c.dictionary_encode().indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def class_masks(proto: np.ndarray, sport: np.ndarray, dport: np.ndarray, flags: np.ndarray, amp_ports) -> np.ndarray:
    """(len(CLASSES), n) booleans: is each flow in each class (CLASSES' order)."""
    udp = proto == 17
    tcp = proto == 6
    amp = udp & np.isin(sport, np.asarray(amp_ports, dtype=np.int64))
    frag = (udp | tcp) & (sport == 0) & (dport == 0)
    syn = tcp & ((flags & 0x02) != 0) & ((flags & 0x10) == 0)
    icmp = (proto == 1) | (proto == 58)
    return np.vstack([amp, frag, syn, icmp, udp, np.ones(len(proto), dtype=bool)])


def prefix_of(addr, v4: int, v6: int) -> str:
    net = ipaddress.ip_network(f"{addr}/{v4 if addr.version == 4 else v6}", strict=False)
    return str(net)


def attack_id(victim: str, started: int) -> str:
    return hashlib.sha1(f"ddos|{victim}|{started}".encode()).hexdigest()[:12]


class DdosDetector(Detector):
    name = "ddos"

    def __init__(self, settings: DdosSettings, networks: Networks, sink=None, geo=None):
        self.s, self.networks, self.sink, self.geo = settings, networks, sink, geo
        self.tau_ms = settings.baseline_minutes * 60_000
        self.base: dict[str, list] = {}  # host -> [last seen ms, first seen ms, pps x classes..., bps x classes...]
        self.learning_since: int | None = None
        self.open: dict[str, dict] = {}  # victim -> attack row (schemas/attacks.py) + private "_" keys
        self.recent: list[dict] = []  # ended attacks (for attacks.json's last hour)
        self.opened = self.ended = 0
        self.last_detect_s: float | None = None
        self._prefix_cache: dict = {}

    @classmethod
    def from_config(cls, cfg, sink=None) -> DdosDetector:
        return cls(DdosSettings.from_config(cfg), Networks.from_config(cfg),
                   AttackSink.from_config(cfg) if sink is None else sink, _geo(cfg))

    # ---- the measure -----------------------------------------------------------------
    def _bins(self, iv: Interval, ts: np.ndarray, te: np.ndarray, pk: np.ndarray, by: np.ndarray,
              masks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per class, per 1 s bin of the interval: packets, bytes, new flows of these flows."""
        start, end = iv.start_ms, max(iv.end_ms, iv.start_ms + BIN_MS)
        if len(ts):  # only the bins the flows cover (an interval after a gap can span days)
            first_ms = int(ts.min())
            if first_ms > start:
                start += (first_ms - start) // BIN_MS * BIN_MS  # on the interval's bin edges
            end = max(min(end, int(np.maximum(te, ts).max()) + 1), start + BIN_MS)
        if end - start > MAX_BINS * BIN_MS:
            # the bins are a flows x bins matrix: a backlog's interval (a stack back after
            # days: 5.9 M bins took 22 GiB) is measured over its last MAX_BINS seconds, and
            # the flows that ended before those are history, not counted: clipped to the
            # first bin, a replayed day's hours of flows (`flowlake demo`, an import through
            # the live stack) made dozens of false attacks of 0.1-7 M packets/s
            start = end - MAX_BINS * BIN_MS
            recent = np.maximum(te, ts) >= start
            pk, by, masks = pk * recent, by * recent, masks & recent[None, :]
        nb = int(math.ceil((end - start) / BIN_MS))
        edges = start + BIN_MS * np.arange(nb + 1, dtype=np.int64)
        s = np.clip(ts, start, end)
        e = np.clip(np.maximum(te, ts), start, end)
        dur = np.maximum(e - s, 1)
        lo, hi = edges[:-1][None, :], edges[1:][None, :]
        overlap = np.clip(np.minimum(e[:, None], hi) - np.maximum(s[:, None], lo), 0, None).astype(np.float64)
        point = (e - s) <= 0  # a flow of no duration (or wholly outside, clipped to an edge): its end's bin
        if point.any():
            idx = np.clip((e[point] - start) // BIN_MS, 0, nb - 1)
            overlap[point] = 0.0
            overlap[np.flatnonzero(point), idx] = 1.0
            dur = np.where(point, 1, dur)
        share = overlap / dur[:, None]
        m = masks.astype(np.float64)
        pk_bins = m @ (share * pk[:, None])
        by_bins = m @ (share * by[:, None])
        first = np.clip((np.clip(ts, start, end) - start) // BIN_MS, 0, nb - 1)
        counted = ts >= start  # a flow that started before the interval is not new in it
        fl_bins = np.zeros((len(CLASSES), nb))
        for c in range(len(CLASSES)):
            sel = masks[c] & counted
            fl_bins[c] = np.bincount(first[sel], minlength=nb)[:nb]
        return pk_bins, by_bins, fl_bins

    def _peak(self, bins: np.ndarray) -> np.ndarray:
        """Per class, the highest window rate (per second) over the interval's bins."""
        w = max(1, int(round(self.s.window_s * 1000 / BIN_MS)))
        if bins.shape[1] < w:
            return bins.sum(axis=1) / (w * BIN_MS / 1000)
        cs = np.cumsum(np.pad(bins, ((0, 0), (1, 0))), axis=1)
        return (cs[:, w:] - cs[:, :-w]).max(axis=1) / (w * BIN_MS / 1000)

    # ---- evaluate --------------------------------------------------------------------
    def evaluate(self, iv: Interval) -> list[Finding]:
        if self.learning_since is None:
            self.learning_since = iv.start_ms
        f = iv.flows
        now_ms = iv.end_ms
        hits: dict[str, dict] = {}
        if f.num_rows and "dst_addr" in f.column_names:
            hits = self._judge(iv)
        findings = self._lifecycle(iv, hits)
        if self.sink is not None:
            self.sink.update(list(self.open.values()) + self.recent, now_ms)
        return findings

    def _judge(self, iv: Interval) -> dict[str, dict]:
        f = iv.flows
        dst = f["dst_addr"].combine_chunks()
        if pa.types.is_dictionary(dst.type):
            dst = dst.cast(pa.string())
        enc = dst.dictionary_encode()
        names = enc.dictionary.to_pylist()
        local = [self.networks.address(n) for n in names]
        is_local = np.array([a is not None for a in local] + [False], dtype=bool)
        codes = pc.fill_null(enc.indices, len(names)).to_numpy(zero_copy_only=False).astype(np.int64)
        rows = np.flatnonzero(is_local[codes])
        if len(rows) == 0:
            return {}
        codes = codes[rows]
        sub = f.take(pa.array(rows))
        ts = _col(sub, "time_start", np.int64, iv.start_ms)
        te = _col(sub, "time_end", np.int64, iv.end_ms)
        ts = np.where(ts <= 0, te, ts)
        pk = np.clip(_col(sub, "packets", np.float64, 0.0), 0, None)
        by = np.clip(_col(sub, "bytes", np.float64, 0.0), 0, None)
        pk, by = np.nan_to_num(pk, posinf=0.0), np.nan_to_num(by, posinf=0.0)
        masks = class_masks(_col(sub, "proto", np.int64, 0), _col(sub, "src_port", np.int64, -1),
                            _col(sub, "dst_port", np.int64, -1), _col(sub, "tcp_flags", np.int64, 0), self.s.amp_ports)
        src = _codes(sub, "src_addr")
        # interval totals per destination and class (cheap, vectorised): who could reach a threshold
        ncodes = len(names) + 1
        tot_pk = np.vstack([np.bincount(codes, weights=pk * masks[c], minlength=ncodes) for c in range(len(CLASSES))])
        tot_by = np.vstack([np.bincount(codes, weights=by * masks[c], minlength=ncodes) for c in range(len(CLASSES))])
        tot_fl = np.vstack([np.bincount(codes, weights=masks[c].astype(np.float64), minlength=ncodes)
                            for c in range(len(CLASSES))])
        w = self.s.window_s
        low = self.s.lowest(prefix=False)
        cand = np.flatnonzero((tot_pk.max(axis=0) >= low["pps"] * w) | (tot_by.max(axis=0) * 8 >= low["bps"] * w)
                              | (tot_fl.max(axis=0) >= low["flows"] * w))
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(ncodes + 1))
        warm = self.s.baseline_factor > 0 and iv.end_ms - self.learning_since >= self.s.warmup_minutes * 60_000
        hits: dict[str, dict] = {}
        for code in cand.tolist():
            idx = order[bounds[code]:bounds[code + 1]]
            rates = self._rates(iv, ts[idx], te[idx], pk[idx], by[idx], masks[:, idx], src[idx])
            addr = local[code]
            got = self._over(names[code], addr, rates, prefix=False, warm=warm, at_ms=iv.start_ms)
            if got:
                hits[names[code]] = {**got, "scope": "host", "rows": rows[idx], "hosts": 1, "addr": addr}
        # carpet bombs: the same per prefix, for traffic spread over many hosts
        self._carpets(iv, names, local, codes, ts, te, pk, by, masks, rows, hits, src)
        self._learn(iv, names, local, tot_pk, tot_by, hits)
        return hits

    def _rates(self, iv, ts, te, pk, by, masks, src) -> dict:
        pkb, byb, flb = self._bins(iv, ts, te, pk, by, masks)
        sources = [len(np.unique(src[masks[c]])) for c in range(len(CLASSES))]
        return {"pps": self._peak(pkb), "bps": self._peak(byb) * 8.0, "flows": self._peak(flb),
                "packets": pkb.sum(axis=1), "bytes": byb.sum(axis=1), "sources": sources}

    def _over(self, victim: str, addr, rates: dict, prefix: bool, warm: bool, at_ms: int) -> dict | None:
        """The most specific class over a threshold: {class, metric, value, threshold, reason, rates}."""
        p = "prefix_" if prefix else ""
        base = None if prefix or not warm else self._baseline(victim, at_ms)
        for c, cls in enumerate(CLASSES):
            best = None
            if rates["sources"][c] < self.s.min_sources:  # one big transfer is not a flood
                continue
            for m in METRICS:
                v = float(rates[m][c])
                t = self.s.threshold(f"{p}threshold_{m}", addr, cls)
                if t > 0 and v >= t and (best is None or v / t > best[0]):
                    best = (v / t, m, v, t, f"{m} >= {t:g} (absolute)")
            if base is not None and best is None and cls != "total":  # legitimate totals swing too much
                for m, floor in (("pps", self.s.baseline_min_pps), ("bps", self.s.baseline_min_bps)):
                    b = base[m][c]
                    t = max(floor, self.s.baseline_factor * b)
                    v = float(rates[m][c])
                    if floor > 0 and v >= t and (best is None or v / t > best[0]):
                        best = (v / t, m, v, t, f"{m} >= {self.s.baseline_factor:g} x baseline {b:.4g} "
                                                f"(floor {floor:g})")
            if best is not None:
                return {"class": cls, "c": c, "ratio": best[0], "metric": best[1], "value": best[2],
                        "threshold": best[3], "reason": best[4], "rates": rates}
        return None

    def _carpets(self, iv, names, local, codes, ts, te, pk, by, masks, rows, hits, src) -> None:
        pfx_of = {}
        cache = self._prefix_cache
        if len(cache) > 500_000:
            cache.clear()
        for code, a in enumerate(local):
            if a is not None:
                p = cache.get(a)
                if p is None:
                    p = cache[a] = prefix_of(a, self.s.prefix_v4, self.s.prefix_v6)
                pfx_of[code] = p
        if not pfx_of:
            return
        prefixes = sorted(set(pfx_of.values()))
        pidx = {p: i for i, p in enumerate(prefixes)}
        code_to_p = np.full(len(names) + 1, -1, dtype=np.int64)
        for code, p in pfx_of.items():
            code_to_p[code] = pidx[p]
        pc_ = code_to_p[codes]
        npfx = len(prefixes)
        low = self.s.lowest(prefix=True)
        w = self.s.window_s
        tot = np.vstack([np.bincount(pc_, weights=pk * masks[c], minlength=npfx) for c in range(len(CLASSES))])
        tby = np.vstack([np.bincount(pc_, weights=by * masks[c], minlength=npfx) for c in range(len(CLASSES))])
        tfl = np.vstack([np.bincount(pc_, weights=masks[c].astype(np.float64), minlength=npfx)
                         for c in range(len(CLASSES))])
        cand = np.flatnonzero((tot.max(axis=0) >= low["pps"] * w) | (tby.max(axis=0) * 8 >= low["bps"] * w)
                              | (tfl.max(axis=0) >= low["flows"] * w))
        flagged_hosts = {h for h, v in hits.items() if v["scope"] == "host"}
        for p in cand.tolist():
            sel = np.flatnonzero(pc_ == p)
            net = ipaddress.ip_network(prefixes[p])
            rates = self._rates(iv, ts[sel], te[sel], pk[sel], by[sel], masks[:, sel], src[sel])
            got = self._over(prefixes[p], net.network_address, rates, prefix=True, warm=False, at_ms=iv.start_ms)
            if not got:
                continue
            csel = sel[masks[got["c"], sel]]
            host_codes = np.unique(codes[csel])
            if len(host_codes) < self.s.prefix_min_hosts:
                continue
            flagged = sum(float(pk[csel][codes[csel] == hc].sum()) for hc in host_codes if names[hc] in flagged_hosts)
            if flagged >= 0.5 * float(pk[csel].sum()):  # mostly host attacks already open: not a carpet
                continue
            hits[prefixes[p]] = {**got, "scope": "prefix", "rows": rows[sel], "hosts": int(len(host_codes)),
                                 "addr": net.network_address}

    # ---- baseline --------------------------------------------------------------------
    def _baseline(self, host: str, now_ms: int) -> dict:
        b = self.base.get(host)
        k = len(CLASSES)
        if b is None:
            return {"pps": [0.0] * k, "bps": [0.0] * k}
        decay = math.exp(-max(0, now_ms - b[0]) / self.tau_ms)
        weight = max(1.0 - math.exp(-max(1, now_ms - b[1]) / self.tau_ms), 1e-9)
        return {"pps": [v * decay / weight for v in b[2:2 + k]],
                "bps": [v * decay / weight for v in b[2 + k:2 + 2 * k]]}

    def _learn(self, iv, names, local, tot_pk, tot_by, hits) -> None:
        """EWMA of each host's interval rates per class (absence counts as zero: decayed by
        the time since it was last seen); hosts under attack do not teach it. Only hosts
        whose rate could matter are tracked (a baseline below floor / factor changes nothing)."""
        if self.s.baseline_factor <= 0:
            return
        secs = iv.seconds
        k = len(CLASSES)
        learn_min = self.s.baseline_min_pps / self.s.baseline_factor / 2
        keep = np.flatnonzero(tot_pk[-1] / secs >= learn_min)
        alpha = 1.0 - math.exp(-secs * 1000 / self.tau_ms)
        start, end = iv.start_ms, iv.end_ms
        for code in keep.tolist():
            if code >= len(names) or local[code] is None or names[code] in hits or names[code] in self.open:
                continue
            host = names[code]
            b = self.base.get(host)
            if b is None:
                b = self.base[host] = [start, start] + [0.0] * (2 * k)
            decay = math.exp(-max(0, start - b[0]) / self.tau_ms) * (1 - alpha)
            for c in range(k):
                b[2 + c] = b[2 + c] * decay + alpha * float(tot_pk[c, code]) / secs
                b[2 + k + c] = b[2 + k + c] * decay + alpha * float(tot_by[c, code]) * 8 / secs
            b[0] = end
        if len(self.base) > self.s.max_tracked:
            keep_items = sorted(self.base.items(), key=lambda kv: kv[1][0])[-int(self.s.max_tracked * 0.9):]
            self.base = dict(keep_items)

    # ---- attacks ---------------------------------------------------------------------
    def _evidence(self, iv: Interval, rows: np.ndarray, c: int) -> dict:
        """Top sources, ports, exporters, interfaces and the protocol of the class's flows."""
        sub = iv.flows.take(pa.array(rows))
        masks = class_masks(_col(sub, "proto", np.int64, 0), _col(sub, "src_port", np.int64, -1),
                            _col(sub, "dst_port", np.int64, -1), _col(sub, "tcp_flags", np.int64, 0), self.s.amp_ports)
        sub = sub.filter(pa.array(masks[c]))
        pk = pa.array(np.clip(_col(sub, "packets", np.float64, 0.0), 0, None))

        def top(col: str, n: int = TOP) -> list[tuple]:
            if col not in sub.column_names or sub.num_rows == 0:
                return []
            t = pa.table({"k": sub[col], "p": pk})
            t = t.filter(pc.is_valid(t["k"]))
            g = t.group_by("k").aggregate([("p", "sum")]).sort_by([("p_sum", "descending"), ("k", "ascending")])
            return list(zip(g["k"].to_pylist()[:n], g["p_sum"].to_pylist()[:n], strict=True))

        ifaces = []
        if sub.num_rows and "exporter" in sub.column_names and "input_if" in sub.column_names:
            key = pc.binary_join_element_wise(pc.cast(sub["exporter"], pa.string()),
                                              pc.cast(sub["input_if"], pa.string()), "/")
            t = pa.table({"k": key, "p": pk}).filter(pc.is_valid(key))
            g = t.group_by("k").aggregate([("p", "sum")]).sort_by([("p_sum", "descending"), ("k", "ascending")])
            ifaces = list(zip(g["k"].to_pylist()[:TOP], g["p_sum"].to_pylist()[:TOP], strict=True))
        protos = top("proto", 1)
        return {"sources": top("src_addr"), "src_ports": top("src_port"), "dst_ports": top("dst_port"),
                "exporters": top("exporter"), "ifaces": ifaces, "proto": int(protos[0][0]) if protos else 0,
                "first_ms": int(pc.min(pc.cast(sub["time_start"], pa.int64())).as_py() or iv.start_ms)
                if sub.num_rows and "time_start" in sub.column_names else iv.start_ms}

    def _lifecycle(self, iv: Interval, hits: dict) -> list[Finding]:
        now = iv.end_ms
        out: list[Finding] = []
        wall = int(time.time() * 1000)
        for victim, h in hits.items():
            ev = self._evidence(iv, h["rows"], h["c"])
            rates = h["rates"]
            a = self.open.get(victim)
            if a is None:
                started = min(ev["first_ms"], now) if ev["first_ms"] >= iv.start_ms - 600_000 else iv.start_ms
                a = self.open[victim] = {
                    "id": attack_id(victim, started), "victim": victim, "scope": h["scope"], "attack_class": h["class"],
                    "protocol": ev["proto"], "peak_pps": 0.0, "peak_bps": 0.0, "peak_flows": 0.0, "threshold": "",
                    "hosts": h["hosts"], "packets": 0.0, "bytes": 0.0, "intervals": 0, "started": started,
                    "updated": now, "ended": None, "detected_at": wall,
                    "_acc": {"sources": {}, "src_ports": {}, "dst_ports": {}, "exporters": {}, "ifaces": {}},
                    "_saved": 0.0, "_new": True}
                self.opened += 1
                self.last_detect_s = (wall - started) / 1000
                log.warning("attack %s opened: %s %s %s", a["id"], victim, h["class"], h["reason"])
            elif CLASSES.index(h["class"]) < CLASSES.index(a["attack_class"]):
                a["attack_class"], a["protocol"] = h["class"], ev["proto"]
            ci = CLASSES.index(a["attack_class"])
            a["peak_pps"] = max(a["peak_pps"], float(rates["pps"][ci]))
            a["peak_bps"] = max(a["peak_bps"], float(rates["bps"][ci]))
            a["peak_flows"] = max(a["peak_flows"], float(rates["flows"][ci]))
            a["packets"] += float(rates["packets"][ci])
            a["bytes"] += float(rates["bytes"][ci])
            a["hosts"] = max(a["hosts"], h["hosts"])
            a["intervals"] += 1
            a["updated"] = now
            if not a["threshold"] or h["ratio"] >= a.get("_ratio", 0):
                a["threshold"], a["_ratio"] = h["reason"], h["ratio"]
            for k in a["_acc"]:
                acc = a["_acc"][k]
                for key, v in ev[k]:
                    acc[str(key)] = acc.get(str(key), 0.0) + float(v)
                if len(acc) > 200:
                    a["_acc"][k] = dict(sorted(acc.items(), key=lambda kv: -kv[1])[:100])
            self._fill(a)
            sev = "critical" if h["ratio"] >= self.s.critical_factor else "warning"
            out.append(Finding(self.name, victim,
                               f"{a['attack_class']} attack on {victim}: {si(a['peak_pps'], 'pkt/s')}, "
                               f"{si(a['peak_bps'], 'bit/s')} peak ({a['threshold']}); sources {a['top_sources'][:80]}",
                               h["value"], h["threshold"],
                               {"attack_id": a["id"], "attack_class": a["attack_class"], "scope": a["scope"],
                                "peak_pps": a["peak_pps"], "peak_bps": a["peak_bps"], "peak_flows": a["peak_flows"],
                                "top_sources": a["top_sources"], "src_ports": a["src_ports"],
                                "dst_ports": a["dst_ports"], "exporters": a["exporters"],
                                "input_interfaces": a["input_interfaces"], "countries": a["countries"]}, sev))
        quiet_ms = self.s.end_after_s * 1000
        for victim in [v for v, a in self.open.items() if v not in hits and now - a["updated"] >= quiet_ms]:
            a = self.open.pop(victim)
            a["ended"] = a["updated"]
            self.ended += 1
            self.recent.append(a)
            log.warning("attack %s ended: %s", a["id"], victim)
        self.recent = [a for a in self.recent if now - a["ended"] <= 3600_000]
        return out

    def _fill(self, a: dict) -> None:
        def top(k, n=TOP):
            return [key for key, _ in sorted(a["_acc"][k].items(), key=lambda kv: (-kv[1], kv[0]))[:n]]

        a["top_sources"] = ", ".join(top("sources"))
        a["src_ports"] = ", ".join(top("src_ports"))
        a["dst_ports"] = ", ".join(top("dst_ports"))
        a["exporters"] = ", ".join(top("exporters"))
        a["input_interfaces"] = ", ".join(top("ifaces"))
        countries = []
        if self.geo is not None:
            for s in top("sources"):
                cc = self.geo(s)
                if cc and cc not in countries:
                    countries.append(cc)
        a["countries"] = ", ".join(countries)

    # ---- state -----------------------------------------------------------------------
    def state(self) -> dict:
        return {"base": self.base, "learning_since": self.learning_since, "open": self.open, "recent": self.recent}

    def restore(self, state: dict) -> None:
        self.base = {k: list(v) for k, v in (state.get("base") or {}).items()}
        self.learning_since = state.get("learning_since")
        self.open = {k: v for k, v in (state.get("open") or {}).items() if isinstance(v, dict) and "id" in v}
        self.recent = [a for a in (state.get("recent") or []) if isinstance(a, dict) and "id" in a]

    def rows(self) -> list[dict]:
        return list(self.open.values()) + self.recent


def _geo(cfg):
    """A country lookup (address text -> ISO code) from the ingest's snapshot of [enrich]
    geo_database, or None without one."""
    try:
        import json  # noqa: PLC0415  (only here)

        from flowlake.pipelines.enrich import mmdb  # noqa: PLC0415  (optional: maxminddb)
        from flowlake.pipelines.enrich.sources import status_file  # noqa: PLC0415  (optional)

        snap = (json.loads(status_file(cfg).read_text()).get("sources") or {}).get("geo", {}).get("snapshot")
        if not snap:
            return None
        look = mmdb.Lookup(snap)
    except Exception:
        return None
    cache: dict[str, str] = {}

    def country(addr: str) -> str:
        if addr not in cache:
            try:
                cache[addr] = mmdb.country_of(look.get(addr)) if look.get(addr) else ""
            except Exception:
                cache[addr] = ""
        return cache[addr]
    return country


class AttackSink:
    """Writes what the detector holds: attacks.json after every interval, the lake's rows
    when an attack opens, ends, or at most every [ddos] lake_update_seconds while open."""

    def __init__(self, cfg, store, lake_update_s: float):
        self.cfg, self.store, self.lake_update_s = cfg, store, lake_update_s
        self.errors = 0

    @classmethod
    def from_config(cls, cfg) -> AttackSink:
        from .attacks import AttackStore  # noqa: PLC0415  (start-up: deltalake)

        return cls(cfg, AttackStore.from_config(cfg), float(cfg.ddos.lake_update_seconds))

    def update(self, rows: list[dict], now_ms: int) -> None:
        from .attacks import write_current  # noqa: PLC0415  (start-up)

        public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
        write_current(self.cfg, public, now_ms)
        mono = time.monotonic()
        due = [r for r in rows if r.get("_new") or (r.get("ended") is not None and not r.get("_ended_saved"))
               or (r.get("ended") is None and mono - r.get("_saved", 0.0) >= self.lake_update_s)]
        if not due:
            return
        try:
            self.store.save([{k: v for k, v in r.items() if not k.startswith("_")} for r in due])
        except Exception as exc:  # the lake away: attacks.json and the alerts still go; retried next interval
            self.errors += 1
            log.warning("ddos: lake/attacks not written (%s); retried next interval", exc)
            return
        for r in due:
            r["_new"], r["_saved"] = False, mono
            if r.get("ended") is not None:
                r["_ended_saved"] = True
