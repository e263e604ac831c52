"""One capture by a real nfcapd: start it, feed it, stop it, return its one closed file.

nfcapd rotates on the wall clock (`-t 3600`: on the full hour), so a capture that runs
across an hour boundary is split into two files. The capture is then run again in a fresh
directory (the feed is repeatable), rather than merged: a merge by `nfdump -w` would
rewrite the file the caller wants as nfcapd wrote it (compression, ident, sampling).
"""
from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

from flowlake.base.ports import free_port


def closed_files(spool: Path) -> list[Path]:
    return sorted(p for p in spool.glob("nfcapd.*") if ".current." not in p.name)


def capture(spool: Path, feed: Callable[[int], None], extra: tuple | list = (), settle: float = 0.5,
            attempts: int = 2) -> tuple[Path, str]:
    """nfcapd on a free UDP port writes into `spool`; `feed(port)` sends it NetFlow.
    Returns (the closed file, nfcapd's output)."""
    for attempt in range(attempts):
        d = spool if attempt == 0 else spool.with_name(f"{spool.name}.{attempt}")
        d.mkdir(parents=True, exist_ok=True)
        port = free_port(socket.SOCK_DGRAM)
        proc = subprocess.Popen(["nfcapd", "-b", "127.0.0.1", "-p", str(port), "-w", str(d), "-t", "3600",
                                 *map(str, extra)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            time.sleep(settle)
            if proc.poll() is not None:
                raise AssertionError(f"nfcapd exited at start: {proc.communicate()[0].decode(errors='replace')}")
            feed(port)
        finally:
            proc.send_signal(signal.SIGTERM)  # nfcapd closes and renames its current file
            out = proc.communicate(timeout=60)[0].decode(errors="replace")
        files = closed_files(d)
        if len(files) == 1:
            return files[0], out
        if len(files) == 0:
            raise AssertionError(f"nfcapd wrote no file in {d}: {out}")
    raise AssertionError(f"nfcapd split every capture across its rotation: {closed_files(d)}")


def capture_tapped(spool: Path, tap_dir: Path, feed: Callable[[int], None], extra: tuple | list = ()) -> tuple[Path, str]:
    """capture() with flowlake's sampling tap reading the same port (as `flowlake up` runs
    it), so the shipper can resolve every flow's sampling rate from tap_dir."""
    from flowlake.base.gobuild import SHIPPER

    binary = str(SHIPPER.build())

    def tapped(port: int) -> None:
        tap_dir.mkdir(parents=True, exist_ok=True)
        state = tap_dir / "tap.json"
        state.unlink(missing_ok=True)
        log = open(tap_dir.with_suffix(".log"), "ab")
        tap = subprocess.Popen([binary, "tap", "--port", str(port), "--dir", str(tap_dir)], stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(200):
                if state.exists() or tap.poll() is not None:
                    break
                time.sleep(0.05)
            if tap.poll() is not None:
                raise AssertionError(f"sampling tap exited: {tap_dir.with_suffix('.log').read_text()}")
            feed(port)
            from flowlake.collectors.traffic.exporter import wait_drained

            wait_drained(port)  # nfcapd has read every datagram before it is stopped
            time.sleep(0.3)  # and the tap its copies
        finally:
            tap.send_signal(signal.SIGTERM)
            tap.wait(timeout=20)
            log.close()

    return capture(spool, tapped, ["-B", str(8 << 20), *extra])


def dump_resolved(path: Path, tap_dir: Path | None = None, settings: Path | None = None) -> list[dict]:
    """The shipper's flows of one nfcapd file with sampling resolved as it ships them."""
    import json

    from flowlake.base.gobuild import SHIPPER

    argv = [str(SHIPPER.build()), "dump"]
    if tap_dir is not None:
        argv += ["--tap-dir", str(tap_dir)]
    if settings is not None:
        argv += ["--sampling-settings", str(settings)]
    out = subprocess.run([*argv, str(path)], capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]
