"""The BMP collector as a stack component, its client and its lines in `flowlake status`.

The collector is a Go program (collectors/routing/*.go, built by `make setup` like the
shipper): routers send BMP to [routing] bmp_bind:bmp_port; each session fills one routing
table, and the program answers lookups and status on a Unix socket, one JSON request per
line and one JSON answer per line (collectors/routing/api.go lists the requests). This
module starts it (`flowlake up` when [routing] enabled = true), asks it, and prints it.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from flowlake.base import config as _config
from flowlake.base.component import ModuleComponent
from flowlake.base.gobuild import ROUTING
from flowlake.base.process import Managed, wait_until

SOCKET_NAME = "routing.sock"
MAX_SOCKET_PATH = 100  # a Unix socket path is at most 107 bytes on Linux


class RoutingUnavailable(RuntimeError):
    """The collector does not answer (not running, or its socket is gone)."""


@dataclass(frozen=True)
class RoutingSettings:
    """[routing]: the BMP collector."""
    enabled: bool
    bmp_bind: str
    bmp_port: int
    max_routes_per_router: int
    hold_down_seconds: int
    as_sources: list


AS_SOURCES = ("flow", "routing", "geoip")


def settings(cfg) -> RoutingSettings:
    return Routing(cfg).settings


def socket_path(cfg) -> Path:
    """$FLOWLAKE_HOME/run/routing.sock, or a short path in the temporary folder named by
    the home's hash when the home's path is too long for a Unix socket."""
    path = cfg.path("run", SOCKET_NAME)
    if len(str(path)) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(str(cfg.home_dir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"flowlake-routing-{digest}.sock"


def router_map(cfg) -> dict[str, str]:
    """[exporters."ADDR"] bmp_router: the BMP session whose table the exporter's flows use."""
    out = {}
    for addr, table in (cfg.data.get("exporters") or {}).items():
        if not isinstance(table, dict) or "bmp_router" not in table:
            continue
        value = table["bmp_router"]
        try:
            ipaddress.ip_address(value)
        except (TypeError, ValueError):
            raise _config.ConfigError(f'[exporters."{addr}"] bmp_router = {value!r}: expected the IP address '
                                      "a router's BMP session comes from") from None
        if addr == "*":
            raise _config.ConfigError('[exporters."*"] bmp_router: name one exporter per table')
        out[addr] = str(ipaddress.ip_address(value))
    return out


def check(cfg) -> RoutingSettings:
    """The settings, checked: a bad value fails naming [routing] key."""
    s = settings(cfg)
    try:
        ipaddress.ip_address(s.bmp_bind)
    except ValueError:
        raise _config.ConfigError(f"[routing] bmp_bind = {s.bmp_bind!r}: expected an IP address") from None
    if not 0 < s.bmp_port < 65536:
        raise _config.ConfigError(f"[routing] bmp_port = {s.bmp_port}: expected a TCP port (1-65535)")
    if s.max_routes_per_router < 0:
        raise _config.ConfigError(f"[routing] max_routes_per_router = {s.max_routes_per_router}: expected >= 0")
    if s.hold_down_seconds < 0:
        raise _config.ConfigError(f"[routing] hold_down_seconds = {s.hold_down_seconds}: expected >= 0")
    router_map(cfg)
    as_sources(s)
    return s


def as_sources(s: RoutingSettings) -> tuple[str, ...]:
    """[routing] as_sources, checked: an ordered choice among flow, routing, geoip."""
    got = tuple(str(x) for x in s.as_sources)
    bad = [x for x in got if x not in AS_SOURCES]
    if bad or not got or len(set(got)) != len(got):
        raise _config.ConfigError(f"[routing] as_sources = {list(s.as_sources)!r}: expected an ordered list of "
                                  f"distinct sources among {', '.join(AS_SOURCES)} (the first non-zero AS wins)")
    return got


def listen_address(s: RoutingSettings) -> str:
    host = f"[{s.bmp_bind}]" if ":" in s.bmp_bind else s.bmp_bind
    return f"{host}:{s.bmp_port}"


def argv(cfg) -> list[str]:
    """The collector's command line (what `flowlake up` starts)."""
    s = check(cfg)
    out = [str(ROUTING.binary), "--listen", listen_address(s), "--socket", str(socket_path(cfg)),
           "--max-routes", str(s.max_routes_per_router), "--hold-down", f"{s.hold_down_seconds}s"]
    for exporter, router in sorted(router_map(cfg).items()):
        out += ["--router-for", f"{exporter}={router}"]
    return out


# ---- the client ------------------------------------------------------------------------

class Client:
    """One connection to the collector's socket; many requests over it (batch lookups)."""

    def __init__(self, cfg=None, timeout: float = 10.0, path: Path | None = None):
        cfg = cfg or _config.get()
        self.path = path or socket_path(cfg)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(self.path))
        except OSError as exc:
            self.sock.close()
            raise RoutingUnavailable(f"the routing collector does not answer on {self.path} ({exc.strerror or exc}): "
                                     "is [routing] enabled = true and the stack up (`flowlake up`)?") from None
        self.file = self.sock.makefile("rwb")

    def request(self, req: dict) -> dict:
        try:
            self.file.write(json.dumps(req).encode() + b"\n")
            self.file.flush()
            line = self.file.readline()
        except OSError as exc:
            raise RoutingUnavailable(f"the routing collector on {self.path}: {exc}") from None
        if not line:
            raise RoutingUnavailable(f"the routing collector on {self.path} closed the connection")
        answer = json.loads(line)
        if "error" in answer:
            raise ValueError(answer["error"])
        return answer

    def lookup(self, queries: list[dict]) -> list[dict]:
        """One answer per query {"addr", "exporter"?, "next_hop"?}, in order."""
        return self.request({"op": "lookup", "queries": queries})["results"]

    def lookup_batch(self, exporter: str, addrs: list[str]) -> list[dict | None]:
        """Many addresses of one exporter's flows (the ingest's form): each answer a route
        dict or None; the collector sends each distinct route once."""
        ans = self.request({"op": "lookup_batch", "exporter": exporter, "addrs": addrs})
        routes = ans["routes"]
        return [routes[i] if i >= 0 else None for i in ans["index"]]

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def ask(cfg, req: dict, timeout: float = 10.0) -> dict:
    with Client(cfg, timeout=timeout) as c:
        return c.request(req)


