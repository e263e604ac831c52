"""NetFlow v5, v9 and IPFIX export datagrams packed in bulk from a FLOW_DTYPE array.

Records are built as big-endian numpy structured arrays (one `tobytes()` per router
and address family); only the per-datagram headers are packed in a Python loop.

Timestamps: v5 and v9 carry flow times as router uptime (ms); the header's
unix_secs minus sysUptime is the router's boot time, which we hold fixed, so
boot + First/Last equals the model's absolute times exactly. IPFIX carries
flowStart/EndMilliseconds directly.

Sequence numbers (what nfcapd checks): v5 counts flows before the packet, v9 counts
export packets (templates included), IPFIX counts data records (options data
not counted: nfcapd 1.7.1 counts flow records only).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .sampling import SamplingPlan, plan_from_rate

V9_TEMPLATE_V4, V9_TEMPLATE_V6, V9_OPTIONS = 256, 257, 258

# (information element id, length) in record order; same ids for v9 and IPFIX except times
_COMMON_HEAD = [(1, 8), (2, 8)]               # bytes, packets
_V4_ADDR = [(8, 4), (12, 4)]
_V6_ADDR = [(27, 16), (28, 16)]
_COMMON_TAIL = [(10, 4), (14, 4), (16, 4), (17, 4), (7, 2), (11, 2), (4, 1), (6, 1), (5, 1)]
# ICMP type*256+code: collectors take it from this element, not from the port fields
_ICMP_V4, _ICMP_V6_IPFIX = (32, 2), (139, 2)
_V9_TIMES = [(22, 4), (21, 4)]                # FIRST_SWITCHED, LAST_SWITCHED (uptime ms)
_IPFIX_TIMES = [(152, 8), (153, 8)]           # flowStart/EndMilliseconds (epoch ms)

_TAIL_DTYPE = [("in_if", ">u4"), ("out_if", ">u4"), ("src_as", ">u4"), ("dst_as", ">u4"),
               ("src_port", ">u2"), ("dst_port", ">u2"), ("proto", "u1"), ("tcp_flags", "u1"),
               ("tos", "u1"), ("icmp", ">u2")]


def _record_dtype(times: str, v6: bool) -> np.dtype:
    t = ">u4" if times == "uptime" else ">u8"
    addr = [("src", ">u8", (2,)), ("dst", ">u8", (2,))] if v6 else [("src", ">u4"), ("dst", ">u4")]
    return np.dtype([("bytes", ">u8"), ("packets", ">u8"), ("first", t), ("last", t)] + addr + _TAIL_DTYPE)


def template_fields(version: int, v6: bool) -> list[tuple[int, int]]:
    times = _V9_TIMES if version == 9 else _IPFIX_TIMES
    icmp = _ICMP_V6_IPFIX if (v6 and version == 10) else _ICMP_V4
    return _COMMON_HEAD + times + (_V6_ADDR if v6 else _V4_ADDR) + _COMMON_TAIL + [icmp]


V5_RECORD = np.dtype([("src", ">u4"), ("dst", ">u4"), ("nexthop", ">u4"), ("input", ">u2"),
                      ("output", ">u2"), ("packets", ">u4"), ("bytes", ">u4"), ("first", ">u4"),
                      ("last", ">u4"), ("src_port", ">u2"), ("dst_port", ">u2"), ("pad1", "u1"),
                      ("tcp_flags", "u1"), ("proto", "u1"), ("tos", "u1"), ("src_as", ">u2"),
                      ("dst_as", ">u2"), ("src_mask", "u1"), ("dst_mask", "u1"), ("pad2", ">u2")])
V5_MAX_RECORDS = 30


@dataclass
class Datagram:
    export_ms: int   # model time the router sends it
    flows: int       # data records of flows (0 for template-only packets)
    payload: bytes


def _fill_tail(rec, f):
    for name in ("in_if", "out_if", "src_as", "dst_as", "src_port", "dst_port", "proto", "tcp_flags", "tos"):
        rec[name] = f[name]
    rec["icmp"] = np.where((f["proto"] == 1) | (f["proto"] == 58), f["dst_port"], 0)


def uptime(t_ms, boot_ms):
    """Router uptime (ms) at model time t: 32 bits, wrapping every ~49.7 days; a flow
    that began before the router (re)booted is reported from its first millisecond up
    (uptime 0 in First and Last means "no time" to nfcapd 1.7.1)."""
    return np.maximum(np.asarray(t_ms, np.int64) - boot_ms, 1) % (1 << 32)


def pack_records(f: np.ndarray, version: int, v6: bool, boot_ms) -> np.ndarray:
    """Flow rows -> big-endian wire records (v9 or IPFIX, one address family)."""
    rec = np.zeros(len(f), _record_dtype("uptime" if version == 9 else "epoch", v6))
    rec["bytes"], rec["packets"] = f["bytes"], f["packets"]
    if version == 9:
        rec["first"], rec["last"] = uptime(f["t_start"], boot_ms), uptime(f["t_end"], boot_ms)
    else:
        rec["first"], rec["last"] = f["t_start"], f["t_end"]
    if v6:
        rec["src"], rec["dst"] = f["src6"], f["dst6"]
    else:
        rec["src"], rec["dst"] = f["src4"], f["dst4"]
    _fill_tail(rec, f)
    return rec


def _append_fields(rec: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """Records with extra trailing fields (a sampler id, a rate), still packed."""
    out = np.zeros(len(rec), np.dtype(rec.dtype.descr + extra.dtype.descr))
    for name in rec.dtype.names:
        out[name] = rec[name]
    for name in extra.dtype.names:
        out[name] = extra[name]
    return out


def _chunks(n: int, per: int) -> list[tuple[int, int]]:
    return [(i, min(i + per, n)) for i in range(0, n, per)]


def _set(set_id: int, body: bytes) -> bytes:
    pad = (-(len(body) + 4)) % 4
    return struct.pack(">HH", set_id, len(body) + 4 + pad) + body + b"\0" * pad


class Exporter:
    """One router's export process: its boot time, sequence counters, templates."""

    def __init__(self, version: int, domain_id: int, boot_ms: int, sampling_rate: int = 1,
                 address: str = "127.0.0.1", max_payload: int = 1464, template_every_s: int = 60,
                 plan: SamplingPlan | None = None, reboot_at_ms: int | None = None, swap_every: int = 0,
                 vlan_fields: tuple = (), record3: np.ndarray | None = None):
        if version not in (5, 9, 10):
            raise ValueError(f"unsupported NetFlow version {version}")
        self.version, self.domain_id, self.boot_ms = version, domain_id, boot_ms
        self.sampling_rate, self.address = sampling_rate, address
        self.vlan_fields = tuple(vlan_fields)  # ((ie, 2), (ie, 2)): ingress, egress VLAN (v9/IPFIX)
        # revision-3 values per flow (record3.draw, aligned with datagrams()' flows): exported
        # after the VLANs as record3.V4_FIELDS / V6_FIELDS; None: not exported
        self.record3 = record3
        self.max_payload, self.template_every_ms = max_payload, template_every_s * 1000
        self.sequence = 0
        self.plan = plan if plan is not None else plan_from_rate(version, sampling_rate)
        # v9 timestamp faults: a reboot (uptime restarts at reboot_at_ms) and a broken
        # router that swaps First and Last in every swap_every-th record
        self.reboot_at_ms, self.swap_every = reboot_at_ms, swap_every
        self.flow_boot = np.zeros(0, np.int64)      # per flow: the boot its uptimes count from
        self.flow_swapped = np.zeros(0, bool)       # per flow: First/Last swapped on the wire
        if self.plan is not None and self.plan.version != version:
            raise ValueError(f"sampling form {self.plan.form} cannot be exported as NetFlow v{version}")
        # after datagrams(): per flow (input order) its sampler index and the rate in force
        # when it was exported (1 when unsampled): the truth a collector must reproduce
        self.flow_sampler = np.zeros(0, np.int64)
        self.flow_rates = np.zeros(0, np.int64)

    # --- templates and sampling announcement ---------------------------------------
    def _templates(self) -> bytes:
        body = b""
        extra = (list(self.plan.data_fields()) if self.plan else []) + list(self.vlan_fields)
        for tid, v6 in ((V9_TEMPLATE_V4, False), (V9_TEMPLATE_V6, True)):
            fields = template_fields(9 if self.version == 9 else 10, v6) + extra + self._record3_fields(v6)
            body += struct.pack(">HH", tid, len(fields)) + b"".join(struct.pack(">HH", *f) for f in fields)
        return _set(0 if self.version == 9 else 2, body)

    def _options(self, export_ms: int) -> tuple[bytes, int]:
        """Options template + data announcing the sampling in force (sampling.py's forms)."""
        if self.plan is None:
            return b"", 0
        return self.plan.options(self.domain_id, export_ms, 1 if self.version == 9 else 3)

    def _header(self, export_ms: int, count: int, length: int) -> bytes:
        secs = -(-export_ms // 1000)  # whole seconds, rounded up: never before the flow ended
        if self.version == 9:
            up = int(uptime(secs * 1000, self.boot_at(export_ms)))
            h = struct.pack(">HHIIII", 9, count, up, secs, self.sequence, self.domain_id)
            self.sequence = (self.sequence + 1) & 0xFFFFFFFF
            return h
        return struct.pack(">HHIII", 10, 16 + length, secs, self.sequence, self.domain_id)

    def template_datagram(self, export_ms: int) -> Datagram:
        body = self._templates()
        count = 2
        opts, n = self._options(export_ms)
        body += opts
        count += n
        # nfcapd 1.7.1 counts only flow data records in the IPFIX sequence (not the
        # options data record, unlike RFC 7011 reads); we follow it for 0 failures.
        return Datagram(export_ms, 0, self._header(export_ms, count, len(body)) + body)

    def boot_at(self, export_ms):
        """The boot time in force when a datagram leaves (scalar or array)."""
        if self.reboot_at_ms is None:
            return self.boot_ms if np.isscalar(export_ms) else np.full(len(export_ms), self.boot_ms, np.int64)
        return np.where(np.asarray(export_ms) >= self.reboot_at_ms, self.reboot_at_ms, self.boot_ms)

    def _record3_fields(self, v6: bool) -> list:
        if self.record3 is None:
            return []
        from . import record3  # noqa: PLC0415  (start-up: only revision-3 exports need it)

        return list(record3.V6_FIELDS if v6 else record3.V4_FIELDS)

    def _extra_size(self) -> int:
        return (sum(n for _, n in self.plan.data_fields()) if self.plan else 0) + sum(n for _, n in self.vlan_fields)

    # --- data ----------------------------------------------------------------------
    def datagrams(self, f: np.ndarray) -> list[Datagram]:
        """All datagrams for this router's flows (sorted by t_end), templates first and
        again every template_every_s of model time, in sending order."""
        if self.version == 5:
            return self._v5(f)
        groups = []  # (export_ms, fam, a, b) over per-family record arrays
        packed = {}
        self.flow_sampler = self.plan.assign(f) if self.plan else np.zeros(len(f), np.int64)
        self.flow_rates = np.ones(len(f), np.int64)
        self.flow_boot = np.full(len(f), self.boot_ms, np.int64)
        self.flow_swapped = np.zeros(len(f), bool)
        for v6 in (False, True):
            which = np.flatnonzero(f["ipv6"] == v6)
            sel = f[which]
            if not len(sel):
                continue
            ends = sel["t_end"]
            per = max(1, (self.max_payload - 20 - 4) // (_record_dtype("uptime" if self.version == 9 else "epoch", v6).itemsize
                                                         + self._extra_size()
                                                         + sum(n for _, n in self._record3_fields(v6))))
            last = np.minimum((np.arange(len(sel)) // per + 1) * per, len(sel)) - 1  # each record's datagram
            boot = self.boot_at(ends[last])
            self.flow_boot[which] = boot
            rec = pack_records(sel, 9 if self.version == 9 else 10, v6, boot)
            if self.swap_every and self.version == 9:
                swap = np.arange(len(sel)) % self.swap_every == self.swap_every - 1
                rec["first"][swap], rec["last"][swap] = rec["last"][swap], rec["first"][swap].copy()
                self.flow_swapped[which] = swap & (sel["t_end"] > sel["t_start"])
            if self.plan is not None:  # a record's rate is the one in force when its datagram leaves
                rates = self.plan.flow_rates(self.flow_sampler[which], ends[last])
                self.flow_rates[which] = rates
                rec = _append_fields(rec, self.plan.data_values(self.flow_sampler[which], rates))
            if self.vlan_fields:
                vlans = np.zeros(len(sel), [("vlan_in", ">u2"), ("vlan_out", ">u2")])
                vlans["vlan_in"], vlans["vlan_out"] = sel["src_vlan"], sel["dst_vlan"]
                rec = _append_fields(rec, vlans)
            if self.record3 is not None:
                from . import record3  # noqa: PLC0415  (start-up: only revision-3 exports need it)

                rec = _append_fields(rec, record3.wire_values(self.record3[which], v6))
            packed[v6] = (rec.tobytes(), rec.dtype.itemsize)
            groups += [(int(ends[b - 1]), v6, a, b) for a, b in _chunks(len(sel), per)]
        groups.sort(key=lambda g: g[0])
        out: list[Datagram] = []
        next_template = None
        change = self.plan.change_at_ms if self.plan is not None else None
        for export_ms, v6, a, b in groups:
            if next_template is None or export_ms >= next_template or (change is not None and export_ms >= change):
                out.append(self.template_datagram(export_ms))  # with the options in force now
                next_template = export_ms + self.template_every_ms
                if change is not None and export_ms >= change:
                    change = None
            raw, size = packed[v6]
            body = _set(V9_TEMPLATE_V6 if v6 else V9_TEMPLATE_V4, raw[a * size:b * size])
            hdr = self._header(export_ms, b - a, len(body))
            if self.version == 10:
                self.sequence = (self.sequence + (b - a)) & 0xFFFFFFFF
            out.append(Datagram(export_ms, b - a, hdr + body))
        return out

    def _v5(self, f: np.ndarray) -> list[Datagram]:
        if f["ipv6"].any():
            raise ValueError("NetFlow v5 cannot carry IPv6 flows")
        rec = np.zeros(len(f), V5_RECORD)
        rec["src"], rec["dst"] = f["src4"], f["dst4"]
        rec["input"], rec["output"] = f["in_if"], f["out_if"]
        if (f["bytes"] > 0xFFFFFFFF).any() or (f["packets"] > 0xFFFFFFFF).any():
            raise ValueError("NetFlow v5 counters are 32-bit: a flow exceeds 4 GiB")
        rec["packets"], rec["bytes"] = f["packets"], f["bytes"]
        rec["first"], rec["last"] = uptime(f["t_start"], self.boot_ms), uptime(f["t_end"], self.boot_ms)
        for name in ("src_port", "dst_port", "tcp_flags", "proto", "tos", "src_as", "dst_as"):
            rec[name] = f[name]
        raw = rec.tobytes()
        out = []
        self.flow_sampler = np.zeros(len(f), np.int64)
        self.flow_rates = np.ones(len(f), np.int64)
        for a, b in _chunks(len(f), V5_MAX_RECORDS):
            export_ms = int(f["t_end"][b - 1])
            rate = self.plan.rates_at(export_ms)[0] if self.plan else 1
            self.flow_rates[a:b] = rate
            sampling = (0x4000 | rate) if rate > 1 else 0  # mode 01: 1 in N
            secs = -(-export_ms // 1000)
            hdr = struct.pack(">HHIIIIBBH", 5, b - a, int(uptime(secs * 1000, self.boot_ms)), secs, 0,
                              self.sequence, 0, self.domain_id & 0xFF, sampling)
            self.sequence = (self.sequence + (b - a)) & 0xFFFFFFFF
            out.append(Datagram(export_ms, b - a, hdr + raw[a * 48:b * 48]))
        return out
