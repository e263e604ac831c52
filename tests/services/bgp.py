"""Real BGP speakers and a real BMP reference for tests: Debian's `gobgpd` (3.10, with its
`gobgp` CLI) and pmacct's `pmbmpd` (1.7.7). Unprivileged, on loopback, each in its folder.

- `GoBGP`: one gobgpd with its config (AS, router id, listen address and port, neighbours,
  BMP servers); `cli(...)` runs `gobgp` against its gRPC API port.
- `PmBmpd`: pmbmpd writing every BMP message it decodes to a JSON-lines log; `table()`
  replays that log into the routes it holds (the independent reference for the collector).
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from flowlake.base.process import stop_child


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _need(exe: str, package: str) -> str:
    path = shutil.which(exe) or shutil.which(exe, path="/usr/sbin:/usr/bin")
    if not path:
        raise RuntimeError(f"{exe} is not installed (Debian package {package}; `make setup` installs it)")
    return path


@dataclass
class Neighbor:
    address: str
    asn: int
    port: int


@dataclass
class BmpServer:
    address: str
    port: int
    policy: str = "all"  # pre-policy, post-policy, both, local-rib, all


@dataclass
class GoBGP:
    workdir: Path
    asn: int
    router_id: str
    address: str
    port: int = 0
    api_port: int = 0
    neighbors: list[Neighbor] = field(default_factory=list)
    bmp: list[BmpServer] = field(default_factory=list)
    families: tuple[str, ...] = ("ipv4-unicast", "ipv6-unicast")  # add "ipv4-flowspec" etc. for flowspec tests
    passive: bool = False  # wait for the neighbours to connect (a router flowlake's speaker opens the session to)
    idle_hold_s: int = 0   # > 0: gobgpd's idle-hold-time-after-reset (its default, 30 s, delays a refused peer's retry)
    proc: subprocess.Popen | None = None

    def __post_init__(self):
        self.port = self.port or free_port()
        self.api_port = self.api_port or free_port()

    @property
    def log(self) -> Path:
        return self.workdir / "gobgpd.log"

    def write_conf(self) -> Path:
        lines = ["[global.config]", f"  as = {self.asn}", f'  router-id = "{self.router_id}"', f"  port = {self.port}",
                 f'  local-address-list = ["{self.address}"]']
        for n in self.neighbors:
            passive = ["    passive-mode = true"] if self.passive else []
            lines += ["[[neighbors]]", "  [neighbors.config]", f'    neighbor-address = "{n.address}"',
                      f"    peer-as = {n.asn}", "  [neighbors.transport.config]", f"    remote-port = {n.port}",
                      f'    local-address = "{self.address}"', *passive,
                      "  [neighbors.timers.config]", "    connect-retry = 1", "    hold-time = 9",
                      "    keepalive-interval = 3"] + ([f"    idle-hold-time-after-reset = {self.idle_hold_s}"]
                                                        if self.idle_hold_s else [])
            for afi in self.families:
                lines += ["  [[neighbors.afi-safis]]", "    [neighbors.afi-safis.config]",
                          f'      afi-safi-name = "{afi}"']
        for b in self.bmp:
            lines += ["[[bmp-servers]]", "  [bmp-servers.config]", f'    address = "{b.address}"',
                      f"    port = {b.port}", f'    route-monitoring-policy = "{b.policy}"']
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "gobgpd.toml"
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def start(self, timeout: float = 15.0) -> GoBGP:
        exe = _need("gobgpd", "gobgpd")
        conf = self.write_conf()
        self.proc = subprocess.Popen([exe, "-f", str(conf), "--api-hosts", f"127.0.0.1:{self.api_port}",
                                      "--pprof-disable", "-p"], stdin=subprocess.DEVNULL,
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gobgpd exited ({self.proc.returncode}): {self.log.read_text()[-1500:]}")
            if self.cli("global", check=False).returncode == 0:
                return self
            time.sleep(0.2)
        raise TimeoutError(f"gobgpd {self.router_id} did not answer on its API port within {timeout:.0f}s")

    def stop(self) -> None:
        stop_child(self.proc)
        self.proc = None

    def cli(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        cmd = [_need("gobgp", "gobgpd"), "-p", str(self.api_port), *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stdout}{res.stderr}")
        return res

    def announce(self, prefix: str, as_path: list[int], next_hop: str, communities=(), large=()) -> None:
        family = "ipv6" if ":" in prefix else "ipv4"
        args = ["global", "rib", "add", "-a", family, prefix, "origin", "igp",
                "aspath", ",".join(str(a) for a in as_path)]
        if communities:
            args += ["community", ",".join(communities)]
        if large:
            args += ["large-community", ",".join(large)]
        self.cli(*args, "nexthop", next_hop)

    def withdraw(self, prefix: str) -> None:
        self.cli("global", "rib", "del", "-a", "ipv6" if ":" in prefix else "ipv4", prefix)

    def established(self, neighbor: str) -> bool:
        res = self.cli("neighbor", neighbor, "-j", check=False)
        if res.returncode != 0:
            return False
        state = json.loads(res.stdout).get("state", {})
        return state.get("session_state") in (6, "ESTABLISHED", "established")

    def rib(self, family: str) -> list[dict]:
        """This speaker's own RIB (its Loc-RIB), best paths: [{prefix, as_path, next_hop, communities, large}]."""
        res = self.cli("global", "rib", "-a", family, "-j")
        out = []
        for prefix, paths in (json.loads(res.stdout or "{}") or {}).items():
            for p in paths:
                if not p.get("best", True):
                    continue
                row = {"prefix": prefix, "as_path": [], "next_hop": "", "communities": [], "large": []}
                for a in p.get("attrs", []):
                    if a.get("type") == 2:  # AS_PATH
                        for seg in a.get("as_paths", []):
                            row["as_path"] += seg.get("asns", [])
                    elif a.get("type") == 3:  # NEXT_HOP
                        row["next_hop"] = a.get("nexthop", "")
                    elif a.get("type") == 14:  # MP_REACH_NLRI
                        row["next_hop"] = a.get("nexthop", "")
                    elif a.get("type") == 8:  # COMMUNITIES
                        row["communities"] = [f"{c >> 16}:{c & 0xffff}" for c in a.get("communities", [])]
                    elif a.get("type") == 32:  # LARGE_COMMUNITY
                        row["large"] = [f"{c['ASN']}:{c['LocalData1']}:{c['LocalData2']}" for c in a.get("value", [])]
                out.append(row)
        return out


