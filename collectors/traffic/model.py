"""The border traffic model: every parameter in a dataclass with defaults, flows drawn
in bulk with numpy so a million flows cost about a second.

A flow array (FLOW_DTYPE) holds one row per exported flow record, in model time
(ms since the epoch, UTC). Sizes are what goes on the wire: for a sampled router the
record describes the sampled packets, and the collector scales them by the rate.
"""
from __future__ import annotations

import ipaddress
import math
import sys
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.special import ndtr, ndtri

FLOW_DTYPE = np.dtype([
    ("t_start", "i8"), ("t_end", "i8"),          # ms since epoch, UTC
    ("router", "u1"), ("ipv6", "?"),
    ("src4", "u4"), ("dst4", "u4"),
    ("src6", "u8", (2,)), ("dst6", "u8", (2,)),  # (high, low) 64-bit halves
    ("src_port", "u2"), ("dst_port", "u2"),
    ("proto", "u1"), ("tcp_flags", "u1"), ("tos", "u1"),
    ("packets", "u8"), ("bytes", "u8"),
    ("in_if", "u4"), ("out_if", "u4"),
    ("src_as", "u4"), ("dst_as", "u4"),
    ("klass", "u1"),      # index into CLASSES
    ("app", "u1"),        # index into ModelParams.apps
    ("inbound", "?"),     # remote -> local
    ("event", "u2"),      # 0 = background, else 1 + index into Events.all()
    ("behaviour", "u1"),  # index into BEHAVIOURS: the EVL class the flow was drawn as
    ("src_vlan", "u2"), ("dst_vlan", "u2"),      # ingress / egress 802.1Q VLAN (0 = none)
])

CLASSES = ("tcp_in", "tcp_out", "udp", "icmp", "event")
# EVL tele-immersion behaviour classes (issue 26; jobs/behaviour_classes.py classifies them)
BEHAVIOURS = ("avatar", "audio", "video", "realtime_state", "state_update", "small_bulk", "large_bulk",
              "streaming_bulk", "other")
SMALL_BULK_BYTES, LARGE_BULK_BYTES = 1e6, 1e8  # a background flow this big is a transfer (small / large bulk)
TCP, UDP, ICMP = 6, 17, 1
# TCP flag combinations: a complete exchange, a reset one, and a bare SYN (scans)
FLAGS_DONE, FLAGS_RESET, FLAGS_SYN = 0x1B, 0x16, 0x02


@dataclass
class SizeClass:
    """Flow size in bytes: with probability 1-tail_fraction a lognormal(mu, sigma)
    truncated to [min_bytes, threshold); else a Pareto tail x_min=threshold, alpha,
    truncated at max_bytes (so rare draws stay physical)."""
    mu: float
    sigma: float
    threshold: float
    alpha: float
    tail_fraction: float
    min_bytes: float = 40.0
    max_bytes: float = 2e10

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        tail = rng.random(n) < self.tail_fraction
        out = np.empty(n)
        nb = int((~tail).sum())
        lo = ndtr((math.log(self.min_bytes) - self.mu) / self.sigma)
        hi = ndtr((math.log(self.threshold) - self.mu) / self.sigma)
        out[~tail] = np.exp(self.mu + self.sigma * ndtri(rng.uniform(lo, hi, nb)))
        nt = n - nb
        umin = (self.max_bytes / self.threshold) ** (-self.alpha)
        out[tail] = self.threshold * rng.uniform(umin, 1.0, nt) ** (-1.0 / self.alpha)
        return np.maximum(np.floor(out), self.min_bytes)


@dataclass
class App:
    name: str
    proto: int
    port_lo: int
    port_hi: int
    weight: float
    tos: int = 0


def default_apps() -> list[App]:
    return [
        App("https", TCP, 443, 443, 0.36), App("http", TCP, 80, 80, 0.10),
        App("dns", UDP, 53, 53, 0.13), App("ssh/scp", TCP, 22, 22, 0.03),
        App("smtp", TCP, 25, 25, 0.02), App("ntp", UDP, 123, 123, 0.03),
        App("snmp", UDP, 161, 161, 0.02), App("afs", UDP, 7000, 7009, 0.03),
        App("rtmp", TCP, 1935, 1935, 0.02, tos=0x88), App("rtsp", TCP, 554, 554, 0.01, tos=0x88),
        App("bbftp", TCP, 5021, 5021, 0.005, tos=0x20),
        App("gridftp", TCP, 2811, 2811, 0.005, tos=0x20),
        App("gridftp-data", TCP, 50000, 50999, 0.01, tos=0x20),
        App("iperf3", TCP, 5201, 5201, 0.002),
        App("icmp", ICMP, 0, 0, 0.03),
        App("other-tcp", TCP, 1024, 65535, 0.10), App("other-udp", UDP, 1024, 65535, 0.068),
        # tele-immersion sessions only (weight 0: never drawn for the background)
        *[App(f"ti-{b}", TCP if b in ("state_update", "small_bulk") else UDP, 48001 + i, 48001 + i, 0.0)
          for i, b in enumerate(("avatar", "audio", "video", "realtime_state", "state_update", "small_bulk",
                                 "streaming_bulk"))],
    ]


