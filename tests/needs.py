"""What a test needs from this machine, checked up front with one clear message.

The lab and disk-guard tests need root and kernel features: network namespaces, a tbf
qdisc, a random drop (nftables, or iptables' statistic match), iptables NFQUEUE (the
lab's delay line), MPTCP. Call `require(...)` (or `require_root` / `require_netns`) at the
start of such a test or fixture:

- in CI (environment CI=true; CI runs the suite as root on a kernel with all of these) a
  missing capability FAILS the test: a skip there would hide a broken machine;
- elsewhere (a developer box without root, or a kernel without the feature) the test is
  SKIPPED with the message, e.g. "needs root: network namespaces for the lab" (`-ra`
  lists it), instead of failing with a traceback half-way through.

SCTP is different: the lab runs it where the kernel has it and reports "not supported"
where it does not, so tests assert one or the other (`sctp_unsupported()`), never skip.
"""
from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
from typing import NoReturn

import pytest

IPPROTO_MPTCP = getattr(socket, "IPPROTO_MPTCP", 262)
IPPROTO_SCTP = getattr(socket, "IPPROTO_SCTP", 132)
FEATURES = ("root", "netns", "tbf", "random_drop", "nfqueue", "mptcp")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(what: str) -> NoReturn:
    """Fail (CI) or skip (elsewhere) with `needs <what>`."""
    message = f"needs {what}"
    if in_ci():
        pytest.fail(f"{message} (CI=true: a missing capability fails the test there, it never skips)",
                    pytrace=False)
    pytest.skip(message)


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


def _why(res: subprocess.CompletedProcess) -> str:
    text = (res.stderr or res.stdout).strip().splitlines()
    return text[-1] if text else f"exit status {res.returncode}"


@functools.cache
def _probe() -> dict[str, str | None]:
    """As root: each feature -> None (works) or why not, tried for real in a throwaway
    network namespace (once per test process)."""
    out: dict[str, str | None] = {"root": None}
    if shutil.which("ip") is None:
        reason = "network namespaces (no `ip` command: install iproute2)"
        return {**out, **{f: reason for f in FEATURES if f != "root"}}
    ns = f"fl-needs-{os.getpid()}"
    res = _run("ip", "netns", "add", ns)
    if res.returncode != 0:
        out["netns"] = f"network namespaces (ip netns add: {_why(res)})"
        out.update({f: out["netns"] for f in ("tbf", "random_drop", "nfqueue")})
    else:
        out["netns"] = None
        try:
            ex = ("ip", "netns", "exec", ns)
            _run(*ex, "ip", "link", "set", "lo", "up")
            res = _run(*ex, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit", "burst", "32kbit",
                       "latency", "50ms")
            out["tbf"] = None if res.returncode == 0 else f"a tbf qdisc (tc: {_why(res)})"
            nft = _run(*ex, "nft", "add", "table", "inet", "fl_needs") if shutil.which("nft") else None
            if nft is not None and nft.returncode == 0:
                out["random_drop"] = None
            else:
                ipt = _run(*ex, "iptables", "-t", "raw", "-A", "PREROUTING", "-m", "statistic", "--mode", "random",
                           "--probability", "0.01", "-j", "DROP")
                out["random_drop"] = None if ipt.returncode == 0 else (
                    "a random drop (nftables numgen or iptables statistic: "
                    f"{_why(nft) if nft is not None else 'no nft'}; {_why(ipt)})")
            res = _run(*ex, "iptables", "-t", "mangle", "-A", "PREROUTING", "-j", "NFQUEUE", "--queue-num", "0")
            out["nfqueue"] = None if res.returncode == 0 else f"iptables NFQUEUE, the lab's delay line ({_why(res)})"
        finally:
            _run("ip", "netns", "del", ns)
    out["mptcp"] = _mptcp()
    return out


def _mptcp() -> str | None:
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP).close()
    except OSError as exc:
        return f"MPTCP sockets ({exc.strerror})"
    try:
        if open("/proc/sys/net/mptcp/enabled").read().strip() != "1":
            return "MPTCP enabled (sysctl net.mptcp.enabled=1)"
    except OSError:
        pass
    return None


def require(*features: str, why: str) -> None:
    """Go on only if this machine has every feature (names in FEATURES; root is implied);
    else one message naming what is missing and what for."""
    unknown = set(features) - set(FEATURES)
    assert not unknown, f"needs.require: unknown feature(s) {sorted(unknown)}; known: {FEATURES}"
    if os.geteuid() != 0:
        missing(f"root: {why}")
    found = _probe()
    gaps = list(dict.fromkeys(found[f] for f in features if found[f]))
    if gaps:
        missing(f"{'; '.join(gaps)}: {why}")


def require_root(why: str) -> None:
    require(why=why)


def require_netns(why: str = "network namespaces for the lab") -> None:
    require("netns", why=why)


def sctp_unsupported() -> str | None:
    """None where the kernel has SCTP, else why not (this sandbox's kernel has none)."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_SCTP).close()
    except OSError as exc:
        return f"{exc.strerror} (errno {exc.errno})"
    return None
