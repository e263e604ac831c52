"""Sampling per exporter and per sampler (issue 20): real nfcapd, the real sampling tap,
the shipper's resolution; exact values from independent sources."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from nfcapd_capture import capture_tapped, dump_resolved
from pcapgen import udp_payloads

DATA = Path(__file__).parent / "data" / "routers"


def _send_from(source: str, payloads: list[bytes]):
    def feed(port: int) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((source, 0))
            for p in payloads:
                s.sendto(p, ("127.0.0.1", port))
    return feed


@pytest.mark.integration
def test_cisco_ipfix_sampler_option_matches_pmacct_renormalised(tmp_path, nfdump_bin):
    """A real Cisco IPFIX export announcing 1:256 in an options template (selectorId 302,
    samplingSize 309 / samplingPopulation 310), which nfcapd 1.7.1 leaves unscaled:
    every flow comes out as pmacct's nfacctd renormalised it."""
    payloads = udp_payloads(DATA / "pmacct-104-ipfix-ipv6-cisco-sampling.pcap")
    assert len(payloads) == 5
    f, log = capture_tapped(tmp_path / "spool", tmp_path / "tap", _send_from("127.0.0.61", payloads))
    flows = dump_resolved(f, tmp_path / "tap")
    expected = [json.loads(line) for line in (DATA / "pmacct-104-expected-renormalized.json").read_text().splitlines()]
    key = lambda r: (r["ip_src"], r["ip_dst"], r["iface_in"])  # noqa: E731
    got = {(r["src_addr"], r["dst_addr"], r["input_if"]): (r["packets"], r["bytes"], r["sampling_rate"]) for r in flows}
    want = {key(r): (r["packets"], r["bytes"], 256) for r in expected}
    assert got == want
    assert {r["exporter"] for r in flows} == {"127.0.0.61"}
    # nfcapd itself wrote the wire counts: flowlake scaled them, once
    raw = dump_resolved(f)
    assert sum(r["packets"] for r in raw) * 256 == sum(r["packets"] for r in flows)
    rates = [json.loads(x) for x in (tmp_path / "tap" / "rates.jsonl").read_text().splitlines()]
    assert [(r["exporter"], r["sampler"], r["rate"]) for r in rates] == [("127.0.0.61", 1, 256)]
