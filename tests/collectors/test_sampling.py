"""Sampling per exporter and per sampler (issue 20): real nfcapd, the real sampling tap,
the shipper's resolution; exact values from independent sources."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from nfcapd_capture import capture_tapped, dump_resolved
from pcapgen import udp_payloads

DATA = Path(__file__).resolve().parents[1] / "data" / "routers"


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


# Every form on its own router; two samplers with different rates wherever the form
# names samplers; one sampler's rate changes half way through each run.
RUNS = {
    "v5": ["v5-header"],
    "v9": ["v9-34", "v9-48-49-50", "v9-48-34", "v9-data-34"],
    "ipfix": ["ipfix-149-305", "ipfix-302-305-306", "ipfix-302-309-310", "ipfix-302-311", "ipfix-48-34",
              "ipfix-48-50", "ipfix-data-34", "ipfix-data-305-306", "ipfix-data-309-310", "ipfix-data-311",
              "ipfix-data-50"],
}


def model_params(protocol: str, start_ms: int, duration_ms: int):
    from flowlake.collectors.traffic import api, model
    from flowlake.collectors.traffic.sampling import SINGLE_SAMPLER, Sampler, SamplingPlan

    p = api.params_for(protocol)
    p.routers = []
    for i, form in enumerate(RUNS[protocol]):
        samplers = [Sampler(1, 100 + i)] if form in SINGLE_SAMPLER else [Sampler(1, 4000), Sampler(2, 2000 + i)]
        plan = SamplingPlan(form, samplers, change_at_ms=start_ms + duration_ms // 2,
                            change_sampler=len(samplers) - 1, change_rate=50 + i)
        p.routers.append(model.Router(form, f"127.0.0.{70 + i}", 1.0, sampling_rate=samplers[0].rate, sampling=plan,
                                      lan_ifs=(10, 11, 12, 13)))
    p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []
    return p


@pytest.mark.integration
@pytest.mark.parametrize("protocol", list(RUNS))
def test_every_sampling_form_lands_scaled_exactly_per_sampler(protocol, tmp_path, nfdump_bin):
    """The traffic model exports every form (several samplers, a rate change mid-run) to
    a real nfcapd with the tap beside it; the shipper's flows equal the model's truth per
    exporter and per rate: wire counts x the rate in force when each was exported."""
    from datetime import datetime, timezone

    from flowlake.collectors.traffic import api

    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    duration_ms = 600_000
    params = model_params(protocol, int(start.timestamp() * 1000), duration_ms)
    docs = []

    def feed(port):
        docs.append(api.generate_day(("127.0.0.1", port), start, duration_ms / 1000, 400 * len(params.routers),
                                     protocol, params=params, seed=7, max_rate=50_000))
    f, log = capture_tapped(tmp_path / "spool", tmp_path / "tap", feed)
    flows = dump_resolved(f, tmp_path / "tap")
    doc = docs[-1]
    got: dict = {}
    for r in flows:
        g = got.setdefault(r["exporter"], {}).setdefault(str(r["sampling_rate"]), [0, 0, 0])
        g[0] += 1
        g[1] += r["packets"]
        g[2] += r["bytes"]
    for e in doc["exporters"]:
        want = {rate: [v["flows"], v["lake_packets"], v["lake_bytes"]] for rate, v in e["by_rate"].items()}
        assert len(want) >= 2, e["name"]  # the change (and a second sampler) really happened
        assert got.get(e["address"]) == want, (e["name"], e["sampling_form"])
    assert sum(len(v) for v in got.values()) == sum(len(e["by_rate"]) for e in doc["exporters"])


def _cfg(tmp_path, text: str):
    from flowlake.base import config

    f = tmp_path / "flowlake.toml"
    f.write_text(text)
    return config.load(f, env={})


def test_per_exporter_settings_and_the_legacy_collector_sampling(tmp_path):
    from flowlake.collectors import sampling

    cfg = _cfg(tmp_path, '[exporters."192.0.2.1"]\nsampling = 1000\n'
                         '[exporters."192.0.2.2"]\nforce_sampling = 64\nname = "border-b"\n'
                         '[sampling]\nunannounced = 0\n')
    s = sampling.settings(cfg)
    assert s == {"exporters": {"192.0.2.1": {"sampling": 1000, "force_sampling": 0},
                               "192.0.2.2": {"sampling": 0, "force_sampling": 64}}, "unannounced": 0}
    assert sampling.legacy_warning(cfg) is None
    assert json.loads(sampling.write_settings(cfg).read_text()) == s
    # collector.sampling (was nfcapd -s) keeps working, read as every exporter's setting
    legacy = _cfg(tmp_path, "[collector]\nsampling = 100\n")
    assert sampling.settings(legacy)["exporters"]["*"] == {"sampling": 100, "force_sampling": 0}
    assert '[exporters."*"] sampling = 100' in sampling.legacy_warning(legacy)
    forced = _cfg(tmp_path, "[collector]\nsampling = -10\n")
    assert sampling.settings(forced)["exporters"]["*"] == {"sampling": 0, "force_sampling": 10}
    assert "-s" not in " ".join(__import__("flowlake.collectors.nfcapd", fromlist=["argv"]).argv(forced))


@pytest.mark.parametrize("text, needle", [
    ('[exporters."192.0.2.1"]\nsampling = -5\n', '[exporters."192.0.2.1"] sampling = -5: expected a whole number'),
    ('[exporters."192.0.2.1"]\nforce_sampling = "x"\n', "force_sampling = 'x'"),
    ("[exporters]\nrouter = 5\n", '[exporters] router = 5: expected a table'),
    ("[sampling]\nunannounced = -1\n", "unannounced = -1"),
])
def test_bad_exporter_settings_name_the_key(tmp_path, text, needle):
    from flowlake.base import config
    from flowlake.collectors import sampling

    with pytest.raises(config.ConfigError) as exc:
        sampling.settings(_cfg(tmp_path, text))
    assert needle in str(exc.value)


@pytest.mark.integration
def test_configured_and_forced_rates_and_unknown_samplers(tmp_path, nfdump_bin):
    """A router that announces nothing gets its configured rate; a forced rate wins over
    an announced one; a record naming a sampler never announced is unknown (rate 0,
    wire counts), never 1:1."""
    from datetime import datetime, timezone

    from flowlake.collectors import sampling
    from flowlake.collectors.traffic import api, model
    from flowlake.collectors.traffic.sampling import Sampler, SamplingPlan

    start = datetime(2026, 11, 20, tzinfo=timezone.utc)
    p = api.params_for("v9")
    p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []
    p.routers = [model.Router("silent", "127.0.0.81", 1.0),
                 model.Router("forced", "127.0.0.82", 1.0, sampling=SamplingPlan("v9-48-34", [Sampler(1, 300)])),
                 model.Router("lost-options", "127.0.0.83", 1.0,
                              sampling=SamplingPlan("v9-48-34", [Sampler(3, 300)], announce=False))]
    docs = []
    f, _ = capture_tapped(tmp_path / "spool", tmp_path / "tap", lambda port: docs.append(api.generate_day(
        ("127.0.0.1", port), start, 300, 900, "v9", params=p, seed=3, max_rate=50_000)))
    cfg = _cfg(tmp_path, '[exporters."127.0.0.81"]\nsampling = 100\n[exporters."127.0.0.82"]\nforce_sampling = 7\n')
    flows = dump_resolved(f, tmp_path / "tap", sampling.write_settings(cfg))
    by = {e["address"]: e for e in docs[-1]["exporters"]}
    for addr, rate in (("127.0.0.81", 100), ("127.0.0.82", 7), ("127.0.0.83", 0)):
        mine = [r for r in flows if r["exporter"] == addr]
        assert len(mine) == by[addr]["flows"] and {r["sampling_rate"] for r in mine} == {rate}
        assert sum(r["packets"] for r in mine) == by[addr]["packets"] * max(rate, 1)
        assert sum(r["bytes"] for r in mine) == by[addr]["bytes"] * max(rate, 1)


@pytest.mark.integration
def test_tap_watermark_passes_a_burst_only_once_its_fingerprints_are_on_disk(tmp_path):
    """The shipper resolves a file only once the tap's watermark has passed the file's close
    (collectors/shipper/watermark.go; CI once shipped a burst before the tap had flushed it,
    and a third of its flows landed with sampling_rate 0). The contract, on the real tap: at
    the moment the watermark passes a burst's last datagram, every fingerprint of the burst
    is on disk; stopping the tap (its last flush) adds none."""
    import datetime as dt
    import signal
    import subprocess
    import time

    from flowlake.base.gobuild import SHIPPER
    from flowlake.base.ports import free_port
    from flowlake.collectors.traffic import api, model
    from flowlake.collectors.traffic.sampling import Sampler, SamplingPlan

    port, tap_dir = free_port(socket.SOCK_DGRAM), tmp_path / "tap"
    tap_dir.mkdir()
    log = open(tmp_path / "tap.log", "wb")
    tap = subprocess.Popen([str(SHIPPER.build()), "tap", "--port", str(port), "--dir", str(tap_dir)],
                           stdout=log, stderr=subprocess.STDOUT)

    def fingerprints() -> int:
        return sum(p.stat().st_size for p in (tap_dir / "fp").glob("*.bin")) // 12

    try:
        deadline = time.monotonic() + 10
        while not (tap_dir / "tap.json").exists() and tap.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tap.poll() is None, (tmp_path / "tap.log").read_text()
        time.sleep(0.3)  # the kernel turns receive timestamps on in deferred work
        start = dt.datetime(2026, 11, 21, 6, tzinfo=dt.timezone.utc)
        p = api.params_for("ipfix")
        p.bulk, p.scanners, p.fanin, p.teleimmersion = [], [], [], []
        p.routers = [model.Router("ipfix-302-309-310", f"127.0.0.{95 + i}", 1.0, sampling=SamplingPlan(
            "ipfix-302-309-310", [Sampler(1, 1000), Sampler(2, 250)], announce=True)) for i in range(2)]
        api.generate_day(("127.0.0.1", port), start, 600, 3000, "ipfix", params=p, seed=5, max_rate=50_000)
        sent_ms = time.time() * 1000  # every datagram of the burst arrived before this
        mark = tap_dir / "tap.watermark"
        deadline = time.monotonic() + 5
        seen = 0
        while time.monotonic() < deadline:
            try:
                seen = int(mark.read_text())
            except (OSError, ValueError):
                seen = 0
            if seen >= sent_ms:
                break
            time.sleep(0.01)
        at_mark = fingerprints()
        assert seen >= sent_ms, f"the tap's watermark {seen} never passed the burst's end {sent_ms:.0f} in 5 s"
    finally:
        tap.send_signal(signal.SIGTERM)
        tap.wait(timeout=20)
        log.close()
    assert at_mark > 2000, at_mark  # the burst's records of announced samplers
    assert fingerprints() == at_mark
