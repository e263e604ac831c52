"""Active-test parsers on real outputs captured on this machine (iperf3, ping, fping)
and on pScheduler/NetLogger/CSV samples written from their documented formats;
PingER metrics against hand-computed examples."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from flowlake.collectors.active import pinger
from flowlake.collectors.active.cli import active
from flowlake.collectors.active.parsers import parse_file
from flowlake.collectors.active.result import ParseError

DATA = Path(__file__).resolve().parents[1] / "data" / "active"


# ---- PingER metrics, by hand -------------------------------------------------------------
def test_pinger_hand_computed_example():
    # arrival order: 1, 2, 4, 3 (late: a reorder), 4 again (a duplicate); 5 of 5 sent, seq 5 lost
    m = pinger.metrics([(1, 10.0), (2, 12.0), (4, 11.0), (3, 15.0), (4, 11.0)], sent=5)
    assert m["received"] == 4 and m["loss"] == pytest.approx(0.2)
    assert m["duplicates"] == 1 and m["reorders"] == 1
    assert (m["rtt_min_ms"], m["rtt_avg_ms"], m["rtt_max_ms"]) == (10.0, 12.0, 15.0)
    assert m["rtt_median_ms"] == pytest.approx(11.5)
    # sequence order 10,12,15,11 -> IPDV 2, 3, -4; P25 = -1, P75 = 2.5 -> jitter 3.5
    assert m["ipdv_p25_ms"] == pytest.approx(-1.0) and m["ipdv_p75_ms"] == pytest.approx(2.5)
    assert m["jitter_ms"] == pytest.approx(3.5)
    assert m["ipdv_mean_abs_ms"] == pytest.approx(3.0)


def test_pinger_all_lost_and_single_reply():
    m = pinger.metrics([], sent=30)
    assert m["loss"] == 1.0 and "rtt_avg_ms" not in m and "jitter_ms" not in m
    m = pinger.metrics([(7, 3.0)], sent=3)
    assert m["loss"] == pytest.approx(2 / 3) and m["rtt_avg_ms"] == 3.0 and "jitter_ms" not in m


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 5000, allow_nan=False), min_size=3, max_size=40))
def test_pinger_jitter_matches_numpy(rtts):
    m = pinger.metrics(list(enumerate(rtts)), sent=len(rtts))
    ipdv = np.diff(np.array(rtts))
    q75, q25 = np.percentile(ipdv, [75, 25])
    assert m["jitter_ms"] == pytest.approx(q75 - q25, rel=1e-9, abs=1e-9)
    assert m["rtt_avg_ms"] == pytest.approx(float(np.mean(rtts)))
    assert m["rtt_median_ms"] == pytest.approx(float(np.median(rtts)))


# ---- real ping / fping output ---------------------------------------------------------
@pytest.mark.parametrize("name", ["ping_c5.txt", "ping_D_c5.txt"])
def test_ping_matches_pings_own_summary(name):
    text = (DATA / name).read_text()
    (rec,) = parse_file(DATA / name)
    mn, avg, mx, _ = map(float, re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", text).groups())
    sent, recv = map(int, re.search(r"(\d+) packets transmitted, (\d+) received", text).groups())
    m = rec["metrics"]
    assert (m["sent"], m["received"]) == (sent, recv)
    assert m["rtt_min_ms"] == mn and m["rtt_max_ms"] == mx
    # ping averages unrounded RTTs and truncates to 1 us; the lines show rounded RTTs
    assert m["rtt_avg_ms"] == pytest.approx(avg, abs=0.0011)
    assert rec["destination"] == "127.0.0.1" and rec["test_type"] == "rtt" and rec["tool"] == "ping"


def test_ping_D_timestamps_give_start_and_end():
    (rec,) = parse_file(DATA / "ping_D_c5.txt")
    stamps = [float(x) for x in re.findall(r"^\[(\d+\.\d+)\]", (DATA / "ping_D_c5.txt").read_text(), re.M)]
    assert rec["end"] == int(stamps[-1] * 1000)
    assert rec["start"] <= int(stamps[0] * 1000) and rec["parameters"]["time_source"] == "ping -D"


def test_fping_c_matches_fpings_own_summary():
    text = (DATA / "fping_c5.txt").read_text()
    (rec,) = parse_file(DATA / "fping_c5.txt")
    mn, avg, mx = map(float, re.search(r"min/avg/max = ([\d.]+)/([\d.]+)/([\d.]+)", text).groups())
    m = rec["metrics"]
    assert rec["tool"] == "fping" and m["sent"] == 5 and m["loss"] == 0
    assert (m["rtt_min_ms"], m["rtt_max_ms"]) == (mn, mx)
    assert m["rtt_avg_ms"] == pytest.approx(avg, abs=0.0011)


def test_fping_C_uses_the_per_host_rtt_list():
    text = (DATA / "fping_C5.txt").read_text()
    vals = [float(v) for v in text.strip().splitlines()[-1].split(":")[1].split()]
    (rec,) = parse_file(DATA / "fping_C5.txt")
    assert rec["metrics"]["rtt_avg_ms"] == pytest.approx(np.mean(vals))
    q75, q25 = np.percentile(np.diff(vals), [75, 25])
    assert rec["metrics"]["jitter_ms"] == pytest.approx(q75 - q25)


def test_fping_C_with_lost_probes(tmp_path):
    f = tmp_path / "C.txt"
    f.write_text("192.0.2.1 : 1.10 - 1.30 -\n198.51.100.7 : - - - -\n")
    a, b = parse_file(f, "fping")
    assert a["metrics"]["loss"] == 0.5 and a["metrics"]["received"] == 2
    assert b["metrics"]["loss"] == 1.0 and "rtt_avg_ms" not in b["metrics"]


def test_ping_with_loss_and_duplicate(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text(
        "PING 192.0.2.1 (192.0.2.1) 56(84) bytes of data.\n"
        "[1795295766.100000] 64 bytes from 192.0.2.1: icmp_seq=1 ttl=64 time=10.0 ms\n"
        "[1795295767.100000] 64 bytes from 192.0.2.1: icmp_seq=2 ttl=64 time=12.0 ms\n"
        "[1795295767.100500] 64 bytes from 192.0.2.1: icmp_seq=2 ttl=64 time=12.5 ms (DUP!)\n"
        "[1795295769.100000] 64 bytes from 192.0.2.1: icmp_seq=4 ttl=64 time=20.0 ms\n"
        "\n--- 192.0.2.1 ping statistics ---\n"
        "4 packets transmitted, 3 received, +1 duplicates, 25% packet loss, time 3004ms\n"
        "rtt min/avg/max/mdev = 10.0/13.6/20.0/3.9 ms\n")
    (rec,) = parse_file(f)
    m = rec["metrics"]
    assert m["loss"] == 0.25 and m["duplicates"] == 1 and m["received"] == 3
    assert m["rtt_avg_ms"] == pytest.approx(14.0) and m["ipdv_mean_abs_ms"] == pytest.approx(5.0)


# ---- real iperf3 -J --------------------------------------------------------------------
def test_iperf3_tcp_real_output():
    doc = json.loads((DATA / "iperf3_tcp.json").read_text())
    (rec,) = parse_file(DATA / "iperf3_tcp.json")
    m, p = rec["metrics"], rec["parameters"]
    assert rec["test_type"] == "throughput" and p["protocol"] == "TCP"
    assert m["throughput_bps"] == doc["end"]["sum_received"]["bits_per_second"]
    assert m["retransmits"] == doc["end"]["sum_sent"]["retransmits"]
    streams = doc["end"]["streams"]
    assert int(p["streams"]) == len(streams) and p["congestion"] == doc["end"]["sender_tcp_congestion"]
    assert sum(m[f"stream{i}_throughput_bps"] for i in range(len(streams))) == pytest.approx(
        doc["end"]["sum_sent"]["bits_per_second"], rel=1e-6)
    assert m["rtt_min_ms"] == min(s["sender"]["min_rtt"] for s in streams) / 1000
    assert m["intervals"] == len(doc["intervals"])
    assert rec["start"] == doc["start"]["timestamp"]["timesecs"] * 1000


def test_iperf3_udp_real_output():
    doc = json.loads((DATA / "iperf3_udp.json").read_text())
    (rec,) = parse_file(DATA / "iperf3_udp.json")
    s = doc["end"]["sum"]
    assert rec["parameters"]["protocol"] == "UDP"
    assert rec["metrics"]["jitter_ms"] == s["jitter_ms"] and rec["metrics"]["packets"] == s["packets"]
    assert rec["metrics"]["loss"] == s["lost_percent"] / 100


# ---- documented formats ------------------------------------------------------------------
def test_pscheduler_rtt():
    (rec,) = parse_file(DATA / "pscheduler_rtt.json")
    m = rec["metrics"]
    assert rec["tool"] == "pscheduler/ping" and rec["source"] == "192.0.2.10"
    assert m["rtt_avg_ms"] == pytest.approx(11.8) and m["loss"] == 0.1 and m["replies"] == 9
    assert rec["end"] - rec["start"] == 10_000


def test_pscheduler_throughput_latency_trace():
    t, lat, tr = parse_file(DATA / "pscheduler_mixed.json")
    assert t["metrics"]["throughput_bps"] == 941e6 and t["metrics"]["interval_bps_min"] == 930e6
    assert lat["metrics"]["loss"] == pytest.approx(3 / 600)
    assert lat["metrics"]["latency_avg_ms"] == pytest.approx((5.1 * 100 + 5.2 * 400 + 5.4 * 97) / 597)
    assert tr["metrics"]["hops"] == 4 and tr["metrics"]["rtt_last_hop_ms"] == pytest.approx(11.2)
    assert tr["metrics"]["hops_no_reply"] == 1


def test_netlogger_ulm_and_best_practice_lines():
    a, b, c = parse_file(DATA / "netlogger_ulm.log")
    assert a["parameters"]["event"] == "TRANSFER.START" and a["source"] == "192.0.2.10"
    assert a["start"] % 1000 == 250  # DATE=...05.250000
    assert b["metrics"]["file.tp"] == 8947848.5 and b["metrics"]["streams"] == 4
    assert c["parameters"]["status"] == "done ok" and c["metrics"]["val"] == 12.5


def test_csv_sweep_units_and_conditions():
    recs = parse_file(DATA / "sweep_frame_size.csv")
    assert [r["parameters"]["condition"] for r in recs].count("1% loss") == 2
    assert recs[1]["metrics"]["throughput_bps"] == pytest.approx(941e6)
    assert "latency_ms" not in recs[-1]["metrics"] and recs[-1]["metrics"]["loss"] == 1.0


# ---- malformed input: file and line, nothing half-loaded -----------------------------
@pytest.mark.parametrize("name,content,fmt,line,words", [
    ("p.txt", "PING h (1.2.3.4) 56(84) bytes of data.\n64 bytes from 1.2.3.4: icmp_seq=1 ttl=5 time=x ms\n",
     "auto", 2, "unreadable ping reply"),
    ("p2.txt", "PING h (1.2.3.4) 56(84) bytes of data.\n64 bytes from 1.2.3.4: icmp_seq=1 ttl=5 time=1.0 ms\n",
     "ping", 2, "truncated"),
    ("n.log", "DATE=20261120103005 NL.EVNT=a X=1\nDATE=2026 NL.EVNT=b\n", "netlogger", 2, "timestamp"),
    ("n2.log", "DATE=20261120103005 NL.EVNT=a X=1\nDATE=20261120103005 NL.EVNT=a oops\n", "netlogger", 2, "KEY=value"),
    ("s.csv", "frame_size,throughput_mbps\n64,80\n128,81\n256,fast\n", "csv", 4, "not a number"),
    ("s2.csv", "frame_size,throughput_mbps\n64,80\n128\n", "csv", 3, "fields"),
    ("j.json", '{"start": {"timestamp": {"timesecs": 1},\n "test_start": {}}, "end": {}, "intervals": [}', "auto", 2, "JSON"),
])
def test_malformed_files_name_file_and_line(tmp_path, name, content, fmt, line, words):
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(ParseError) as exc:
        parse_file(f, fmt)
    assert exc.value.line == line and str(f) in str(exc.value) and words in str(exc.value)


def test_iperf3_error_document_is_rejected(tmp_path):
    f = tmp_path / "e.json"
    f.write_text('{"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server"}')
    with pytest.raises(ParseError, match="unable to connect"):
        parse_file(f)


# ---- CLI -----------------------------------------------------------------------------
def test_cli_parse_prints_json_lines():
    res = CliRunner().invoke(active, ["parse", str(DATA / "iperf3_tcp.json"), str(DATA / "ping_c5.txt")])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.output.splitlines()]
    assert [x["tool"] for x in lines] == ["iperf3", "ping"]
    assert lines[0]["start"].endswith("Z")


def test_cli_parse_error_names_file_and_line(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("streams,throughput_mbps\n1,x\n")
    res = CliRunner().invoke(active, ["parse", str(f), "--format", "csv"])
    assert res.exit_code == 1 and f"{f}:2" in res.output
