"""A small sFlow v5 agent for the traffic model (issue 35): model flows become flow samples
(a raw packet header record: the packet's first bytes, as `gaps.frame_of` builds them, with
the frame length of the flow's mean packet), each flow sampled 1 in `rate` of its packets
(binomial), and every agent port reports generic interface counters that add up exactly
what its samples stand for (rate x frame length per sample). An agent given `drop_every`
also reports every drop_every-th sampled flow's packet as discarded (a discarded packet
sample, sFlow drop notifications 0:5, with reasons in turn from DROP_REASONS), as a switch
whose ACLs, TTL checks and policers drop some packets does. Sent as datagrams to sfcapd's
port, they go where a switch's sFlow goes: sfcapd's files, the sFlow tap's counters, drop
records and agent health (`flowlake demo` uses it, flowlake/demo_sflow.py)."""
from __future__ import annotations

import ipaddress
import socket
import struct
import time
from dataclasses import dataclass, field

import numpy as np

from .gaps import frame_of

ETH_FCS = 4  # frame_length counts the FCS; the sampled header has it stripped
IF_SPEED_BPS = 10_000_000_000
MAX_SAMPLES_PER_FLOW = 20  # a bulk flow sampled 1:N still has thousands: a demo's datagrams stay few
# sFlow drop reasons (sFlow drop notifications, drop_reason): acl, ttl_exceeded, rate_limit;
# the tap maps them to forwarding_status 129 ACL deny, 137 bad TTL, 138 policer
DROP_REASONS = (258, 257, 261)


def datagram(agent: str, sub_agent: int, seq: int, uptime_ms: int, samples: list[bytes]) -> bytes:
    """An sFlow v5 datagram of agent (IPv4 or IPv6 address) with these samples."""
    a = ipaddress.ip_address(agent)
    return (struct.pack(">II", 5, 1 if a.version == 4 else 2) + a.packed
            + struct.pack(">IIII", sub_agent, seq, uptime_ms & 0xFFFFFFFF, len(samples)) + b"".join(samples))


def flow_sample(seq: int, source_index: int, rate: int, pool: int, in_if: int, out_if: int, frame: bytes,
                frame_length: int) -> bytes:
    """A flow sample (format 0:1) with one raw packet header record (Ethernet)."""
    pad = frame + b"\0" * (-len(frame) % 4)
    rec = struct.pack(">IIII", 1, frame_length, ETH_FCS, len(frame)) + pad
    body = (struct.pack(">8I", seq, source_index, rate, pool & 0xFFFFFFFF, 0, in_if, out_if, 1)
            + struct.pack(">II", 1, len(rec)) + rec)
    return struct.pack(">II", 1, len(body)) + body


def discard_sample(seq: int, source_index: int, in_if: int, reason: int, frame: bytes, frame_length: int,
                   drops: int = 0, out_if: int = 0, header_protocol: int = 1) -> bytes:
    """A discarded packet sample (format 0:5, sFlow drop notifications) with one raw packet
    header record: header_protocol 1 Ethernet (frame_length counts the FCS), 11 IPv4, 12 IPv6;
    drops: notifications the agent could not send since its last."""
    pad = frame + b"\0" * (-len(frame) % 4)
    fcs = ETH_FCS if header_protocol == 1 else 0
    rec = struct.pack(">IIII", header_protocol, frame_length, fcs, len(frame)) + pad
    body = (struct.pack(">8I", seq, 0, source_index, drops, in_if, out_if, reason, 1)
            + struct.pack(">II", 1, len(rec)) + rec)
    return struct.pack(">II", 5, len(body)) + body


def counter_sample(seq: int, if_index: int, c: list[int], speed_bps: int = IF_SPEED_BPS) -> bytes:
    """A counter sample (format 0:2) with a generic interface counters record (0:1):
    c = [in_octets, in_ucast_pkts, out_octets, out_ucast_pkts]; the port is up."""
    rec = (struct.pack(">IIQII", if_index, 6, speed_bps, 1, 3)
           + struct.pack(">QIIIIII", c[0] & (2**64 - 1), c[1] & 0xFFFFFFFF, 0, 0, 0, 0, 0)
           + struct.pack(">QIIIII", c[2] & (2**64 - 1), c[3] & 0xFFFFFFFF, 0, 0, 0, 0) + struct.pack(">I", 0))
    body = struct.pack(">III", seq, if_index, 1) + struct.pack(">II", 1, len(rec)) + rec
    return struct.pack(">II", 2, len(body)) + body


