"""Border traffic model and exporter (issue 3): a real nfcapd receives v5/v9/IPFIX from
three routers; every record, count and timestamp is checked against the truth; the
model's distributions are recovered from a large in-memory sample."""
from __future__ import annotations

import ipaddress
import os
import re
import signal
import socket
import subprocess
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import optimize, special

from conftest import free_port, run
from flowlake.collectors.generate import generate, parse_duration
from flowlake.collectors.traffic import api, exporter, model, ping, truth as truth_mod

START = datetime(2026, 11, 20, tzinfo=timezone.utc)
TZ_UTC = {**os.environ, "TZ": "UTC"}


class Nfcapd:
    """A real nfcapd on a free UDP port writing into its own directory."""

    def __init__(self, tmp: Path):
        self.dir = tmp / "nfcapd"
        self.dir.mkdir()
        self.port = free_port(socket.SOCK_DGRAM)
        self.log = open(tmp / "nfcapd.log", "w")
        self.proc = subprocess.Popen(["nfcapd", "-b", "127.0.0.1", "-p", str(self.port), "-w", str(self.dir),
                                      "-t", "3600", "-B", str(8 << 20), "-I", "gen"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(100):  # bound when the UDP port is taken
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    s.bind(("127.0.0.1", self.port))
                except OSError:
                    # bound; nfcapd sets its big buffer and starts reading just after
                    # (packets sent in that instant were seen dropped under load)
                    subprocess.run(["sleep", "1"])
                    return
            if self.proc.poll() is not None:
                raise AssertionError(f"nfcapd exited: {(tmp / 'nfcapd.log').read_text()}")
            subprocess.run(["sleep", "0.05"])
        raise AssertionError("nfcapd did not bind its port")

    def stop(self):
        if self.proc.poll() is None:
            assert exporter.wait_drained(self.port), "nfcapd did not read its socket queue"
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)
        self.log.close()

    def nfdump(self, *args: str) -> str:
        return run(["nfdump", "-R", str(self.dir), *args], env=TZ_UTC).stdout


@pytest.fixture
def nfcapd(tmp_path, nfdump_bin):
    n = Nfcapd(tmp_path)
    yield n
    n.stop()


def _info(text: str) -> dict:
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}


FMT = "fmt:%ra|%ts|%te|%pr|%sa|%da|%sp|%dp|%pkt|%byt|%flg|%tos|%in|%out|%sas|%das"
FLAGS = "CEUAPRSF"


def _flag_text(v: int) -> str:
    return "".join(c if v & (1 << (7 - i)) else "." for i, c in enumerate(FLAGS))


def _condense_v6(s: str) -> str:
    """nfdump's fmt output shortens long IPv6 text to 7 chars + '..' + 7 chars."""
    return s if len(s) <= 16 else s[:7] + ".." + s[-7:]