def lookup(cfg, addr: str, exporter: str = "", next_hop: str = "") -> list[dict]:
    """The route a flow to ADDR gets now: from the exporter's table, or (no exporter) from
    every router's table."""
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        raise ValueError(f"{addr!r}: not an IP address") from None
    with Client(cfg) as c:
        if exporter:
            return c.lookup([{"addr": addr, "exporter": exporter, "next_hop": next_hop}])
        return c.request({"op": "lookup_all", "addr": addr})["results"]


# ---- supervision -----------------------------------------------------------------------

def managed(cfg) -> Managed:
    return Managed("routing", cfg.path("run"), cfg.path("log"))


def _answers(cfg) -> bool:
    try:
        ask(cfg, {"op": "status"}, timeout=2.0)
        return True
    except (RoutingUnavailable, ValueError):
        return False


def start(cfg=None, timeout: float = 30.0) -> int | None:
    """Start the collector ([routing] enabled); return once it answers on its socket."""
    cfg = cfg or _config.get()
    if not check(cfg).enabled:
        return None
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    ROUTING.build()
    sock = socket_path(cfg)
    sock.parent.mkdir(parents=True, exist_ok=True)
    pid = proc.start(argv(cfg))
    wait_until(lambda: sock.exists() and _answers(cfg), timeout, "the routing collector to answer on its socket",
               interval=0.1, proc=proc)
    return pid


def stop(cfg=None) -> bool:
    return managed(cfg or _config.get()).stop(timeout=10)


# ---- status ------------------------------------------------------------------------------

def status(cfg=None) -> dict:
    """The collector's own status (routers, sessions, routes per table, memory, last update),
    or why there is none."""
    cfg = cfg or _config.get()
    s = settings(cfg)
    out: dict = {"enabled": s.enabled, "listen": listen_address(s), "socket": str(socket_path(cfg))}
    if not s.enabled and not managed(cfg).running():
        return out
    try:
        out.update(ask(cfg, {"op": "status"}, timeout=5.0))
        out["running"] = True
    except (RoutingUnavailable, ValueError) as exc:
        out["running"] = False
        if s.enabled and managed(cfg).running():
            out["error"] = str(exc)
    return out


def _mib(n) -> str:
    return f"{(n or 0) / 2**20:,.1f} MiB"


def print_status(console, st: dict) -> None:
    """The routing lines of `flowlake status` and `flowlake routing status`."""
    if not st.get("enabled") and not st.get("running"):
        return
    if st.get("error"):
        console.print(f"[bold red]Routing collector: {st['error']}[/]")
        return
    if not st.get("running"):
        console.print(f"Routing collector: not running (BMP on {st['listen']}; `flowlake up` starts it)")
        return
    sessions = st.get("sessions", {})
    resets = st.get("resets") or {}
    title = (f"Routing (BMP on {st['listen']}): {sessions.get('up', 0)} of {len(st.get('routers', {}))} routers up, "
             f"{st.get('routes', 0):,} prefixes, {st.get('paths', 0):,} paths, memory {_mib(st.get('memory_bytes'))}"
             + (f", resets {', '.join(f'{k} {v}' for k, v in sorted(resets.items()))}" if resets else ""))
    console.print(title, soft_wrap=True)
    for addr, r in sorted(st.get("routers", {}).items()):
        name = f" ({r['sys_name']})" if r.get("sys_name") else ""
        if r["session"] == "up":
            line = (f"  {addr}{name}: up since {r['connected']}, peers {r['peers_up']}/{r['peers']} up, "
                    f"{r['routes']['ipv4']:,} IPv4 + {r['routes']['ipv6']:,} IPv6 prefixes, {r['paths']:,} paths, "
                    f"lookups use {r.get('lookup_view') or '-'}, last update {r.get('last_update') or 'never'}")
        else:
            line = f"  {addr}{name}: [bold]closed[/] {r.get('closed', '')} (no routes until it reconnects)"
        if r.get("last_error"):
            line += f"; [bold red]last reset: {r['last_error']}[/]"
        console.print(line, soft_wrap=True)
    if st.get("refused"):
        console.print(f"[bold red]Routing: {st['refused']} reconnects refused from routers cut off for "
                      f"[routing] max_routes_per_router = {st.get('max_routes_per_router')}[/]")


class Routing(ModuleComponent):
    """The BMP collector: one routing table per router ([routing] enabled)."""
    name = "routing"
    stop_timeout = 10.0
    settings_type = RoutingSettings
    section = "routing"
    functions = sys.modules[__name__]

    def port(self) -> int | None:
        return self.settings.bmp_port if self.settings.enabled else None

    def enabled(self) -> bool:
        return self.settings.enabled
