"""A real DNS server for tests and demos: Debian's dnsmasq on a loopback port, answering
PTR records it is given and nothing else (no upstream, no hosts file, no DHCP).

Reverse zones not listed are answered locally (NXDOMAIN); a zone can be forwarded to
another server, e.g. a UDP socket that never answers, to make its names time out.
"""
from __future__ import annotations

import ipaddress
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from flowlake.base.ports import free_port
from flowlake.base.process import stop_child


@dataclass
class Dnsmasq:
    proc: subprocess.Popen
    port: int
    log: Path

    def stop(self) -> None:
        stop_child(self.proc)


def reverse_zone(network: str) -> str:
    """The in-addr.arpa / ip6.arpa zone of a network whose prefix ends on a label boundary."""
    net = ipaddress.ip_network(network, strict=False)
    step = 8 if net.version == 4 else 4
    if net.prefixlen % step:
        raise ValueError(f"{network}: reverse zones cut at /{step} boundaries")
    labels = net.network_address.reverse_pointer.split(".")
    keep = (32 if net.version == 4 else 128) // step - net.prefixlen // step
    return ".".join(labels[keep:])


def start(workdir: Path, ptr: dict[str, str], forward: dict[str, tuple[str, int]] | None = None,
          port: int | None = None) -> Dnsmasq:
    """dnsmasq answering PTR `address -> name` for `ptr`; `forward` maps a network (e.g.
    "198.51.66.0/24") to a (host, port) server its reverse lookups are sent to."""
    exe = shutil.which("dnsmasq")
    if exe is None:
        raise RuntimeError("dnsmasq is not installed: run `make setup` (Debian package dnsmasq-base)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port(socket.SOCK_DGRAM)
    log = workdir / "dnsmasq.log"
    cmd = [exe, "--keep-in-foreground", "--conf-file=/dev/null", "--no-hosts", "--no-resolv", "--no-poll",
           "--listen-address=127.0.0.1", "--bind-interfaces", f"--port={port}", "--pid-file=",
           "--local=/in-addr.arpa/", "--local=/ip6.arpa/", "--log-queries", f"--log-facility={log}"]
    cmd += [f"--ptr-record={ipaddress.ip_address(a).reverse_pointer},{name}" for a, name in ptr.items()]
    for net, (host, fport) in (forward or {}).items():
        cmd.append(f"--server=/{reverse_zone(net)}/{host}#{fport}")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server = Dnsmasq(proc, port, log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # ready once it answers a query on its port
        if proc.poll() is not None:
            raise RuntimeError(f"dnsmasq exited {proc.returncode}: {proc.stderr.read().strip()}")
        if _answers(port):
            return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"dnsmasq did not answer on 127.0.0.1:{port} within 10 s")


def _answers(port: int) -> bool:
    import dns.exception
    import dns.message
    import dns.query

    try:
        dns.query.udp(dns.message.make_query("1.0.0.127.in-addr.arpa", "PTR"), "127.0.0.1", timeout=0.2, port=port)
        return True
    except (dns.exception.DNSException, OSError):
        return False