@dataclass
class Agent:
    """One sFlow agent: its address, sub-agent, sampling rate and ports (uplink first)."""
    address: str
    sub_agent: int
    rate: int
    ports: tuple[int, ...]
    drop_every: int = 0  # every drop_every-th sampled flow also one discarded packet sample (0: none)
    seq: int = 0
    samples: int = 0
    discards: int = 0
    sampled_flows: int = 0
    pool: int = 0
    counters: dict[int, list[int]] = field(default_factory=dict)

    def flow_samples(self, f: np.ndarray, rng: np.random.Generator) -> list[bytes]:
        """Samples of these model flows: per flow Binomial(packets, 1/rate) (at most
        MAX_SAMPLES_PER_FLOW), inbound ones in on the uplink, the rest out of it; the
        counters of both ports grow by what each sample stands for."""
        out = []
        k = np.minimum(rng.binomial(f["packets"].astype(np.int64), 1 / self.rate), MAX_SAMPLES_PER_FLOW)
        lan = self.ports[1:]
        for fl, n in zip(f, k, strict=True):
            if not n:
                continue
            frame = frame_of(fl)
            l2 = len(frame) - (40 if fl["ipv6"] else 20) - _l4_len(int(fl["proto"]))  # header, tag
            frame_length = max(int(fl["bytes"]) // max(int(fl["packets"]), 1), 40) + l2 + ETH_FCS
            side = lan[int(fl["dst_port"]) % len(lan)]
            in_if, out_if = (self.ports[0], side) if fl["inbound"] else (side, self.ports[0])
            self.sampled_flows += 1
            if self.drop_every and self.sampled_flows % self.drop_every == 0:
                self.samples += 1
                self.discards += 1
                out.append(discard_sample(self.samples, self.ports[0], in_if,
                                          DROP_REASONS[self.discards % len(DROP_REASONS)], frame[:128],
                                          frame_length))
            for _ in range(int(n)):
                self.samples += 1
                self.pool += self.rate
                out.append(flow_sample(self.samples, self.ports[0], self.rate, self.pool, in_if, out_if,
                                       frame[:128], frame_length))
                for port, col in ((in_if, 0), (out_if, 2)):
                    c = self.counters.setdefault(port, [0, 0, 0, 0])
                    c[col] += self.rate * frame_length
                    c[col + 1] += self.rate
        return out

    def counter_samples(self) -> list[bytes]:
        self.samples += 1
        return [counter_sample(self.samples, p, self.counters.setdefault(p, [0, 0, 0, 0])) for p in self.ports]

    def datagrams(self, samples: list[bytes], uptime_ms: int, per: int = 8) -> list[bytes]:
        out = []
        for i in range(0, len(samples), per):
            self.seq += 1
            out.append(datagram(self.address, self.sub_agent, self.seq, uptime_ms, samples[i:i + per]))
        return out


def _l4_len(proto: int) -> int:
    return {6: 20, 17: 8}.get(proto, 8)


def send(target: tuple[str, int], agents: list[Agent], flows: np.ndarray, seconds: float,
         counter_every_s: float = 10.0, seed: int = 35, stop=None) -> dict:
    """Spread the agents' samples of these flows over `seconds` of real time (flows split
    among the agents round robin), with every agent's counter samples every
    counter_every_s and once more at the end (then every port's counters hold all its
    samples); returns per agent: datagrams, flow, discarded packet and counter samples.
    stop: an Event that ends the sending early."""
    rng = np.random.default_rng(seed)
    s = socket.socket(socket.AF_INET6 if ":" in target[0] else socket.AF_INET, socket.SOCK_DGRAM)
    boot = time.monotonic() - 3600  # the agents booted an hour ago
    steps = max(1, int(seconds))
    chunks = np.array_split(flows, steps)
    sent = {a.address: {"datagrams": 0, "flow_samples": 0, "discard_samples": 0, "counter_samples": 0}
            for a in agents}
    t0, next_counters = time.monotonic(), 0.0
    try:
        for step, chunk in enumerate(chunks):
            if stop is not None and stop.is_set():
                break
            for i, a in enumerate(agents):
                uptime = int((time.monotonic() - boot) * 1000)
                discards = a.discards
                samples = a.flow_samples(chunk[i::len(agents)], rng)
                sent[a.address]["discard_samples"] += a.discards - discards
                sent[a.address]["flow_samples"] += len(samples) - (a.discards - discards)
                if step * 1.0 >= next_counters:
                    counters = a.counter_samples()
                    sent[a.address]["counter_samples"] += len(counters)
                    samples = samples + counters
                for d in a.datagrams(samples, uptime):
                    s.sendto(d, target)
                    sent[a.address]["datagrams"] += 1
            if step * 1.0 >= next_counters:
                next_counters += counter_every_s
            time.sleep(max(0.0, t0 + (step + 1) * seconds / steps - time.monotonic()))
        for a in agents:  # the counters once more: they hold every sample sent
            counters = a.counter_samples()
            sent[a.address]["counter_samples"] += len(counters)
            for d in a.datagrams(counters, int((time.monotonic() - boot) * 1000)):
                s.sendto(d, target)
                sent[a.address]["datagrams"] += 1
    finally:
        s.close()
    return sent
