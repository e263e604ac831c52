"""The probe against loopback: PingER's stop rule and the record it produces."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from flowlake.collectors.active.parsers.ping import parse_ping
from flowlake.collectors.active.probe import ping_until, probe


def test_ping_until_stops_at_the_wanted_replies():
    text = ping_until("127.0.0.1", want=3, max_sent=30, interval=0.2)
    (rec,) = parse_ping("probe", text)
    # stopped at the 3rd reply (a 4th request may already be on its way), not after 30
    assert rec["metrics"]["received"] >= 3 and 3 <= rec["metrics"]["sent"] <= 4
    assert rec["parameters"]["time_source"] == "ping -D"


def test_probe_once_prints_a_pinger_record():
    res = CliRunner().invoke(probe, ["--target", "127.0.0.1", "--once", "--print", "--ping-interval", "0.2"])
    assert res.exit_code == 0, res.output
    (rec,) = [json.loads(x) for x in res.output.splitlines()]
    m = rec["metrics"]
    assert rec["tool"] == "probe" and rec["destination"] == "127.0.0.1"
    assert m["received"] == 10 and m["loss"] == 0 and m["rtt_min_ms"] <= m["rtt_avg_ms"] <= m["rtt_max_ms"]
    assert "jitter_ms" in m


def test_probe_without_targets_is_a_usage_error():
    res = CliRunner().invoke(probe, ["--once", "--print"])
    assert res.exit_code == 2 and "no targets" in res.output


@pytest.mark.integration
def test_probe_iperf3_sweep_over_streams_and_windows():
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["iperf3", "-s", "-p", str(port), "-B", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        res = CliRunner().invoke(probe, ["--iperf3", "127.0.0.1", "--iperf3-port", str(port), "--streams", "1,2",
                                         "--windows", "256K", "--duration", "1", "--once", "--print"])
    finally:
        server.terminate()
        server.wait(10)
    assert res.exit_code == 0, res.output
    recs = [json.loads(x) for x in res.output.splitlines()]
    assert [r["parameters"]["streams"] for r in recs] == ["1", "2"]
    assert all(r["parameters"]["window_requested"] == "256K" and r["metrics"]["throughput_bps"] > 0 for r in recs)
    assert "stream1_throughput_bps" in recs[1]["metrics"] and "stream1_throughput_bps" not in recs[0]["metrics"]