@dataclass
class Router:
    name: str
    address: str              # export source address (127.0.0.x: all of 127/8 is loopback)
    weight: float             # share of background flows
    sampling_rate: int = 1    # 1:N packet sampling, announced by option template
    sampling: object = None   # a traffic.sampling.SamplingPlan: form, samplers, rate change
    boot_ms: int | None = None        # the router's boot (default: an hour before the run)
    reboot_at_ms: int | None = None   # v9/v5 uptime restarts here
    swap_times_every: int = 0         # v9: every k-th record has First and Last swapped (a broken router)
    uplink_if: int = 1
    uplink_bps: float = 10e9
    lan_ifs: tuple = (10, 11, 12, 13)
    lan_bps: float = 10e9
    uplink_vlan: int = 100            # 802.1Q VLAN of the uplink ...
    lan_vlans: tuple = (210, 211, 212, 213)  # ... and of each LAN interface (same order as lan_ifs)
    vlan_ie: str = "vlan"             # how v9/IPFIX carry them: "vlan" (58/59), "dot1q" (IPFIX 243/254), "" (not at all)
    record3: bool = False             # export flow record revision 3's elements too (record3.py; v9/IPFIX)


def default_routers() -> list[Router]:
    return [Router("border-a", "127.0.0.2", 0.5),
            Router("border-b", "127.0.0.3", 0.35, uplink_vlan=101, lan_vlans=(220, 221, 222, 223)),
            Router("border-c", "127.0.0.4", 0.15, sampling_rate=10, uplink_vlan=102, lan_vlans=(230, 231, 232, 233),
                   vlan_ie="dot1q")]


# Information elements per Router.vlan_ie. nfcapd 1.7.1 stores SRC_VLAN/DST_VLAN (58/59) of
# v9 and vlanId/postVlanId (58/59) of IPFIX as the flow's VLANs, and dot1qVlanId/
# postDot1qVlanId (243/254) of v9 too, but drops 243/254 of IPFIX: measured, pinned by
# tests/collectors/test_vlan.py. landed_vlans() is what reaches the lake.
VLAN_IES = {"vlan": ((58, 2), (59, 2)), "dot1q": ((243, 2), (254, 2)), "": ()}
NFCAPD_KEEPS_VLAN_IES = {(9, "vlan"), (10, "vlan"), (9, "dot1q")}  # (NetFlow version, Router.vlan_ie)


def landed_vlans(f: np.ndarray, params, version: int) -> tuple[np.ndarray, np.ndarray]:
    """(src_vlan, dst_vlan) as the lake holds them after nfcapd 1.7.1 (v5 carries none)."""
    keeps = np.array([(version, r.vlan_ie) in NFCAPD_KEEPS_VLAN_IES for r in params.routers])[f["router"]]
    return np.where(keeps, f["src_vlan"], 0), np.where(keeps, f["dst_vlan"], 0)


@dataclass
class Bulk:
    """A large long transfer, cut into records every `record_seconds` per stream as a
    router's active timeout does. Times are hours of the model day (see place())."""
    name: str
    app: str
    start_hour: float
    minutes: float
    rate_bps: float
    streams: int
    outbound: bool
    target: int               # index into PingModel.targets (the remote end)


def default_bulk() -> list[Bulk]:
    return [
        Bulk("nightly-bbftp-replication", "bbftp", 2.0, 90, 45e6, 4, True, 0),
        Bulk("nightly-gridftp-replication", "gridftp-data", 3.75, 60, 42e6, 8, False, 1),
        Bulk("iperf3-test-am", "iperf3", 11.0, 15, 40e6, 1, True, 2),
        Bulk("iperf3-test-pm", "iperf3", 16.5, 15, 40e6, 1, False, 2),
    ]


@dataclass
class Stream:
    """One flow kind of a tele-immersion session, both ways between the site and every
    peer: pps packets/s of packet_bytes (each record +-pps_jitter, +-size_jitter), cut
    into records at the routers' active timeout; for `minutes` (None: the whole session)."""
    behaviour: str
    pps: float
    packet_bytes: float
    size_jitter: float = 0.05
    pps_jitter: float = 0.02
    minutes: float | None = None


def default_streams() -> list:
    # EVL CAVERN/QUANTA-like flows (Leigh et al.): tracker/avatar updates at the tracker's
    # 30 Hz in ~110-byte packets; audio 20 ms frames (G.711 160 B + RTP/UDP/IP 40 B);
    # video ~4 Mbit/s in 1200-byte RTP packets; shared simulation state at 60 Hz; sparse
    # event/database updates on a persistent TCP connection; a paced UDP (RBUDP-like)
    # dataset stream at 100 Mbit/s for a few minutes.
    return [Stream("avatar", 30, 110), Stream("audio", 50, 200), Stream("video", 417, 1200),
            Stream("realtime_state", 60, 450), Stream("state_update", 1.0, 180, size_jitter=0.2, pps_jitter=0.2),
            Stream("streaming_bulk", 8333, 1500, size_jitter=0.0, minutes=5)]


@dataclass
class TeleSession:
    """A tele-immersion session between this site and `peers` remote sites; each peer
    first fetches the shared scene (`scene_mb`, one TCP transfer: small bulk).

    The collaborating sites are the ones the operator monitors: peer k is a host in the
    network of RTT test target peer_targets[k % len] (an index into PingModel.targets;
    empty: the targets in turn), that target's address cut to `peer_prefix` bits, so its
    flows travel the tested path (jobs/behaviour_needs.py matches them the same way)."""
    name: str
    start_hour: float
    minutes: float
    peers: int
    streams: list = field(default_factory=default_streams)
    scene_mb: float = 40.0
    scene_rate_bps: float = 50e6
    peer_targets: tuple = ()
    peer_prefix: int = 24


@dataclass
class Scanner:
    name: str
    start_hour: float
    minutes: float
    share: float              # fraction of all flows
    kind: str = "tcp-syn"     # tcp-syn | icmp-sweep