def _expected_rows(doc) -> Counter:
    f = doc["_flows"]
    rows = Counter()
    routers = doc["exporters"]
    for r in f:
        ex = routers[int(r["router"])]
        scale = ex["collected_packets"] // max(1, ex["packets"]) if ex["packets"] else 1
        if r["ipv6"]:
            sa = _condense_v6(str(ipaddress.IPv6Address((int(r["src6"][0]) << 64) | int(r["src6"][1]))))
            da = _condense_v6(str(ipaddress.IPv6Address((int(r["dst6"][0]) << 64) | int(r["dst6"][1]))))
        else:
            sa, da = str(ipaddress.IPv4Address(int(r["src4"]))), str(ipaddress.IPv4Address(int(r["dst4"])))
        dp = int(r["dst_port"])
        icmp = int(r["proto"]) in (1, 58)
        dport = f"{dp >> 8}.{dp & 0xFF}" if icmp else str(dp)
        sport = "0" if icmp else str(int(r["src_port"]))
        ts = lambda ms: datetime.fromtimestamp(int(ms) / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        rows[(ex["address"], ts(r["t_start"]), ts(r["t_end"]), int(r["proto"]), sa, da, sport, dport,
              int(r["packets"]) * scale, int(r["bytes"]) * scale,
              _flag_text(int(r["tcp_flags"])) if r["proto"] == 6 else "........", int(r["tos"]),
              int(r["in_if"]), int(r["out_if"]), int(r["src_as"]), int(r["dst_as"]))] += 1
    return rows


def _collected_rows(n: Nfcapd) -> Counter:
    rows = Counter()
    for line in n.nfdump("-q", "-N", "-o", FMT).splitlines():
        p = [x.strip() for x in line.split("|")]
        if len(p) != 16:
            continue
        proto = int(p[3])
        rows[(p[0], p[1], p[2], proto, p[4], p[5], p[6], p[7], int(p[8]), int(p[9]),
              p[10] if proto == 6 else "........", int(p[11]), int(p[12]), int(p[13]),
              int(p[14]), int(p[15]))] += 1
    return rows


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["v5", "v9", "ipfix"])
def test_nfcapd_receives_everything_and_records_roundtrip(protocol, nfcapd, tmp_path):
    truth_path = tmp_path / "truth.json"
    doc = api.generate_day(("127.0.0.1", nfcapd.port), START, 2 * 3600, 12000, protocol, truth_path,
                           seed=11, max_rate=100_000)
    nfcapd.stop()
    written = truth_mod.read(truth_path)
    assert written["totals"] == doc["totals"] and written["totals"]["flows"] == 12000

    info = _info(nfcapd.nfdump("-I"))
    assert int(info["Flows"]) == doc["totals"]["flows"]
    assert int(info["Packets"]) == doc["collected_totals"]["packets"]
    assert int(info["Bytes"]) == doc["collected_totals"]["bytes"]
    assert int(info["Sequence failures"]) == 0

    # per exporter: flows/packets/bytes as the truth says (sampling scale included)
    per = {}
    for line in nfcapd.nfdump("-q", "-N", "-o", "fmt:%ra|%pkt|%byt").splitlines():
        ra, pk, by = (x.strip() for x in line.split("|"))
        c = per.setdefault(ra, [0, 0, 0])
        c[0] += 1
        c[1] += int(pk)
        c[2] += int(by)
    assert len(doc["exporters"]) >= 2
    for e in doc["exporters"]:
        assert per[e["address"]] == [e["flows"], e["collected_packets"], e["collected_bytes"]], e["name"]

    # every field of every record round-trips, timestamps to the millisecond
    expected, got = _expected_rows(doc), _collected_rows(nfcapd)
    assert sum(got.values()) == 12000
    assert got == expected
    if protocol != "v5":
        assert doc["ipv6_flows"] > 0  # IPv6 really travelled


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["v5", "v9"])
def test_sampled_exporter_is_announced_and_truth_states_scaling(protocol, nfcapd, tmp_path):
    doc = api.generate_day(("127.0.0.1", nfcapd.port), START, 600, 3000, protocol, None, seed=5)
    nfcapd.stop()
    sampled = [e for e in doc["exporters"] if e["sampling_rate"] > 1]
    assert sampled and doc["sampling"]["wire_counts_are_sampled"]
    assert int(_info(nfcapd.nfdump("-I"))["Flows"]) == doc["totals"]["flows"]
    flags: dict[str, set] = {}
    for block in nfcapd.nfdump("-o", "raw").split("Flow Record:")[1:]:
        flag = re.search(r"Flags\s+=\s+\S+ NETFLOW \S+ (\w+)", block)
        router = re.search(r"ip exporter\s+=\s+(\S+)", block)
        assert flag and router, block
        flags.setdefault(router.group(1), set()).add(flag.group(1))
    scaled = doc["sampling"]["collector_scales_counts"]
    assert flags[sampled[0]["address"]] == {"Sampled" if scaled else "Unsampled"}
    unsampled = next(e for e in doc["exporters"] if e["sampling_rate"] == 1)
    assert flags[unsampled["address"]] == {"Unsampled"}
    e = sampled[0]
    assert e["collected_packets"] == e["packets"] * (e["sampling_rate"] if scaled else 1)


def _truncnorm_mle(y, a, b):
    def nll(th):
        mu, s = th[0], abs(th[1])
        z = (y - mu) / s
        norm = special.ndtr((b - mu) / s) - special.ndtr((a - mu) / s)
        return -(-0.5 * (z ** 2).sum() - len(y) * np.log(s) - len(y) * np.log(norm))
    res = optimize.minimize(nll, [y.mean(), y.std()], method="Nelder-Mead", options={"xatol": 1e-5, "fatol": 1e-3})
    return res.x[0], abs(res.x[1])


