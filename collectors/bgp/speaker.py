"""flowlake's BGP speaker: Debian's `gobgpd`, started with a generated configuration and
driven through its own CLI, `gobgp` (issue 36, docs/guide/mitigation.md).

Why here (collectors/): it is the network-facing end of BGP, beside the BMP collector
(collectors/routing/); it knows routes and sessions, nothing of attacks. The policy that
decides what to announce reads the detector's output and lives after it, in
pipelines/mitigation/, which drives this module.

Why the `gobgp` CLI and not a gRPC client: the CLI ships in the same Debian package as
the daemon, so its API version always matches; it prints JSON (`-j`); and the mitigation
loop calls it a few times a second at most (one RIB read and one session read per tick,
one call per announcement or withdraw), where a process start (~20 ms) costs nothing.
A Go or Python gRPC client would add a build step and generated stubs pinned to one
gobgpd API for no gain at this rate.

The speaker's configuration (from [ddos]): one neighbour (the router), eBGP or iBGP by
its AS; it does not listen (`port = -1`: flowlake always opens the session, so nothing
binds port 179 here); it takes no route from the router (default import policy
reject-route); IPv4/IPv6 unicast (RTBH) and IPv4/IPv6 flowspec.
"""
from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from flowlake.base import config as _config
from flowlake.base.component import ModuleComponent
from flowlake.base.process import Managed, wait_until

SESSION_STATES = {0: "unknown", 1: "idle", 2: "connect", 3: "active", 4: "opensent", 5: "openconfirm",
                  6: "established"}
FAMILIES = ("ipv4-unicast", "ipv6-unicast", "ipv4-flowspec", "ipv6-flowspec")
PROTOCOL_NAMES = {1: "icmp", 6: "tcp", 17: "udp", 58: "ipv6-icmp"}  # what gobgp's flowspec parser names
MODES = ("off", "dry-run", "rtbh", "flowspec")


class SpeakerError(RuntimeError):
    """gobgpd did not do what was asked (not running, refused a route); the message says why."""


@dataclass(frozen=True)
class SpeakerSettings:
    """The [ddos] keys the speaker uses."""
    enabled: bool
    mitigation: str
    neighbor: str
    neighbor_port: int
    local_as: int
    peer_as: int
    router_id: str
    local_address: str
    api_port: int


def settings(cfg) -> SpeakerSettings:
    return Speaker(cfg).settings


def wanted(cfg) -> bool:
    """Whether the speaker runs: [ddos] enabled and mitigation rtbh or flowspec."""
    s = settings(cfg)
    return bool(s.enabled) and s.mitigation in ("rtbh", "flowspec")


def check(cfg) -> SpeakerSettings:
    """The settings, checked for a speaker that must run: a bad value fails naming [ddos] key."""
    s = settings(cfg)
    if s.mitigation not in MODES:
        raise _config.ConfigError(f"[ddos] mitigation = {s.mitigation!r}: expected one of {', '.join(MODES)}")
    for key in ("neighbor", "router_id") + (("local_address",) if s.local_address else ()):
        value = getattr(s, key)
        try:
            addr = ipaddress.ip_address(value)
        except ValueError:
            raise _config.ConfigError(f"[ddos] {key} = {value!r}: expected an IP address"
                                      + (" (the router flowlake announces to)" if key == "neighbor" else "")) from None
        if key == "router_id" and addr.version != 4:
            raise _config.ConfigError(f"[ddos] router_id = {value!r}: expected an IPv4 address (a BGP identifier)")
    for key in ("local_as", "peer_as"):
        if not 0 < getattr(s, key) < 2**32:
            raise _config.ConfigError(f"[ddos] {key} = {getattr(s, key)}: expected an AS number (1-4294967295)")
    for key in ("neighbor_port", "api_port"):
        if not 0 < getattr(s, key) < 65536:
            raise _config.ConfigError(f"[ddos] {key} = {getattr(s, key)}: expected a TCP port (1-65535)")
    return s


def _need(exe: str) -> str:
    path = shutil.which(exe) or shutil.which(exe, path="/usr/sbin:/usr/bin")
    if not path:
        raise SpeakerError(f"{exe} is not installed (Debian package gobgpd; `make setup` installs it)")
    return path