@dataclass
class FanIn:
    name: str
    start_hour: float
    minutes: float
    share: float
    sources: int
    port: int = 53
    proto: int = UDP


@dataclass
class Quiet:
    """A router that exports nothing for a while (link down, process crashed): its flows in
    the window are dropped, and the truth lists the window (the silent-exporter detector's
    truth). Times as Bulk's."""
    name: str
    router: int               # index into ModelParams.routers
    start_hour: float
    minutes: float


@dataclass
class PingTarget:
    address: str
    base_rtt_ms: float
    bottleneck_bps: float     # capacity of the path's bottleneck link


@dataclass
class PingModel:
    """M/M/1/K at each path's bottleneck: utilisation rho = background (diurnal) +
    bulk rate / capacity; mean extra delay S*rho/(1-rho) with S = packet_bytes*8/C;
    loss = M/M/1/K blocking probability (1-rho) rho^K / (1-rho^(K+1))."""
    targets: list = field(default_factory=lambda: [
        PingTarget("192.88.7.20", 152.0, 50e6), PingTarget("134.79.18.40", 87.0, 50e6),
        PingTarget("131.225.3.9", 11.5, 50e6), PingTarget("193.62.193.5", 23.0, 50e6)])
    interval_minutes: float = 5.0
    count: int = 10
    background_util: float = 0.25   # at the diurnal peak; scaled by the load curve
    packet_bytes: int = 1500
    buffer_packets: int = 40
    jitter_ms: float = 0.05         # std of the per-packet processing jitter
    rho_max: float = 0.995
    # iperf3 -J throughput tests to every target (10 s, one TCP stream, from probe_address):
    # the stream gets a share `tcp_efficiency` (+-0.03) of the capacity left, C * (1 - rho).
    throughput_interval_minutes: float = 60.0
    throughput_seconds: int = 10
    tcp_efficiency: float = 0.9
    probe_address: str = "10.0.0.10"
    # A latency-vs-message-size sweep to every target, as to mirrors of the same data (CSV,
    # the path_models job): one-way latency = size*8 / (C * (1 - rho)) + base RTT / 2 + the
    # mean queueing delay, times 1 +- sweep_noise; each size sweep_repeats times, at sweep_hour.
    # Up to 1 MB: larger messages' noise would drown the short paths' latency in the fit.
    sweep_sizes: tuple = (64, 1024, 16384, 65536, 262144, 1048576)
    sweep_repeats: int = 3
    sweep_hour: int = 3
    sweep_noise: float = 0.003


@dataclass
class ModelParams:
    site_as: int = 64496
    local_prefixes: list = field(default_factory=lambda: ["10.0.0.0/8", "192.0.2.0/24",
                                                          "198.51.100.0/24", "2001:db8::/32"])
    ipv6_fraction: float = 0.15
    inbound_fraction: float = 0.6
    remote_hosts: int = 50000
    local_hosts: int = 5000
    zipf_s_remote: float = 1.1      # popularity of host rank k ~ 1/k^s
    zipf_s_local: float = 1.2
    diurnal_peak_hour: float = 14.0
    diurnal_amplitude: float = 0.6  # load(t) = 1 + A cos(2 pi (h - peak)/24)
    flow_rate_bps_median: float = 5e6  # per-flow throughput (lognormal) -> duration
    flow_rate_sigma: float = 1.0
    active_timeout_s: float = 300.0
    bulk_record_seconds: float = 60.0
    reset_fraction: float = 0.05
    sizes: dict = field(default_factory=lambda: {
        "tcp_in": SizeClass(mu=math.log(12000), sigma=1.9, threshold=1e6, alpha=1.25, tail_fraction=0.012),
        "tcp_out": SizeClass(mu=math.log(4000), sigma=1.7, threshold=5e5, alpha=1.45, tail_fraction=0.008),
        "udp": SizeClass(mu=math.log(250), sigma=1.1, threshold=2e4, alpha=1.7, tail_fraction=0.004,
                         min_bytes=28.0),
    })
    apps: list = field(default_factory=default_apps)
    routers: list = field(default_factory=default_routers)
    bulk: list = field(default_factory=default_bulk)
    scanners: list = field(default_factory=lambda: [
        Scanner("scanner-tcp-1", 4.5, 30, 0.01), Scanner("scanner-tcp-2", 13.0, 20, 0.008),
        Scanner("scanner-icmp", 20.0, 15, 0.004, kind="icmp-sweep")])
    fanin: list = field(default_factory=lambda: [FanIn("fanin-dns-burst", 9.25, 5, 0.01, 3000)])
    teleimmersion: list = field(default_factory=lambda: [
        # the morning with the near sites (FNAL, EMBL-EBI), the afternoon across the Pacific and the US
        TeleSession("tele-immersion-am", 9.0, 45, 2, peer_targets=(2, 3)),
        TeleSession("tele-immersion-pm", 15.0, 90, 3, peer_targets=(0, 1, 2))])
    quiet: list = field(default_factory=list)  # Quiet periods (none by default)
    attacks: list = field(default_factory=list)  # volumetric attacks (collectors/traffic/attacks.py; none by default)
    ping: PingModel = field(default_factory=PingModel)

    def as_dict(self) -> dict:
        return asdict(self)

    def window(self, start_ms: int, duration_ms: int, start_hour: float, minutes: float) -> tuple[int, int]:
        """Place an event given in hours of a model day into the run's window: a full day
        keeps the clock time; a shorter run scales the day into its window."""
        scale = min(1.0, duration_ms / 86_400_000)
        t0 = start_ms + int(start_hour / 24.0 * min(duration_ms, 86_400_000))
        t1 = t0 + max(1000, int(minutes * 60_000 * scale))
        return t0, min(t1, start_ms + duration_ms)


