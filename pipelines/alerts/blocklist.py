"""Traffic to or from prefixes on block lists: [alerts] blocked_prefixes and the files in
[alerts] blocklist_files (one prefix or address a line, "#" starts a comment; re-read when
a file changes). One alert per listed prefix, naming the peers that talked to it."""
from __future__ import annotations

import ipaddress
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .base import Detector, Finding, Interval, si

log = logging.getLogger(__name__)


def parse_prefixes(lines, where: str) -> list:
    """Networks from text lines; a bad line raises ValueError naming where and what."""
    out = []
    for n, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError as exc:
            raise ValueError(f"{where} line {n}: {text!r} is not an address or prefix ({exc})") from None
    return out


class PrefixSet:
    """Longest-prefix lookup by masking: one set per (version, prefix length)."""

    def __init__(self, nets):
        self.by_len: dict[tuple[int, int], dict[int, str]] = {}
        for net in nets:
            self.by_len.setdefault((net.version, net.prefixlen), {})[int(net.network_address)] = str(net)
        self.lens = sorted(self.by_len, key=lambda k: -k[1])

    def __len__(self):
        return sum(len(v) for v in self.by_len.values())

    def match(self, address: str) -> str | None:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return None
        bits, value = ip.max_prefixlen, int(ip)
        for version, plen in self.lens:
            if version == ip.version:
                key = (value >> (bits - plen)) << (bits - plen) if plen else 0
                hit = self.by_len[(version, plen)].get(key)
                if hit:
                    return hit
        return None


class BlocklistDetector(Detector):
    name = "blocklist"

    def __init__(self, prefixes=(), files=(), critical_factor: float = 4.0, sample: int = 10):
        self.inline = parse_prefixes(prefixes, "[alerts] blocked_prefixes")
        self.files = [Path(p).expanduser() for p in files]
        self.critical_factor, self.sample = critical_factor, sample
        self._stamp, self.set = None, PrefixSet(self.inline)
        self._reload()

    @classmethod
    def from_config(cls, cfg) -> "BlocklistDetector":
        a = cfg.alerts
        return cls(a.blocked_prefixes, a.blocklist_files, float(a.critical_factor), int(cfg.security.sample_size))

    def _reload(self) -> None:
        stamp = []
        for p in self.files:
            try:
                stamp.append((str(p), p.stat().st_mtime_ns))
            except OSError:
                stamp.append((str(p), None))
        if stamp == self._stamp:
            return
        nets = list(self.inline)
        for p in self.files:
            try:
                nets += parse_prefixes(p.read_text().splitlines(), str(p))
            except (OSError, ValueError) as exc:  # a bad list must not stop the other detectors
                log.error("block list %s skipped: %s", p, exc)
        self._stamp, self.set = stamp, PrefixSet(nets)

    def evaluate(self, iv: Interval) -> list[Finding]:
        self._reload()
        f = iv.flows
        if not len(self.set) or f.num_rows == 0:
            return []
        addrs = pc.unique(pa.concat_arrays([f["src_addr"].combine_chunks(), f["dst_addr"].combine_chunks()]))
        hits = {a: p for a in addrs.to_pylist() if (p := self.set.match(a))}
        if not hits:
            return []
        keys = pa.array(list(hits))
        sel = f.filter(pc.or_(pc.is_in(f["src_addr"], value_set=keys), pc.is_in(f["dst_addr"], value_set=keys)))
        per: dict[str, dict] = {}
        for src, dst, nbytes in zip(*(sel[c].to_pylist() for c in ("src_addr", "dst_addr", "bytes"))):
            for listed, peer, way in ((src, dst, "from"), (dst, src, "to")):
                prefix = hits.get(listed)
                if prefix:
                    p = per.setdefault(prefix, {"flows": 0, "bytes": 0, "listed": set(), "peers": set(), "ways": set()})
                    p["flows"] += 1
                    p["bytes"] += nbytes
                    p["listed"].add(listed)
                    p["peers"].add(peer)
                    p["ways"].add(way)
        out = []
        for prefix, p in per.items():
            ways = " and ".join(sorted(p["ways"]))
            peers = sorted(p["peers"])[:self.sample]
            out.append(Finding(self.name, prefix, f"traffic {ways} blocked {prefix}: {p['flows']} flows, "
                               f"{si(p['bytes'], 'B')}, {len(p['peers'])} peers (e.g. {', '.join(peers[:3])})",
                               float(p["flows"]), 1.0, {"listed_addresses": sorted(p["listed"])[:self.sample],
                                                        "peers": peers, "bytes": p["bytes"]},
                               "critical" if len(p["peers"]) > 1 else "warning"))
        return out
