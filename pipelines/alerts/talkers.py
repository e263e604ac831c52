"""New talkers on watched ports: an address exchanging traffic on one of [alerts]
watched_ports (as client or server) that was not seen on that port within [security]
new_talker_days, the look-back of the daily `new_talkers` job.

Only flows that carried an exchange count (TCP with an ACK, or more packets than a scan
probe, [security] scan_small_packets): a scan's bare SYNs belong to the scan detector.
After a start with nothing remembered, [alerts] talkers_learn_minutes of flows are learnt
first. Memory: [alerts] talkers_max (address, port) pairs, the least recently seen go first.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .base import Detector, Finding, Interval

TCP_ACK = 0x10


class NewTalkerDetector(Detector):
    name = "new_talker"

    def __init__(self, ports, history_days: float, learn_minutes: float, max_pairs: int, small_packets: int = 3,
                 sample: int = 10):
        self.ports = sorted({int(p) for p in ports})
        self.keep_ms, self.learn_ms = history_days * 86_400_000, learn_minutes * 60_000
        self.max_pairs, self.small_packets, self.sample = max_pairs, small_packets, sample
        self.seen: dict[str, int] = {}  # "address|port" -> last seen (ms)
        self.learning_since: int | None = None

    @classmethod
    def from_config(cls, cfg) -> "NewTalkerDetector":
        a = cfg.alerts
        return cls(a.watched_ports, float(cfg.security.new_talker_days), float(a.talkers_learn_minutes),
                   int(a.talkers_max), int(cfg.security.scan_small_packets), int(cfg.security.sample_size))

    def evaluate(self, iv: Interval) -> list[Finding]:
        if self.learning_since is None:
            self.learning_since = iv.start_ms
        f = iv.flows
        if not self.ports or f.num_rows == 0:
            return []
        ports = pa.array(self.ports, pa.int32())
        wire_limit = pc.multiply(pc.max_element_wise(pc.cast(f["sampling_rate"], pa.int64()), 1), self.small_packets)
        exchanged = pc.or_(pc.greater(f["packets"], wire_limit),
                           pc.and_(pc.equal(f["proto"], 6), pc.not_equal(pc.bit_wise_and(f["tcp_flags"], TCP_ACK), 0)))
        f = f.filter(exchanged)
        ends = []
        for port_col, here, there, role in (("dst_port", "src_addr", "dst_addr", "client"),
                                            ("dst_port", "dst_addr", "src_addr", "server"),
                                            ("src_port", "src_addr", "dst_addr", "server"),
                                            ("src_port", "dst_addr", "src_addr", "client")):
            sel = f.filter(pc.is_in(f[port_col], value_set=ports))
            if sel.num_rows:
                ends.append(pa.table({"address": sel[here], "port": sel[port_col], "peer": sel[there],
                                      "role": pa.repeat(role, sel.num_rows)}))
        if not ends:
            return []
        t = pa.concat_tables(ends)
        per = t.group_by(["address", "port", "role"]).aggregate([("peer", "count_distinct"), ("peer", "count")])
        learning = iv.end_ms - self.learning_since < self.learn_ms
        keys = pc.binary_join_element_wise(per["address"], pc.cast(per["port"], pa.string()), "|").to_pylist()
        new: dict[str, dict] = {}
        if not learning:  # only the rows of pairs not seen (or not lately) come to Python one by one
            end, keep = iv.end_ms, self.keep_ms
            rows = [i for i, last in enumerate(map(self.seen.get, keys)) if last is None or end - last > keep]
            if rows:
                idx = pa.array(rows, pa.int64())
                for addr, port, role, peers, flows in zip(*(per[c].take(idx).to_pylist() for c in
                                                            ("address", "port", "role", "peer_count_distinct",
                                                             "peer_count"))):
                    n = new.setdefault(addr, {"ports": [], "roles": [], "peers": 0, "flows": 0})
                    n["ports"].append(port)
                    n["roles"].append(role)
                    n["peers"] += peers
                    n["flows"] += flows
        self.seen.update(dict.fromkeys(keys, iv.end_ms))
        if len(self.seen) > self.max_pairs:  # the least recently seen go, a tenth at once
            self.seen = dict(sorted(self.seen.items(), key=lambda kv: kv[1])[-int(self.max_pairs * 0.9):])
        samples: dict[str, dict] = {}  # new address -> its first peers (dict: in order, once each)
        if new:
            sub = t.filter(pc.is_in(t["address"], value_set=pa.array(list(new), pa.string())))
            for addr, peer in zip(sub["address"].to_pylist(), sub["peer"].to_pylist()):
                got = samples.setdefault(addr, {})
                if len(got) < self.sample:
                    got[peer] = None
        out = []
        for addr, n in new.items():
            ports = sorted(set(n["ports"]))
            roles = "/".join(sorted(set(n["roles"])))
            sample = list(samples.get(addr, ()))
            out.append(Finding(self.name, addr, f"new talker {addr} ({roles}) on watched port "
                               f"{','.join(map(str, ports))}: {n['flows']} flows with {n['peers']} peers, "
                               f"not seen there in {self.keep_ms / 86_400_000:g} days",
                               float(n["flows"]), 1.0, {"ports": ports, "roles": roles, "sample_peers": sample},
                               "warning"))
        return out

    def state(self) -> dict:
        return {"seen": self.seen, "learning_since": self.learning_since}

    def restore(self, state: dict) -> None:
        self.seen = {k: int(v) for k, v in (state.get("seen") or {}).items()}
        self.learning_since = state.get("learning_since")