# --- address pools ----------------------------------------------------------------

def _v4_nets(prefixes) -> list[ipaddress.IPv4Network]:
    return [n for n in map(ipaddress.ip_network, prefixes) if n.version == 4]


def _v6_nets(prefixes) -> list[ipaddress.IPv6Network]:
    return [n for n in map(ipaddress.ip_network, prefixes) if n.version == 6]


def in_v4_prefixes(addr: np.ndarray, prefixes) -> np.ndarray:
    hit = np.zeros(addr.shape, bool)
    for net in _v4_nets(prefixes):
        mask = (0xFFFFFFFF << (32 - net.prefixlen)) & 0xFFFFFFFF
        hit |= (addr & np.uint32(mask)) == np.uint32(int(net.network_address))
    return hit


# first octets that are neither private, loopback, multicast nor documentation space
_PUBLIC_FIRST = np.array([o for o in range(1, 224) if o not in (10, 100, 127, 169, 172, 192, 198, 203)],
                         dtype=np.uint32)


def remote_v4(rng, n, prefixes) -> np.ndarray:
    out = (_PUBLIC_FIRST[rng.integers(0, len(_PUBLIC_FIRST), n)] << np.uint32(24)) | \
          rng.integers(1, 1 << 24, n, dtype=np.uint32)
    bad = in_v4_prefixes(out, prefixes)
    while bad.any():  # only when configured local prefixes overlap the public pool
        out[bad] = (_PUBLIC_FIRST[rng.integers(0, len(_PUBLIC_FIRST), bad.sum())] << np.uint32(24)) | \
            rng.integers(1, 1 << 24, bad.sum(), dtype=np.uint32)
        bad = in_v4_prefixes(out, prefixes)
    return out


def remote_v6(rng, n) -> np.ndarray:
    hi = (np.uint64(0x2A00) << np.uint64(48)) | rng.integers(0, 1 << 48, n, dtype=np.uint64)
    lo = rng.integers(1, 1 << 62, n, dtype=np.uint64)
    return np.stack([hi, lo], axis=1)


def local_v4(rng, n, prefixes) -> np.ndarray:
    nets = _v4_nets(prefixes)
    if not nets:
        raise ValueError("site.local_prefixes has no IPv4 prefix")
    sizes = np.array([min(n_.num_addresses, 1 << 16) for n_ in nets], float)
    which = rng.choice(len(nets), n, p=sizes / sizes.sum())
    base = np.array([int(n_.network_address) for n_ in nets], np.uint32)[which]
    span = np.array([max(1, min(n_.num_addresses, 1 << 16) - 2) for n_ in nets], np.uint32)[which]
    return base + np.uint32(1) + (rng.integers(0, 1 << 31, n, dtype=np.uint32) % span)


def local_v6(rng, n, prefixes) -> np.ndarray:
    nets = _v6_nets(prefixes)
    if not nets:
        raise ValueError("site.local_prefixes has no IPv6 prefix (set ipv6_fraction=0)")
    net = nets[0]
    hi = np.uint64(int(net.network_address) >> 64)
    free_hi_bits = max(0, 64 - net.prefixlen)
    sub = rng.integers(0, 1 << min(free_hi_bits, 16), n, dtype=np.uint64) if free_hi_bits else 0
    return np.stack([hi | sub, rng.integers(1, 1 << 62, n, dtype=np.uint64)], axis=1)


def remote_as_v4(addr: np.ndarray) -> np.ndarray:
    """A stable origin AS per /16, so every host keeps its AS across flows."""
    return (1000 + ((addr >> np.uint32(16)).astype(np.uint64) * 2654435761 % 60000)).astype(np.uint32)


def remote_as_v6(hi: np.ndarray) -> np.ndarray:
    return (1000 + ((hi >> np.uint64(32)) * np.uint64(2654435761) % np.uint64(60000))).astype(np.uint32)


def zipf_ranks(rng, n_items: int, s: float, n: int) -> np.ndarray:
    p = 1.0 / np.arange(1, n_items + 1) ** s
    cdf = np.cumsum(p / p.sum())
    return np.minimum(np.searchsorted(cdf, rng.random(n)), n_items - 1)


def diurnal_weight(hours: np.ndarray, params: ModelParams) -> np.ndarray:
    return 1.0 + params.diurnal_amplitude * np.cos(2 * np.pi * (hours - params.diurnal_peak_hour) / 24.0)