def config_text(s: SpeakerSettings) -> str:
    """gobgpd's TOML configuration for these settings."""
    lines = ["# written by flowlake (collectors/bgp/speaker.py) from [ddos]; rewritten at every start",
             "[global.config]", f"  as = {s.local_as}", f'  router-id = "{s.router_id}"', "  port = -1"]
    if s.local_address:
        lines.append(f'  local-address-list = ["{s.local_address}"]')
    lines += ["[[neighbors]]", "  [neighbors.config]", f'    neighbor-address = "{s.neighbor}"',
              f"    peer-as = {s.peer_as}", "  [neighbors.transport.config]", f"    remote-port = {s.neighbor_port}"]
    if s.local_address:
        lines.append(f'    local-address = "{s.local_address}"')
    if s.local_as != s.peer_as:
        # eBGP: the router may be more than one hop away (a loopback); keep its TTL check
        lines += ["  [neighbors.ebgp-multihop.config]", "    enabled = true", "    multihop-ttl = 8"]
    lines += ["  [neighbors.timers.config]", "    connect-retry = 1", "    hold-time = 9", "    keepalive-interval = 3",
              "    idle-hold-time-after-reset = 1",
              "  [neighbors.apply-policy.config]", '    default-import-policy = "reject-route"']
    for fam in FAMILIES:
        lines += ["  [[neighbors.afi-safis]]", "    [neighbors.afi-safis.config]", f'      afi-safi-name = "{fam}"']
    return "\n".join(lines) + "\n"


def conf_path(cfg):
    return cfg.path("state", "ddos", "gobgpd.toml")


def argv(cfg) -> list[str]:
    s = check(cfg)
    return [_need("gobgpd"), "-f", str(conf_path(cfg)), "--api-hosts", f"127.0.0.1:{s.api_port}", "--pprof-disable"]


# ---- routes ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Route:
    """One route flowlake's speaker originates. `key` is how gobgp's RIB names it (the
    prefix, or the flowspec rule's text), `nlri` + `attrs` the CLI words that add it."""
    family: str      # ipv4, ipv6, ipv4-flowspec, ipv6-flowspec (gobgp -a)
    key: str
    nlri: tuple[str, ...]
    attrs: tuple[str, ...] = field(default=())

    @property
    def text(self) -> str:
        return f"{self.family} {self.key}"


def rtbh(prefix: str, community: str, next_hop: str) -> Route:
    """The victim's prefix with the blackhole community and next hop (RFC 7999)."""
    net = ipaddress.ip_network(prefix)
    family = "ipv6" if net.version == 6 else "ipv4"
    if not re.fullmatch(r"\d{1,5}:\d{1,5}", community):
        raise ValueError(f"blackhole community {community!r}: expected ASN:VALUE (e.g. 65535:666)")
    return Route(family, str(net), (str(net),), ("community", community, "nexthop", next_hop))


def flowspec(prefix: str, protocol: int | None = None, src_ports: tuple[int, ...] = (), tcp_syn: bool = False,
             fragment: bool = False, rate_bytes: float = 0.0) -> Route:
    """A flowspec rule (RFC 8955/8956): traffic to `prefix` (of `protocol`, from `src_ports`,
    TCP SYN only, fragments only) discarded, or rate-limited to `rate_bytes` bytes/s."""
    net = ipaddress.ip_network(prefix)
    family = "ipv6-flowspec" if net.version == 6 else "ipv4-flowspec"
    words = ["destination", str(net)]
    key = f"[destination: {net}{'/0' if net.version == 6 else ''}]"
    if protocol is not None:
        name = PROTOCOL_NAMES.get(protocol)
        if name is None:
            raise ValueError(f"protocol {protocol}: flowspec rules here name icmp, tcp, udp or ipv6-icmp")
        words += ["protocol", name]
        key += f"[protocol: =={name}]"
    if src_ports:
        ports = sorted(set(int(p) for p in src_ports))
        if any(not 0 <= p < 65536 for p in ports):
            raise ValueError(f"source ports {ports}: expected 0-65535")
        words += ["source-port", "|".join(f"=={p}" for p in ports)]
        key += "[source-port: " + " ".join(f"=={p}" for p in ports) + "]"
    if tcp_syn:
        words += ["tcp-flags", "=S"]
        key += "[tcp-flags: =S]"
    if fragment:
        words += ["fragment", "is-fragment"]
        key += "[fragment: is-fragment]"
    action = ("rate-limit", f"{rate_bytes:g}") if rate_bytes > 0 else ("discard",)
    return Route(family, key, tuple(words), ("then", *action))


# ---- the client ------------------------------------------------------------------------

