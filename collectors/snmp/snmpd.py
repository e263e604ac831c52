"""A real net-snmp agent (Debian `snmpd`) with a config of its own: for the demo, tests and labs.

`snmpd -f -C -c CONF udp:ADDR:PORT` reads only CONF (-C: no system files), stays in the
foreground and serves the IF-MIB of the network namespace it runs in: started with
`ip netns exec NS`, a lab namespace's veth interfaces and their live counters. Or, with
its interface modules off (`modules_off`) and pass_persist lines (`extra`), a modelled
router's interfaces (collectors/traffic/ifmib_agent.py, the demo's routers).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from flowlake.base.process import stop_child

NS_CACHE_TIMEOUT = "1.3.6.1.4.1.8072.1.5.3.1.2"  # NET-SNMP-AGENT-MIB::nsCacheTimeout.<table OID>
IF_TABLE = "1.3.6.1.2.1.2.2"
V3_AUTH = ("SHA", "MD5", "SHA-224", "SHA-256", "SHA-384", "SHA-512")
V3_PRIV = ("AES", "DES")


@dataclass
class V3User:
    name: str
    auth_password: str
    priv_password: str
    auth_protocol: str = "SHA"
    priv_protocol: str = "AES"


@dataclass
class Snmpd:
    """One agent: its folder (config, persistent state, log), address and port."""
    workdir: Path
    address: str = "127.0.0.1"
    port: int = 0
    community: str = "public"
    sys_name: str = "flowlake-lab"
    location: str = "flowlake test lab"
    rw_community: str = ""  # a write community for loopback sources only (tests set ifAlias with it)
    users: list[V3User] = field(default_factory=list)
    netns: str | None = None
    # net-snmp reloads the interface table at most every 3 s (nsCacheTimeout of ifTable); 0 = on
    # every request, so a test's snmpget and the poller see the counters of that instant
    if_cache_seconds: int | None = None
    extra: list[str] = field(default_factory=list)        # more snmpd.conf lines (pass_persist ...)
    modules_off: list[str] = field(default_factory=list)  # MIB modules not to load (snmpd -I -a,b)
    proc: subprocess.Popen | None = None

    @property
    def conf(self) -> Path:
        return self.workdir / "snmpd.conf"

    @property
    def log(self) -> Path:
        return self.workdir / "snmpd.log"

    @property
    def endpoint(self) -> str:
        """net-snmp's transport address: udp:A:P, or udp6:[A]:P for IPv6."""
        return f"udp6:[{self.address}]:{self.port}" if ":" in self.address else f"udp:{self.address}:{self.port}"

    def write_conf(self) -> Path:
        lines = [f"rocommunity {self.community} default", f"sysName {self.sys_name}",
                 f"sysLocation {self.location}", "sysContact nobody",
                 "dontLogTCPWrappersConnects yes"]  # not a log line per request
        if self.rw_community:
            lines.append(f"rwcommunity {self.rw_community} 127.0.0.0/8")
        if ":" in self.address:  # IPv6: rocommunity covers IPv4 sources only
            lines.append(f"rocommunity6 {self.community} default")
        for u in self.users:
            if u.auth_protocol not in V3_AUTH or u.priv_protocol not in V3_PRIV:
                raise ValueError(f"snmpd user {u.name}: auth {u.auth_protocol} / priv {u.priv_protocol} not supported")
            lines.append(f'createUser {u.name} {u.auth_protocol} "{u.auth_password}" '
                         f'{u.priv_protocol} "{u.priv_password}"')
            lines.append(f"rouser {u.name} priv")
        lines += self.extra
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text("\n".join(lines) + "\n")
        return self.conf

    def argv(self) -> list[str]:
        exe = shutil.which("snmpd") or "/usr/sbin/snmpd"
        cmd = [exe, "-f", "-C", "-c", str(self.conf), "-Lf", str(self.log)]
        if self.modules_off:
            cmd += ["-I", "-" + ",".join(self.modules_off)]
        cmd.append(self.endpoint)
        return (["ip", "netns", "exec", self.netns] if self.netns else []) + cmd

    def start(self, timeout: float = 15.0) -> Snmpd:
        return self.launch().wait_ready(timeout)

    def launch(self) -> Snmpd:
        """Start the agent without waiting for it (several agents start at once; wait_ready)."""
        if not (shutil.which("snmpd") or Path("/usr/sbin/snmpd").exists()):
            raise RuntimeError("snmpd is not installed (Debian package snmpd; `make setup` installs it)")
        if not self.port:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
        self.write_conf()
        state = self.workdir / "persistent"
        state.mkdir(parents=True, exist_ok=True)
        # persistent state (engine id, users' localized keys) stays in the agent's own folder
        env = {**os.environ, "SNMP_PERSISTENT_DIR": str(state), "MIBS": "", "MIBDIRS": "/nonexistent"}
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 15.0) -> Snmpd:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"snmpd exited ({self.proc.returncode}): {self.proc.stderr.read().decode()[-800:]}"
                                   f"\n{self.log.read_text()[-800:] if self.log.exists() else ''}")
            # a short timeout: an agent still starting drops the request, and we ask again
            if self.get("1.3.6.1.2.1.1.5.0", check=False, timeout_s=0.3, retries=0).returncode == 0:
                if self.if_cache_seconds is not None:
                    self.tool("snmpset", f"{NS_CACHE_TIMEOUT}.{IF_TABLE}", "i", str(self.if_cache_seconds),
                              community=self.rw_community)
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"snmpd on {self.address}:{self.port} did not answer within {timeout:.0f}s")

    def stop(self) -> None:
        stop_child(self.proc)

    def tool(self, tool: str, *args: str, user: V3User | None = None, check: bool = True,
             community: str | None = None, timeout_s: float = 2, retries: int = 1) -> subprocess.CompletedProcess:
        """net-snmp's own snmpget/snmpwalk against this agent (the independent reference)."""
        auth = (["-v3", "-l", "authPriv", "-u", user.name, "-a", user.auth_protocol, "-A", user.auth_password,
                 "-x", user.priv_protocol, "-X", user.priv_password] if user else
                ["-v2c", "-c", community or self.community])
        cmd = [tool, *auth, "-On", "-Oq", "-Ot", "-Oe", "-t", f"{timeout_s:g}", "-r", str(retries),
               self.endpoint, *args]
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "MIBS": ""})
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()}")
        return res

    def set_alias(self, if_index: int, alias: str) -> None:
        """ifAlias by SNMP SET (net-snmp keeps it; the kernel's `ip link alias` is not what it serves)."""
        self.tool("snmpset", f"1.3.6.1.2.1.31.1.1.1.18.{if_index}", "s", alias, community=self.rw_community)

    def get(self, *oids: str, **kw) -> subprocess.CompletedProcess:
        return self.tool("snmpget", *oids, **kw)

    def walk(self, oid: str, **kw) -> dict[str, str]:
        """{index suffix: value} of one column (snmpbulkwalk -On -Oq: 'OID value' lines)."""
        out = {}
        prefix = "." + oid.strip(".") + "."
        for line in self.tool("snmpbulkwalk", oid, **kw).stdout.splitlines():
            name, _, value = line.partition(" ")
            if name.startswith(prefix):
                out[name[len(prefix):]] = value.strip().strip('"')
        return out
