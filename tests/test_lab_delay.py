"""A path's fixed delay (no netem on this kernel: NFQUEUE + the delay line, delay.py) is
real to every layer: a 20 ms path shows a TCP request/response RTT of 2 x 20 ms, a paced
UDP stream a one-way latency of 20 ms, iperf3's kernel RTT at least 40 ms; a TCP window
caps throughput at window/RTT (without the delay 16 KiB would fill the 20 Mbit/s link);
and a Reno transfer under 1 % loss stays within the Mathis bound of the RTT it measured.
Runs `flowlake lab run --no-publish --no-export`: namespaces, tbf, nftables, no stack."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from lab_home import lab_home  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.root]  # network namespaces
DELAY_MS, RATE_BPS, WINDOW = 20.0, 20e6, 16384
SPEC = f"""
study = "delay"
duration_s = 3

[topology.paths.a]
rate = "20mbit"
queue_ms = 50
delay_ms = {DELAY_MS:g}

[probe]
count = 10

[conditions.clean]
[conditions.loss1pct]
loss_percent = 1.0

[[grid]]
kind = "probe"
protocol = ["tcp"]
message_size = [100]
conditions = ["clean"]

[[grid]]
kind = "paced"
protocol = ["udp"]
frame_size = [200]
rate = [200]
conditions = ["clean"]

[[grid]]
kind = "bulk"
protocol = ["tcp"]
congestion_control = ["reno"]

[[grid]]
kind = "bulk"
protocol = ["tcp"]
congestion_control = ["reno"]
window = [{WINDOW}]
conditions = ["clean"]
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    env, spec = lab_home(tmp_path_factory, "lab-delay", SPEC)
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "lab", "run", str(spec), "--no-publish",
                          "--no-export", "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["done"] == 5, res.stderr
    markers = [json.loads(p.read_text()) for p in (spec.parent / "state" / "lab" / "delay").glob("*.json")]
    return {m["label"]: m for m in markers}


def _one(runs, *words, without: str = "\0") -> dict:
    (m,) = [m for label, m in runs.items() if all(w in label for w in words) and without not in label]
    return m


def test_request_response_rtt_is_twice_the_delay(runs):
    probe = _one(runs, "probe")
    rtts = probe["probes"]
    assert len(rtts) == 10
    assert min(rtts) >= 2 * DELAY_MS, f"an RTT of {min(rtts):.2f} ms on a path delayed {DELAY_MS} ms each way"
    # 100 bytes at 20 Mbit/s take 0.04 ms: the rest is the delay line and two Python endpoints on a busy box
    assert probe["metrics"]["latency_p50"] <= 2 * DELAY_MS + 10, rtts


def test_paced_one_way_latency_is_the_delay(runs):
    paced = _one(runs, "paced")["metrics"]
    assert DELAY_MS <= paced["latency_p50"] <= DELAY_MS + 10, paced
    assert paced["dropped_frames"] == 0


def test_tcp_sees_the_rtt_and_fills_the_link(runs):
    bulk = _one(runs, "bulk", "[clean]", without="window=")["metrics"]
    assert bulk["rtt"] >= 2 * DELAY_MS, bulk
    assert 0.7 * RATE_BPS <= bulk["throughput"] <= 1.02 * RATE_BPS, bulk


def test_a_window_caps_throughput_at_window_over_rtt(runs):
    """Linux may advertise up to twice the requested buffer: the bound allows that."""
    capped = _one(runs, "bulk", f"window={WINDOW}")["metrics"]
    ceiling = 2 * WINDOW * 8 / (2 * DELAY_MS / 1000)
    assert capped["throughput"] <= ceiling < 0.5 * RATE_BPS, capped
    assert capped["throughput"] >= 0.2 * WINDOW * 8 / (2 * DELAY_MS / 1000), capped


def test_reno_under_loss_respects_the_mathis_bound(runs):
    lossy = _one(runs, "bulk", "[loss1pct]")["metrics"]
    assert lossy["rtt"] >= 2 * DELAY_MS and lossy["loss"] > 0, lossy
    # Mathis et al. is a model, not a wall: its constant depends on the loss pattern and
    # SACK, a drop of a GSO packet loses several segments in one congestion event (the loss
    # here counts segments), and in a 3 s run the slow start before the first drop (outside
    # the steady-state model) can carry much of the bytes; so allow a factor 3 (measured
    # 1.0-1.7x in most runs, 2.2x in a clean-clone run whose first drop came late)
    assert lossy["throughput"] <= 3 * lossy["mathis_bound"], lossy
    # the delay is what limits it: at the undelayed path's sub-ms RTT the same 1 % loss
    # leaves TCP most of the link (the smoke study's undelayed runs under it: 17 of 20 Mbit/s)
    assert lossy["throughput"] < 0.5 * RATE_BPS, lossy
