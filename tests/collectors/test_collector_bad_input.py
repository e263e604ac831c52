"""Garbage, truncated and malformed NetFlow datagrams at the collector: each is rejected
with a reason that names the problem and counted; nfcapd keeps running and the valid
flows sent after them arrive complete."""
from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import pcapgen  # noqa: E402
from conftest import free_port  # noqa: E402

pytestmark = pytest.mark.integration


def test_bad_datagrams_are_rejected_counted_and_harmless(tmp_path):
    from flowlake.base import config
    from flowlake.collectors import nfcapd

    port = free_port(socket.SOCK_DGRAM)
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_COLLECTOR_PORT": str(port),
                           "FLOWLAKE_COLLECTOR_ROTATE_SECONDS": "2"})
    nfcapd.start(cfg)
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        target = ("127.0.0.1", port)
        v9 = struct.pack("!HHIIII", 9, 1, 1000, 1763600000, 1, 7)
        bad = [
            b"garbage" * 10,                                                      # not NetFlow at all
            b"\x00\x09",                                                          # truncated header
            v9 + struct.pack("!HH", 256, 12) + b"\x00" * 8,                       # data before its template
            v9 + struct.pack("!HHHH", 0, 4000, 256, 2) + struct.pack("!HHHH", 8, 4, 12, 4),  # impossible length
            struct.pack("!HHIII", 10, 9999, 1763600000, 1, 7) + b"\x00" * 20,     # IPFIX, bogus length
            struct.pack("!HHIIIIBBH", 5, 30, 1000, 1763600000, 0, 1, 0, 0, 0),   # v5 claiming 30 records
        ]
        for d in bad:
            s.sendto(d, target)
        time.sleep(2.5)
        pcap = tmp_path / "good.pcap"
        pcapgen.write_pcap(pcap, 800, seed=3)
        subprocess.run(["softflowd", "-r", str(pcap), "-n", f"127.0.0.1:{port}", "-v", "9", "-d", "-c", "none"],
                       check=True, capture_output=True)
        time.sleep(4.5)
        assert nfcapd.managed(cfg).running(), "nfcapd died on bad input"
    finally:
        nfcapd.stop(cfg)
    rej = nfcapd.rejected(cfg)
    text = " ".join(rej["reasons"])
    assert rej["errors"] >= 5, rej
    for needle in ("Unexpected netflow version", "too little data", "flowset length error",
                   "zero length", "Not enough data"):
        assert needle in text, (needle, rej)
    assert nfcapd.received(cfg)["flows"] == 800  # everything valid arrived
    files = [p for p in nfcapd.spool_dir(cfg).glob("nfcapd.*") if ".current." not in p.name]
    total = 0
    for f in files:
        out = subprocess.run(["nfdump", "-r", str(f), "-I"], capture_output=True, text=True, check=True).stdout
        total += int(next(line for line in out.splitlines() if line.startswith("Flows:")).split(":")[1])
    assert total == 800