@dataclass
class PmBmpd:
    workdir: Path
    address: str = "127.0.0.1"
    port: int = 0
    proc: subprocess.Popen | None = None

    def __post_init__(self):
        self.port = self.port or free_port(self.address)

    @property
    def msglog(self) -> Path:
        return self.workdir / "pmbmpd-msglog.json"

    def start(self, timeout: float = 15.0) -> PmBmpd:
        exe = _need("pmbmpd", "pmacct")
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "pmbmpd.conf"
        conf.write_text(f"bmp_daemon: true\nbmp_daemon_ip: {self.address}\nbmp_daemon_port: {self.port}\n"
                        f"bmp_daemon_msglog_file: {self.msglog}\nbmp_daemon_max_peers: 10\n")
        log = (self.workdir / "pmbmpd.log").open("ab")
        self.proc = subprocess.Popen([exe, "-f", str(conf)], stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pmbmpd exited ({self.proc.returncode}): "
                                   f"{(self.workdir / 'pmbmpd.log').read_text()[-1500:]}")
            with socket.socket() as s:
                s.settimeout(0.5)
                try:  # an accepted-and-closed probe is one harmless log_init/log_close pair
                    s.connect((self.address, self.port))
                    return self
                except OSError:
                    pass
            time.sleep(0.2)
        raise TimeoutError(f"pmbmpd did not listen on {self.address}:{self.port} within {timeout:.0f}s")

    def stop(self) -> None:
        stop_child(self.proc)
        self.proc = None

    def table(self) -> dict[tuple, dict]:
        """The routes pmbmpd decoded, replayed from its message log: {(bmp router, peer,
        view, prefix): {as_path, communities, large_communities, next_hop}}. Updates set,
        withdraws remove, a peer's up or down and the BMP session's close drop its routes."""
        out: dict[tuple, dict] = {}
        if not self.msglog.exists():
            return out
        for line in self.msglog.read_text().splitlines():
            try:
                m = json.loads(line)
            except ValueError:
                continue  # a line being written
            router = m.get("bmp_router")
            kind = m.get("bmp_msg_type")
            if m.get("event_type") == "log_close":
                out = {k: v for k, v in out.items() if k[0] != router}
            elif kind in ("peer_up", "peer_down"):
                out = {k: v for k, v in out.items() if (k[0], k[1]) != (router, m.get("peer_ip"))}
            elif kind == "route_monitor":
                if m.get("is_out") or m.get("is_loc_rib") or m.get("is_filtered"):
                    continue
                key = (router, m["peer_ip"], "post-policy" if m.get("is_post") else "pre-policy", m["ip_prefix"])
                if m.get("log_type") == "withdraw":
                    out.pop(key, None)
                else:
                    out[key] = {"as_path": [int(a) for a in m.get("as_path", "").split()],
                                "communities": m.get("comms", "").split(),
                                "large_communities": m.get("lcomms", "").split(),
                                "next_hop": m.get("bgp_nexthop", "")}
        return out