def diurnal_times(rng, n, start_ms, duration_ms, params) -> np.ndarray:
    """Start times with density proportional to the load curve (inverse CDF on 1 s bins)."""
    secs = max(1, duration_ms // 1000)
    edges = start_ms + np.arange(secs) * 1000
    w = diurnal_weight(((edges // 1000) % 86400) / 3600.0, params)
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    idx = np.searchsorted(cdf, rng.random(n))
    return edges[idx] + rng.integers(0, min(1000, duration_ms), n)


# --- flows ------------------------------------------------------------------------

@dataclass
class Events:
    bulk: list
    scanners: list
    fanin: list

    def all(self) -> list[dict]:
        return self.bulk + self.scanners + self.fanin


def _packets_for(nbytes: np.ndarray, rng) -> np.ndarray:
    """Mean packet size grows with flow size (small flows are handshakes and queries)."""
    mean = 60.0 + 1380.0 * (1.0 - np.exp(-nbytes / 30000.0))
    size = mean * rng.uniform(0.85, 1.15, nbytes.shape)
    return np.maximum(1, np.round(nbytes / np.clip(size, 40, 1500))).astype(np.uint64)


def _fill_endpoints(f, rng, params, local_idx, remote_idx, pools):
    """Set src/dst addresses and ASes from host indices according to direction/family."""
    inbound, v6 = f["inbound"], f["ipv6"]
    l4, r4, l6, r6 = pools["l4"][local_idx], pools["r4"][remote_idx], pools["l6"][local_idx], pools["r6"][remote_idx]
    f["src4"] = np.where(inbound, r4, l4)
    f["dst4"] = np.where(inbound, l4, r4)
    f["src6"] = np.where(inbound[:, None], r6, l6)
    f["dst6"] = np.where(inbound[:, None], l6, r6)
    ras = np.where(v6, remote_as_v6(r6[:, 0]), remote_as_v4(r4))
    f["src_as"] = np.where(inbound, ras, params.site_as)
    f["dst_as"] = np.where(inbound, params.site_as, ras)
    f["src4"][v6] = 0
    f["dst4"][v6] = 0
    f["src6"][~v6] = 0
    f["dst6"][~v6] = 0


def _interfaces(f, rng, params):
    for i, r in enumerate(params.routers):
        sel = f["router"] == i
        k = rng.integers(0, len(r.lan_ifs), sel.sum())
        lan = np.array(r.lan_ifs, np.uint32)[k]
        inb = f["inbound"][sel]
        f["in_if"][sel] = np.where(inb, r.uplink_if, lan)
        f["out_if"][sel] = np.where(inb, lan, r.uplink_if)
        vlan = np.array(r.lan_vlans, np.uint16)[k % len(r.lan_vlans)]
        f["src_vlan"][sel] = np.where(inb, r.uplink_vlan, vlan)
        f["dst_vlan"][sel] = np.where(inb, vlan, r.uplink_vlan)


def make_pools(rng, params, allow_v6: bool) -> dict:
    return {
        "r4": remote_v4(rng, params.remote_hosts, params.local_prefixes),
        "l4": local_v4(rng, params.local_hosts, params.local_prefixes),
        "r6": remote_v6(rng, params.remote_hosts),
        "l6": local_v6(rng, params.local_hosts, params.local_prefixes) if allow_v6
        else np.zeros((params.local_hosts, 2), np.uint64),
    }


def background(rng, n, start_ms, duration_ms, params, pools, allow_v6=True) -> np.ndarray:
    f = np.zeros(n, FLOW_DTYPE)
    if n == 0:
        return f
    w = np.array([r.weight for r in params.routers], float)
    f["router"] = rng.choice(len(w), n, p=w / w.sum())
    f["ipv6"] = rng.random(n) < (params.ipv6_fraction if allow_v6 else 0.0)
    f["inbound"] = rng.random(n) < params.inbound_fraction
    aw = np.array([a.weight for a in params.apps], float)
    app = rng.choice(len(aw), n, p=aw / aw.sum())
    f["app"] = app
    proto = np.array([a.proto for a in params.apps], np.uint8)[app]
    f["proto"] = proto
    lo = np.array([a.port_lo for a in params.apps], np.int64)[app]
    hi = np.array([a.port_hi for a in params.apps], np.int64)[app]
    service = lo + (rng.random(n) * (hi - lo + 1)).astype(np.int64)
    ephemeral = rng.integers(32768, 61000, n)
    # the service port sits on the server side: local servers for most inbound flows
    server_is_dst = rng.random(n) < 0.5
    f["src_port"] = np.where(server_is_dst, ephemeral, service)
    f["dst_port"] = np.where(server_is_dst, service, ephemeral)
    f["tos"] = np.array([a.tos for a in params.apps], np.uint8)[app]
    local_idx = zipf_ranks(rng, params.local_hosts, params.zipf_s_local, n)
    remote_idx = zipf_ranks(rng, params.remote_hosts, params.zipf_s_remote, n)
    _fill_endpoints(f, rng, params, local_idx, remote_idx, pools)

    klass = np.where(proto == UDP, 2, np.where(proto == ICMP, 3, np.where(f["inbound"], 0, 1)))
    f["klass"] = klass
    nbytes = np.zeros(n)
    for k, name in enumerate(("tcp_in", "tcp_out", "udp")):
        sel = klass == k
        nbytes[sel] = params.sizes[name].sample(rng, int(sel.sum()))
    icmp = klass == 3
    n_icmp_pk = rng.integers(1, 11, int(icmp.sum()))
    nbytes[icmp] = 84 * n_icmp_pk
    f["bytes"] = nbytes.astype(np.uint64)
    # the flow's class is what it moved: a sampled router's record stands for rate x its bytes
    real = nbytes * np.array([max(1, r.sampling_rate) for r in params.routers], float)[f["router"]]
    f["behaviour"] = np.where(real >= LARGE_BULK_BYTES, BEHAVIOURS.index("large_bulk"),
                              np.where(real >= SMALL_BULK_BYTES, BEHAVIOURS.index("small_bulk"),
                                       BEHAVIOURS.index("other")))
    pk = _packets_for(nbytes, rng)
    pk[icmp] = n_icmp_pk
    f["packets"] = pk
    # ICMP: nfdump shows type*256+code in the destination port; echo request / reply
    f["dst_port"][icmp] = np.where(rng.random(int(icmp.sum())) < 0.5, 8 * 256, 0)
    f["src_port"][icmp] = 0
    f["proto"][icmp & f["ipv6"]] = 58  # ICMPv6 (echo request 128, reply 129)
    f["dst_port"][icmp & f["ipv6"]] = np.where(f["dst_port"][icmp & f["ipv6"]] == 2048, 128 * 256, 129 * 256)
    tcp = proto == TCP
    f["tcp_flags"] = np.where(tcp, np.where(rng.random(n) < params.reset_fraction, FLAGS_RESET, FLAGS_DONE), 0)
    f["tcp_flags"][tcp & (pk == 1)] = FLAGS_SYN

    thr = params.flow_rate_bps_median * np.exp(params.flow_rate_sigma * rng.standard_normal(n))
    dur = np.minimum(nbytes * 8 / thr * 1000, params.active_timeout_s * 1000).astype(np.int64)
    dur[pk == 1] = 0
    dur = np.minimum(dur, duration_ms - 1)
    t0 = diurnal_times(rng, n, start_ms, duration_ms, params)
    t0 = np.minimum(t0, start_ms + duration_ms - 1 - dur)
    f["t_start"] = t0
    f["t_end"] = t0 + dur
    _interfaces(f, rng, params)
    return f


def bulk_flows(rng, start_ms, duration_ms, params, pools, events: list) -> np.ndarray:
    parts = []
    app_index = {a.name: i for i, a in enumerate(params.apps)}
    for b in params.bulk:
        t0, t1 = params.window(start_ms, duration_ms, b.start_hour, b.minutes)
        app = params.apps[app_index[b.app]]
        rec_ms = int(params.bulk_record_seconds * 1000)
        cuts = np.arange(t0, t1, rec_ms)
        n_rec = len(cuts)
        per_stream_rate = b.rate_bps / b.streams
        starts = np.tile(cuts, b.streams)
        ends = np.minimum(starts + rec_ms, t1) - 1
        stream = np.repeat(np.arange(b.streams), n_rec)
        f = np.zeros(len(starts), FLOW_DTYPE)
        f["t_start"], f["t_end"] = starts, ends
        f["router"] = 0
        f["inbound"] = not b.outbound
        f["proto"] = app.proto
        f["app"] = app_index[b.app]
        f["klass"] = CLASSES.index("event")
        f["behaviour"] = BEHAVIOURS.index("large_bulk")
        f["tos"] = app.tos
        f["event"] = len(events) + 1
        target = params.ping.targets[b.target]
        remote = int(ipaddress.IPv4Address(target.address))
        local = pools["l4"][b.target % len(pools["l4"])]
        f["src4"] = local if b.outbound else remote
        f["dst4"] = remote if b.outbound else local
        ras = remote_as_v4(np.array([remote], np.uint32))[0]
        f["src_as"], f["dst_as"] = (params.site_as, ras) if b.outbound else (ras, params.site_as)
        port = app.port_lo + stream % (app.port_hi - app.port_lo + 1)
        client = 40000 + stream
        f["src_port"] = client if b.outbound else port
        f["dst_port"] = port if b.outbound else client
        f["tcp_flags"] = FLAGS_DONE
        f["bytes"] = np.maximum(1500, ((ends - starts + 1) / 1000 * per_stream_rate / 8)).astype(np.uint64)
        f["packets"] = np.ceil(f["bytes"] / 1500).astype(np.uint64)
        _interfaces(f, rng, params)
        parts.append(f)
        events.append({"kind": "bulk", "name": b.name, "app": b.app, "port": app.port_lo,
                       "router": params.routers[0].name,
                       "src": str(ipaddress.IPv4Address(int(f["src4"][0]))),
                       "dst": str(ipaddress.IPv4Address(int(f["dst4"][0]))),
                       "start_ms": int(t0), "end_ms": int(t1), "streams": b.streams,
                       "rate_bps": b.rate_bps, "flows": int(len(f)), "packets": int(f["packets"].sum()),
                       "bytes": int(f["bytes"].sum()), "ping_target": target.address})
    return np.concatenate(parts) if parts else np.zeros(0, FLOW_DTYPE)


def scanner_flows(rng, n_total, start_ms, duration_ms, params, pools, events: list) -> np.ndarray:
    parts = []
    for s in params.scanners:
        n = max(1, int(s.share * n_total))
        t0, t1 = params.window(start_ms, duration_ms, s.start_hour, s.minutes)
        f = np.zeros(n, FLOW_DTYPE)
        f["t_start"] = np.sort(rng.integers(t0, t1, n))
        f["t_end"] = f["t_start"]
        f["router"] = rng.integers(0, len(params.routers), 1)[0]
        f["inbound"] = True
        f["src4"] = remote_v4(rng, 1, params.local_prefixes)[0]
        f["dst4"] = local_v4(rng, n, params.local_prefixes)
        f["src_as"] = remote_as_v4(f["src4"][:1])[0]
        f["dst_as"] = params.site_as
        f["klass"] = CLASSES.index("event")
        f["behaviour"] = BEHAVIOURS.index("other")
        f["event"] = len(events) + 1
        f["packets"] = 1
        if s.kind == "icmp-sweep":
            f["proto"], f["dst_port"], f["bytes"] = ICMP, 8 * 256, 84
        else:
            f["proto"], f["tcp_flags"], f["bytes"] = TCP, FLAGS_SYN, 44
            f["src_port"] = rng.integers(32768, 61000, 1)[0]
            f["dst_port"] = rng.integers(1, 10000, n)
        _interfaces(f, rng, params)
        parts.append(f)
        events.append({"kind": "scanner", "name": s.name, "scan": s.kind,
                       "router": params.routers[int(f["router"][0])].name,
                       "src": str(ipaddress.IPv4Address(int(f["src4"][0]))),
                       "start_ms": int(t0), "end_ms": int(t1), "flows": n,
                       "distinct_destinations": int(len(np.unique(f["dst4"]))),
                       "distinct_ports": int(len(np.unique(f["dst_port"]))),
                       "packets": int(f["packets"].sum()), "bytes": int(f["bytes"].sum())})
    for b in params.fanin:
        n = max(1, int(b.share * n_total))
        t0, t1 = params.window(start_ms, duration_ms, b.start_hour, b.minutes)
        f = np.zeros(n, FLOW_DTYPE)
        f["t_start"] = np.sort(rng.integers(t0, t1, n))
        f["t_end"] = f["t_start"] + rng.integers(0, 50, n)
        f["router"] = rng.integers(0, len(params.routers), n)
        f["inbound"] = True
        f["src4"] = remote_v4(rng, b.sources, params.local_prefixes)[rng.integers(0, b.sources, n)]
        dst = local_v4(rng, 1, params.local_prefixes)[0]
        f["dst4"] = dst
        f["src_as"] = remote_as_v4(f["src4"])
        f["dst_as"] = params.site_as
        f["proto"] = b.proto
        f["src_port"] = rng.integers(1024, 65535, n)
        f["dst_port"] = b.port
        f["packets"] = rng.integers(1, 4, n)
        f["bytes"] = f["packets"] * 72
        if b.proto == TCP:
            f["tcp_flags"] = FLAGS_SYN
        f["klass"] = CLASSES.index("event")
        f["behaviour"] = BEHAVIOURS.index("other")
        f["event"] = len(events) + 1
        _interfaces(f, rng, params)
        parts.append(f)
        events.append({"kind": "fan-in", "name": b.name, "dst": str(ipaddress.IPv4Address(int(dst))),
                       "port": b.port, "proto": b.proto, "start_ms": int(t0), "end_ms": int(t1),
                       "flows": n, "distinct_sources": int(len(np.unique(f["src4"]))),
                       "packets": int(f["packets"].sum()), "bytes": int(f["bytes"].sum())})
    return np.concatenate(parts) if parts else np.zeros(0, FLOW_DTYPE)


def _records(t0: int, t1: int, cut_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """A flow from t0 to t1 (ms) as a router exports it: one record per active timeout."""
    starts = np.arange(t0, t1, cut_ms, dtype=np.int64)
    return starts, np.minimum(starts + cut_ms, t1) - 1


def tele_peers(rng, session: TeleSession, targets: list) -> tuple[np.ndarray, list[str]]:
    """The session's peers (IPv4, distinct while the networks have room) and, per peer, the
    RTT test target whose network it sits in: a random host of the target's /peer_prefix
    other than the target itself, its network and broadcast addresses (with /31 and /32:
    whatever the network holds)."""
    if not 16 <= int(session.peer_prefix) <= 32:
        raise ValueError(f"tele-immersion session {session.name}: peer_prefix = {session.peer_prefix}: "
                         "a prefix length 16..32 expected")
    if not targets:
        raise ValueError(f"tele-immersion session {session.name}: its peers sit in the RTT test targets' "
                         "networks, and the ping model has no targets")
    order = list(session.peer_targets) or list(range(len(targets)))
    peers, behind, used = [], [], set()
    for k in range(session.peers):
        i = order[k % len(order)]
        if not 0 <= i < len(targets):
            raise ValueError(f"tele-immersion session {session.name}: peer_targets has {i}, "
                             f"but the ping model has {len(targets)} targets (0..{len(targets) - 1})")
        addr = ipaddress.ip_address(targets[i].address)
        if addr.version != 4:
            raise ValueError(f"tele-immersion session {session.name}: peer target {addr} is not IPv4 "
                             "(the sessions' flows are IPv4)")
        net = ipaddress.ip_network(f"{addr}/{session.peer_prefix}", strict=False)
        hosts = np.arange(int(net.network_address), int(net.broadcast_address) + 1, dtype=np.int64)
        if len(hosts) > 2:
            hosts = hosts[1:-1]
        free = hosts[~np.isin(hosts, [int(addr), *used])]
        pick = int(rng.choice(free)) if len(free) else int(addr)  # a /32 (or a full /31): the target itself
        used.add(pick)
        peers.append(pick)
        behind.append(str(addr))
    return np.array(peers, np.uint32), behind


def tele_flows(rng, start_ms, duration_ms, params, pools, events: list) -> np.ndarray:
    """Tele-immersion sessions (TeleSession): per peer and direction one flow per Stream,
    cut at the active timeout, and the scene download at the start. Labelled with the
    behaviour each was drawn as."""
    parts = []
    app_index = {a.name: i for i, a in enumerate(params.apps)}
    cut_ms = int(params.active_timeout_s * 1000)
    for s in params.teleimmersion:
        t0, t1 = params.window(start_ms, duration_ms, s.start_hour, s.minutes)
        local = pools["l4"][rng.integers(0, len(pools["l4"]))]
        peers, behind = tele_peers(rng, s, params.ping.targets)
        flows, path_of = [], []
        for peer, target in zip(peers, behind):
            kinds = [(st, st.minutes) for st in s.streams] + [(None, None)]
            for st, minutes in kinds:
                behaviour = st.behaviour if st else "small_bulk"
                app = params.apps[app_index[f"ti-{behaviour}"]]
                if st is None:  # the scene: one TCP transfer to the peer at the session's start
                    dur = int(s.scene_mb * 8e6 / s.scene_rate_bps * 1000)
                    starts, ends = _records(t0, min(t1, t0 + max(dur, 1)), cut_ms)
                    directions = (True,)
                else:
                    end = t1 if minutes is None else min(t1, t0 + max(1000, int(params.window(
                        start_ms, duration_ms, 0, minutes)[1] - params.window(start_ms, duration_ms, 0, 0)[0])))
                    starts, ends = _records(t0, end, cut_ms)
                    directions = (True, False)
                for outbound in directions:
                    n = len(starts)
                    f = np.zeros(n, FLOW_DTYPE)
                    f["t_start"], f["t_end"] = starts, ends
                    secs = (ends - starts + 1) / 1000.0
                    if st is None:
                        f["bytes"] = np.maximum(1500, (secs * s.scene_rate_bps / 8)).astype(np.uint64)
                        f["packets"] = np.ceil(f["bytes"] / 1500).astype(np.uint64)
                    else:
                        pk = np.maximum(1, np.round(secs * st.pps * rng.uniform(1 - st.pps_jitter, 1 + st.pps_jitter, n)))
                        size = st.packet_bytes * rng.uniform(1 - st.size_jitter, 1 + st.size_jitter, n)
                        f["packets"] = pk.astype(np.uint64)
                        f["bytes"] = np.round(pk * np.clip(size, 40, 1500)).astype(np.uint64)
                    f["router"] = 0
                    f["inbound"] = not outbound
                    f["proto"] = app.proto
                    f["app"] = app_index[app.name]
                    f["klass"] = CLASSES.index("event")
                    f["behaviour"] = BEHAVIOURS.index(behaviour)
                    f["event"] = len(events) + 1
                    f["src4"], f["dst4"] = (local, peer) if outbound else (peer, local)
                    ras = remote_as_v4(np.array([peer], np.uint32))[0]
                    f["src_as"], f["dst_as"] = (params.site_as, ras) if outbound else (ras, params.site_as)
                    f["src_port"], f["dst_port"] = (40000 + len(flows), app.port_lo) if outbound else (
                        app.port_lo, 40000 + len(flows))
                    f["tcp_flags"] = FLAGS_DONE if app.proto == TCP else 0
                    flows.append(f)
                    path_of += [target] * n
        f = np.concatenate(flows)
        _interfaces(f, rng, params)
        parts.append(f)
        per = {b: int((f["behaviour"] == i).sum()) for i, b in enumerate(BEHAVIOURS) if (f["behaviour"] == i).any()}
        per_path: dict = {}  # tested target -> behaviour -> flows: what behaviour_needs must find on each path
        for t, i in zip(path_of, f["behaviour"]):
            per_path.setdefault(t, {}).setdefault(BEHAVIOURS[i], 0)
            per_path[t][BEHAVIOURS[i]] += 1
        events.append({"kind": "teleimmersion", "name": s.name, "router": params.routers[0].name,
                       "src": str(ipaddress.IPv4Address(int(local))),
                       "peers": [str(ipaddress.IPv4Address(int(p))) for p in peers],
                       "peer_targets": behind, "peer_prefix": int(s.peer_prefix),
                       "start_ms": int(t0), "end_ms": int(t1), "flows": int(len(f)), "flows_per_behaviour": per,
                       "flows_per_path": per_path,
                       "packets": int(f["packets"].sum()), "bytes": int(f["bytes"].sum())})
    return np.concatenate(parts) if parts else np.zeros(0, FLOW_DTYPE)


def generate(params: ModelParams, start_ms: int, duration_ms: int, n_flows: int, seed: int = 1,
             allow_v6: bool = True) -> tuple[np.ndarray, list[dict]]:
    """All flows of the run (background + events), sorted by end time, and the events list.
    `n_flows` is the total; events take their shares and bulk transfers their fixed count."""
    if duration_ms < 1000:
        raise ValueError("duration must be at least 1 s")
    rng = np.random.default_rng(seed)
    pools = make_pools(rng, params, allow_v6)
    events: list[dict] = []
    bulk = bulk_flows(rng, start_ms, duration_ms, params, pools, events)
    special = scanner_flows(rng, n_flows, start_ms, duration_ms, params, pools, events)
    tele = tele_flows(np.random.default_rng([seed, 26]), start_ms, duration_ms, params, pools, events)
    n_bg = n_flows - len(bulk) - len(special) - len(tele)
    if n_bg < 0:
        raise ValueError(f"{n_flows} flows are fewer than the events need ({len(bulk) + len(special) + len(tele)}): "
                         "ask for more flows")
    # attacks (issue 36) come on top of n_flows: their own generator, so the normal day is unchanged
    from .attacks import attack_flows  # noqa: PLC0415  (only when the model is drawn)

    attacks = attack_flows(np.random.default_rng([seed, 36]), start_ms, duration_ms, params, pools, events,
                           sys.modules[__name__])
    flows = np.concatenate([background(rng, n_bg, start_ms, duration_ms, params, pools, allow_v6),
                            bulk, special, tele, *attacks])
    flows = flows[np.argsort(flows["t_end"], kind="stable")]
    for q in params.quiet:
        t0, t1 = params.window(start_ms, duration_ms, q.start_hour, q.minutes)
        gone = (flows["router"] == q.router) & (flows["t_end"] >= t0) & (flows["t_start"] < t1)
        flows = flows[~gone]
        r = params.routers[q.router]
        events.append({"kind": "quiet", "name": q.name, "router": r.name, "exporter": r.address,
                       "start_ms": int(t0), "end_ms": int(t1), "flows_dropped": int(gone.sum())})
    return flows, events