def test_model_distributions_recovered_from_large_sample():
    p = model.ModelParams()
    rng = np.random.default_rng(42)
    pools = model.make_pools(rng, p, True)
    f = model.background(rng, 400_000, int(START.timestamp() * 1000), 86_400_000, p, pools)
    for k, name in enumerate(("tcp_in", "tcp_out", "udp")):
        sc = p.sizes[name]
        x = f["bytes"][f["klass"] == k].astype(float)
        tail = x >= sc.threshold
        n, nt = len(x), int(tail.sum())
        # tail share: binomial, 4 standard errors
        assert abs(nt / n - sc.tail_fraction) < 4 * np.sqrt(sc.tail_fraction * (1 - sc.tail_fraction) / n), name
        # Pareto alpha by the Hill/MLE estimator above the threshold: within 4 standard errors
        alpha = nt / np.log(x[tail] / sc.threshold).sum()
        assert abs(alpha - sc.alpha) < 4 * sc.alpha / np.sqrt(nt), (name, alpha)
        # lognormal body by truncated-normal MLE on log bytes: mu, sigma within 0.05
        mu, sigma = _truncnorm_mle(np.log(x[~tail] + 0.5), np.log(sc.min_bytes), np.log(sc.threshold))
        assert abs(mu - sc.mu) < 0.05 and abs(sigma - sc.sigma) < 0.05, (name, mu, sigma)

    # Zipf popularity: the rank-frequency slope of remote hosts matches -s (top 200 ranks)
    remote = np.where(f["inbound"], f["src4"], f["dst4"])[~f["ipv6"]]
    freq = np.sort(np.unique(remote, return_counts=True)[1])[::-1][:200]
    slope = np.polyfit(np.log(np.arange(1, 201)), np.log(freq), 1)[0]
    assert abs(-slope - p.zipf_s_remote) < 0.1, slope

    # diurnal curve: flows per hour follow 1 + A cos(2 pi (h - peak)/24)
    hours = (f["t_start"] // 3_600_000) % 24
    per_hour = np.bincount(hours, minlength=24) / len(f) * 24
    curve = model.diurnal_weight(np.arange(24) + 0.5, p)
    assert np.abs(per_hour - curve / curve.mean()).max() < 0.05
    # port mix: https is the largest application, as weighted
    apps = np.bincount(f["app"], minlength=len(p.apps)) / len(f)
    w = np.array([a.weight for a in p.apps])
    assert np.abs(apps - w / w.sum()).max() < 0.01


def test_events_listed_in_truth_match_flows():
    p = model.ModelParams()
    start = int(START.timestamp() * 1000)
    f, events = model.generate(p, start, 86_400_000, 300_000, seed=3)
    kinds = Counter(e["kind"] for e in events)
    assert kinds["bulk"] == len(p.bulk) and kinds["scanner"] == len(p.scanners) and kinds["fan-in"] == len(p.fanin)
    for i, e in enumerate(events, 1):
        ev = f[f["event"] == i]
        assert len(ev) == e["flows"] and int(ev["bytes"].sum()) == e["bytes"]
        assert ev["t_start"].min() >= e["start_ms"] and ev["t_end"].max() <= e["end_ms"]
        if e["kind"] == "bulk":  # bytes = rate x duration (records cut at the active timeout)
            assert abs(e["bytes"] * 8 / ((e["end_ms"] - e["start_ms"]) / 1000) - e["rate_bps"]) / e["rate_bps"] < 0.01
        if e["kind"] == "scanner":
            assert len(np.unique(ev["src4"])) == 1 and (ev["packets"] == 1).all() and e["distinct_destinations"] > 100
        if e["kind"] == "fan-in":
            assert len(np.unique(ev["dst4"])) == 1 and e["distinct_sources"] > 100
    # nightly bbftp at 02:00 UTC on a full day
    bb = next(e for e in events if e["name"] == "nightly-bbftp-replication")
    assert bb["start_ms"] == start + 2 * 3_600_000
    assert f["t_start"].min() >= start and f["t_end"].max() < start + 86_400_000


def test_ping_output_has_iputils_format_and_rises_with_bulk(tmp_path):
    real = subprocess.run(["ping", "-D", "-c", "2", "-i", "0.2", "127.0.0.1"], capture_output=True, text=True)
    assert real.returncode == 0, real.stderr
    shape = lambda text: [re.sub(r"\d+(\.\d+)?", "N", ln).replace("127.N.N.N", "ADDR") for ln in text.splitlines()]
    fake = ping.format_ping("127.0.0.1", 1_795_132_800_000, [0.032, 0.043])
    assert shape(fake) == shape(real.stdout)
    # a PingER monitor pings from its own address (-I): iputils names it in the header
    real = subprocess.run(["ping", "-I", "127.0.0.1", "-D", "-c", "2", "-i", "0.2", "127.0.0.1"],
                          capture_output=True, text=True)
    assert real.returncode == 0, real.stderr
    fake = ping.format_ping("127.0.0.1", 1_795_132_800_000, [0.032, 0.043], source="127.0.0.1")
    assert shape(fake) == shape(real.stdout)

    p = model.ModelParams()
    start = int(START.timestamp() * 1000)
    _, events = model.generate(p, start, 86_400_000, 50_000, seed=2)
    probes = ping.write_series(p, events, start, 86_400_000, tmp_path, seed=2)
    bb = next(e for e in events if e["name"] == "nightly-bbftp-replication")
    tgt = bb["ping_target"]
    during = [r for r in probes if r["target"] == tgt and bb["start_ms"] <= r["time_ms"] < bb["end_ms"]]
    quiet = [r for r in probes if r["target"] == tgt and not any(
        e.get("ping_target") == tgt and e["start_ms"] - 600_000 <= r["time_ms"] < e["end_ms"] + 600_000
        for e in events)]
    assert during and quiet
    rtt_during = np.mean([r["avg_rtt_ms"] for r in during if r["avg_rtt_ms"]])
    rtt_quiet = np.mean([r["avg_rtt_ms"] for r in quiet if r["avg_rtt_ms"]])
    expected = np.mean([r["expected_extra_delay_ms"] for r in during])
    assert rtt_during - rtt_quiet > 0.5 * expected > 1.0
    loss_during = 1 - sum(r["received"] for r in during) / sum(r["sent"] for r in during)
    loss_quiet = 1 - sum(r["received"] for r in quiet) / sum(r["sent"] for r in quiet)
    assert loss_during > loss_quiet
    # files are where the truth says and parse back to the same numbers
    some = during[0]
    text = Path(some["file"]).read_text()
    m = re.search(r"(\d+) packets transmitted, (\d+) received", text)
    assert (int(m.group(1)), int(m.group(2))) == (some["sent"], some["received"])
    from flowlake.collectors.active.parsers import parse_file

    rec = parse_file(Path(some["file"]), "auto")[0]  # the monitor's own address: its PingER region
    assert (rec["source"], rec["destination"]) == (p.ping.probe_address, some["target"])
    assert ping.mm1k_loss(0.5, 40) < 1e-12 and abs(ping.mm1k_loss(1.0, 9) - 0.1) < 1e-12


def test_iperf3_results_parse_back_and_drop_under_bulk(tmp_path):
    """Synthetic iperf3 -J tests: the importer reads each file back to the rate, target,
    source and retransmits the truth records, and a path's throughput falls while a bulk
    transfer fills it (capacity left = C * (1 - rho))."""
    from flowlake.collectors.active.parsers import parse_file

    p = model.ModelParams()
    start = int(START.timestamp() * 1000)
    _, events = model.generate(p, start, 86_400_000, 50_000, seed=2)
    tests = ping.write_throughput(p, events, start, 86_400_000, tmp_path, seed=2)
    assert len(tests) == 24 * len(p.ping.targets)
    for t in tests[::17]:
        (rec,) = parse_file(t["file"])
        assert (rec["test_type"], rec["source"], rec["destination"]) == ("throughput", p.ping.probe_address, t["target"])
        assert rec["metrics"]["throughput_bps"] == pytest.approx(t["throughput_bps"])
        assert rec["metrics"]["retransmits"] == t["retransmits"]
        assert rec["end"] - rec["start"] == p.ping.throughput_seconds * 1000
    loaded = [t for t in tests if any(e["kind"] == "bulk" and e["ping_target"] == t["target"]
                                      and e["start_ms"] <= t["time_ms"] < e["end_ms"] for e in events)]
    assert loaded, "no test ran during a bulk transfer"
    for t in loaded:
        quiet = [q["throughput_bps"] for q in tests if q["target"] == t["target"] and q not in loaded]
        assert t["throughput_bps"] < 0.7 * np.mean(quiet), (t, np.mean(quiet))
    for t in tests:  # the stated model: a share of the capacity left
        assert 0.5 <= t["throughput_bps"] / t["capacity_left_bps"] <= 0.99


def test_parquet_truth_roundtrip(tmp_path):
    doc = {"totals": {"flows": 1}, "exporters": [{"name": "a", "flows": 1}, {"name": "b", "flows": 0}]}
    path = truth_mod.write(doc, tmp_path / "t.parquet")
    assert truth_mod.read(path) == doc
    import pyarrow.parquet as pq
    assert pq.read_table(path).column("flows").to_pylist() == [1, 0]


@pytest.mark.parametrize("args, hint", [
    (["--duration", "5x"], "--duration"),
    (["--duration", "0s"], "--duration"),
    (["--target", "127.0.0.1:notaport"], "--target"),
    (["--target", "no-such-host.invalid:2055"], "--target"),
    (["--start", "yesterday-ish"], "--start"),
    (["--speedup", "-3"], "--speedup"),
    (["--truth", "truth.txt"], "--truth"),
    (["--flows", "0"], "--flows"),
])
def test_cli_bad_arguments_name_the_option(args, hint):
    res = CliRunner().invoke(generate, args)
    assert res.exit_code == 2, res.output
    assert hint in res.output


def test_cli_help_and_durations():
    res = CliRunner().invoke(generate, ["--help"])
    assert res.exit_code == 0 and "Examples" in res.output and "--speedup" in res.output
    assert parse_duration("1h30m") == 5400 and parse_duration("24h") == 86400 and parse_duration("45s") == 45


@pytest.mark.integration
def test_cli_exports_with_speedup_and_writes_truth_and_ping(nfcapd, tmp_path):
    """Two model minutes at speedup 60 take about two wall seconds; times stay model times."""
    truth_path = tmp_path / "t.parquet"
    res = CliRunner().invoke(generate, [
        "--protocol", "ipfix", "--target", f"127.0.0.1:{nfcapd.port}", "--start", "2026-11-20T06:00",
        "--duration", "2m", "--rate", "30", "--speedup", "60", "--truth", str(truth_path),
        "--active-dir", str(tmp_path / "active"), "--seed", "9"])
    assert res.exit_code == 0, res.output
    nfcapd.stop()
    doc = truth_mod.read(truth_path)
    assert doc["totals"]["flows"] == 3600 and doc["send"]["seconds"] > 1.5
    info = _info(nfcapd.nfdump("-I"))
    assert int(info["Flows"]) == 3600 and int(info["Sequence failures"]) == 0
    first = datetime.fromtimestamp(int(info["First"]), timezone.utc)
    assert first.strftime("%Y-%m-%d %H:%M") == "2026-11-20 06:00"
    assert int(info["Last"]) < doc["end_ms"] // 1000 + 1
    assert len(list((tmp_path / "active" / "ping").rglob("*.txt"))) == len(doc["ping"]["probes"]) > 0
    assert len(list((tmp_path / "active" / "sweep").rglob("*.csv"))) == len(doc["sweep"]["paths"]) > 0


def test_message_size_sweeps_follow_the_stated_path_model(tmp_path):
    """The sweep CSVs import as active records (the csv parser), and a least-squares line
    through each path's points gives back the truth's a (ms per byte) and l (ms)."""
    from collections import defaultdict

    from flowlake.collectors.active.parsers import parse_file

    params = model.ModelParams()
    start = int(START.timestamp() * 1000)
    truth = ping.write_sweeps(params, [], start, 86_400_000, tmp_path, seed=3)
    assert len(truth) == len(params.ping.targets)
    points = defaultdict(list)
    for f in sorted((tmp_path / "sweep").rglob("*.csv")):
        for r in parse_file(f):
            path = r["parameters"]["path"]
            assert r["test_type"] == "message_size"
            assert r["start"] == start + 3 * 3_600_000 + 2_000 * len(points[path])  # at 03:00, 2 s apart
            points[path].append((float(r["parameters"]["message_size_bytes"]), r["metrics"]["latency_ms"]))
    for t in truth:
        x, y = np.array(points[t["path"]]).T
        assert len(x) == len(params.ping.sweep_sizes) * params.ping.sweep_repeats
        a, l_ms = np.polyfit(x, y, 1)
        assert a == pytest.approx(t["a_ms_per_byte"], rel=0.02) and l_ms == pytest.approx(t["l_ms"], rel=0.05), t