class Client:
    """The `gobgp` CLI against one gobgpd's API port."""

    def __init__(self, api_port: int, timeout: float = 10.0):
        self.api_port = api_port
        self.timeout = timeout

    def run(self, *args: str) -> str:
        cmd = [_need("gobgp"), "-p", str(self.api_port), *args]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise SpeakerError(f"gobgp {' '.join(args)}: no answer within {self.timeout:.0f}s") from None
        if res.returncode != 0:
            text = (res.stderr or res.stdout).strip().splitlines()
            raise SpeakerError(f"gobgpd (API port {self.api_port}): {text[-1] if text else f'exit {res.returncode}'}")
        return res.stdout

    def answers(self) -> bool:
        try:
            self.run("global")
            return True
        except SpeakerError:
            return False

    def neighbor(self, address: str) -> dict:
        """{state: idle|connect|active|...|established, uptime_s, received, sent}."""
        doc = json.loads(self.run("neighbor", address, "-j") or "{}")
        st = doc.get("state", {})
        raw = st.get("session_state", 0)
        state = SESSION_STATES.get(raw, str(raw).lower()) if isinstance(raw, int) else str(raw).lower()
        msgs = st.get("messages", {})
        return {"state": state, "received": msgs.get("received", {}).get("total", 0),
                "sent": msgs.get("sent", {}).get("total", 0),
                "notifications_received": msgs.get("received", {}).get("notification", 0),
                "notifications_sent": msgs.get("sent", {}).get("notification", 0)}

    def rib(self, family: str) -> set[str]:
        """The keys of the routes in the speaker's own RIB for a family (ipv4, ipv4-flowspec, ...)."""
        return set(json.loads(self.run("global", "rib", "-a", family, "-j") or "{}") or {})

    def adj_out(self, neighbor: str, family: str) -> set[str]:
        """What the speaker sends the neighbour now (empty while the session is down)."""
        try:
            return set(json.loads(self.run("neighbor", neighbor, "adj-out", "-a", family, "-j") or "{}") or {})
        except SpeakerError:
            return set()

    def add(self, route: Route) -> None:
        if route.family.endswith("flowspec"):
            self.run("global", "rib", "add", "-a", route.family, "match", *route.nlri, *route.attrs)
        else:
            self.run("global", "rib", "add", "-a", route.family, *route.nlri, *route.attrs)

    def delete(self, route: Route) -> None:
        if route.family.endswith("flowspec"):
            self.run("global", "rib", "del", "-a", route.family, "match", *route.nlri)
        else:
            self.run("global", "rib", "del", "-a", route.family, *route.nlri)

    def delete_all(self, family: str) -> None:
        self.run("global", "rib", "del", "all", "-a", family)


def client(cfg) -> Client:
    return Client(settings(cfg).api_port)


def last_notification(cfg, neighbor: str) -> str:
    """The last NOTIFICATION gobgpd sent or received for the neighbour (its log), '' if none:
    why a router refuses the session (AS mismatch, bad router id, ...)."""
    try:
        with open(managed(cfg).logfile, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 65536))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if line.startswith("{"):  # gobgpd logs JSON when its output is not a terminal
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            key, msg, data = doc.get("Key"), str(doc.get("msg", "")), str(doc.get("Data", ""))
        else:  # key=value text
            m = re.search(r'msg="([^"]*)"(?: Data="?([^"]*)"?)?.* Key=(\S+)', line)
            if not m:
                continue
            msg, data, key = m.group(1), m.group(2) or "", m.group(3)
        if key != neighbor:
            continue
        if msg == "Peer Up":
            return ""
        if msg in ("sent notification", "received notification"):
            return f"{msg}: {data}"
    return ""


# ---- supervision -----------------------------------------------------------------------

def managed(cfg) -> Managed:
    return Managed("bgp-speaker", cfg.path("run"), cfg.path("log"))


def start(cfg=None, timeout: float = 30.0) -> int | None:
    """Start gobgpd when [ddos] enabled and mitigation rtbh/flowspec; return once its API answers."""
    cfg = cfg or _config.get()
    if not wanted(cfg):
        return None
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    s = check(cfg)
    path = conf_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_text(s))
    pid = proc.start(argv(cfg))
    api = Client(s.api_port, timeout=3.0)
    wait_until(api.answers, timeout, f"gobgpd to answer on its API port {s.api_port}", interval=0.2, proc=proc)
    return pid


def stop(cfg=None) -> bool:
    return managed(cfg or _config.get()).stop(timeout=10)


def status(cfg=None) -> dict:
    """The speaker's session with the router: state, and why it is not established."""
    cfg = cfg or _config.get()
    s = settings(cfg)
    out: dict = {"enabled": wanted(cfg), "neighbor": s.neighbor, "neighbor_port": s.neighbor_port}
    if not managed(cfg).running():
        out["running"] = False
        return out
    out["running"] = True
    try:
        out["session"] = Client(s.api_port, timeout=5.0).neighbor(s.neighbor)
    except (SpeakerError, ValueError) as exc:
        out["error"] = str(exc)
        return out
    if out["session"]["state"] != "established":
        out["session"]["reason"] = last_notification(cfg, s.neighbor)
    return out


class Speaker(ModuleComponent):
    """gobgpd, flowlake's BGP speaker towards the router ([ddos] mitigation rtbh or flowspec)."""
    name = "bgp-speaker"
    stop_timeout = 10.0
    settings_type = SpeakerSettings
    section = "ddos"
    functions = sys.modules[__name__]

    def enabled(self) -> bool:
        return wanted(self.cfg)

    def port(self) -> int | None:
        return self.settings.api_port if wanted(self.cfg) else None
