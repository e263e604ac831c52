"""The Go shipper (collectors/shipper) against real nfcapd files and a real Kafka broker.

Files come from real exporters: softflowd reads a pcap this test writes and exports
NetFlow v9 and IPFIX to a real nfcapd (one run unsampled, one with `-s 10` so nfcapd
applies and records sampling). The reader is checked field by field against
`nfdump -o pipe` / `-o raw` and against `nfdump -I` totals, for every compression
nfdump 1.7.1 writes; shipped records are consumed read_committed and decoded with
fastavro against FLOW; a SIGKILL mid-file leaves each flow exactly once; corrupt and
truncated files are quarantined while a good one ships.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import nfcapd_capture  # noqa: E402
import pcapgen  # noqa: E402
from conftest import free_port, run  # noqa: E402

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
FLOWLAKE = str(REPO / ".venv" / "bin" / "flowlake")


# ---------------------------------------------------------------- real nfcapd files
def collect(outdir: Path, pcaps: list[tuple[Path, int]], extra: list[str] = ()) -> Path:
    """Run nfcapd on a free UDP port, feed it with softflowd, return the closed file."""
    def feed(port: int) -> None:
        for pcap, version in pcaps:
            run(["softflowd", "-r", str(pcap), "-n", f"127.0.0.1:{port}", "-v", str(version), "-m", "100000"])
            time.sleep(0.3)

    return nfcapd_capture.capture(outdir, feed, extra)[0]


@pytest.fixture(scope="module")
def nffiles(tmp_path_factory) -> dict[str, Path]:
    from flowlake.collectors import ship

    ship.build_binary()
    d = tmp_path_factory.mktemp("nffiles")
    pcap_a, pcap_b = d / "a.pcap", d / "b.pcap"
    pcapgen.write_pcap(pcap_a, 400, seed=21, packets_per_flow=3)
    pcapgen.write_pcap(pcap_b, 300, seed=22, ipv6_share=0.5, packets_per_flow=2)
    plain = collect(d / "plain", [(pcap_a, 9), (pcap_b, 10)])
    sampled = collect(d / "sampled", [(pcap_a, 10)], ["-s", "10"])
    lz4 = collect(d / "lz4", [(pcap_b, 9)], ["-y"])
    out = {"plain": plain, "sampled": sampled, "lz4": lz4}
    for flag, name in (("-y", "rewritten_lz4"), ("-z", "rewritten_lzo"), ("-j", "rewritten_bz2")):
        target = d / name
        run(["nfdump", "-r", str(plain), flag, "-w", str(target)])
        out[name] = target
    return out


def shipper(*args: str) -> subprocess.CompletedProcess:
    from flowlake.collectors import ship

    return subprocess.run([str(ship.BINARY), *args], capture_output=True, text=True)


def dump(path: Path, *flags: str) -> list[dict]:
    res = shipper("dump", *flags, str(path))
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def dump_as_shipped(path: Path) -> list[dict]:
    """The flows as `ship` sends them: times checked against arrival (softflowd's
    wrapped uptimes moved back), none of these test files' flows quarantined."""
    rows = dump(path, "--check-times")
    assert not [r for r in rows if r["quarantine_reason"]]
    return [{k: v for k, v in r.items() if k not in ("time_corrected", "quarantine_reason")} for r in rows]


def nfdump_pipe(path: Path) -> list[dict]:
    """`nfdump -o pipe` (1.7.1): af|first|last|proto|src x4|sport|dst x4|dport|srcas|dstas|in|out|flags|tos|pkts|bytes"""
    res = run(["nfdump", "-q", "-N", "-r", str(path), "-o", "pipe"])
    rows = []
    for line in res.stdout.splitlines():
        f = line.split("|")
        if len(f) < 22:
            continue
        af = int(f[0])

        def addr(words):
            if af == 2:
                return str(ipaddress.IPv4Address(int(words[3])))
            n = 0
            for w in words:
                n = (n << 32) | int(w)
            return str(ipaddress.IPv6Address(n))

        rows.append({
            "time_start": int(f[1]), "time_end": int(f[2]), "proto": int(f[3]),
            "src_addr": addr(f[4:8]), "src_port": int(f[8]), "dst_addr": addr(f[9:13]), "dst_port": int(f[13]),
            "src_as": int(f[14]), "dst_as": int(f[15]), "input_if": int(f[16]), "output_if": int(f[17]),
            "tcp_flags": int(f[18]), "tos": int(f[19]), "packets": int(f[20]), "bytes": int(f[21]),
        })
    return rows


def nfdump_raw_exporters(path: Path) -> list[str]:
    res = run(["nfdump", "-q", "-r", str(path), "-o", "raw"])
    return [line.split("=", 1)[1].strip() for line in res.stdout.splitlines() if "ip exporter" in line]


def nfdump_totals(path: Path) -> dict:
    res = run(["nfdump", "-I", "-r", str(path)])
    out = {}
    for line in res.stdout.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip().lower()] = v.strip()
    return out


# ---------------------------------------------------------------- reader
@pytest.mark.integration
def test_go_unit_tests():
    """The reader's own tests (layout, truncation at every byte, random damage, Avro)."""
    from flowlake.collectors import ship

    res = subprocess.run([ship.go_binary(), "test", "-count=1", "."], cwd=ship.SHIPPER_DIR,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("which", ["plain", "sampled", "lz4"])
def test_reader_matches_nfdump_field_by_field(nffiles, which):
    path = nffiles[which]
    ours = dump(path)
    ref = nfdump_pipe(path)
    assert len(ours) == len(ref) > 100
    for i, (a, b) in enumerate(zip(ours, ref)):
        mismatched = {k: (a[k], v) for k, v in b.items() if a[k] != v}
        assert not mismatched, f"{path} flow {i}: ours vs nfdump {mismatched}"
        assert a["file_seq"] == i
    assert [r["exporter"] for r in ours] == nfdump_raw_exporters(path)
    assert {r["exporter"] for r in ours} == {"127.0.0.1"}
    if which == "plain":
        assert {r["src_addr"] for r in ours if ":" in r["src_addr"]}, "expected IPv6 flows (IPFIX run)"


def test_sampling_rate_from_sampler_record(nffiles):
    plain, sampled = dump(nffiles["plain"]), dump(nffiles["sampled"])
    assert {r["sampling_rate"] for r in plain} == {1}
    assert {r["sampling_rate"] for r in sampled} == {10}
    # nfcapd already multiplied: every sampled count is a multiple of the rate
    assert all(r["packets"] % 10 == 0 and r["bytes"] % 10 == 0 for r in sampled)


@pytest.mark.parametrize("which", ["plain", "sampled", "lz4", "rewritten_lz4", "rewritten_lzo", "rewritten_bz2"])
def test_stats_equal_nfdump_I(nffiles, which):
    res = shipper("stats", str(nffiles[which]))
    assert res.returncode == 0, res.stderr
    ours = json.loads(res.stdout)
    ref = nfdump_totals(nffiles[which])
    for key in ("flows", "packets", "bytes", "flows_tcp", "flows_udp", "flows_icmp", "bytes_tcp", "packets_udp"):
        assert ours[key] == int(ref[key]), f"{which}: {key} ours {ours[key]} nfdump {ref[key]}"


def test_every_compression_decodes_identically(nffiles):
    strip = lambda rows: [{k: v for k, v in r.items() if k != "source_file"} for r in rows]  # noqa: E731
    base = strip(dump(nffiles["plain"]))
    for which, comp in (("rewritten_lz4", "lz4"), ("rewritten_lzo", "lzo"), ("rewritten_bz2", "bz2")):
        assert json.loads(shipper("stats", str(nffiles[which])).stdout)["compression"] == comp
        assert strip(dump(nffiles[which])) == base, which
    assert json.loads(shipper("stats", str(nffiles["lz4"])).stdout)["compression"] == "lz4"


def test_corrupt_and_truncated_files_are_named_errors(nffiles, tmp_path):
    good = nffiles["plain"].read_bytes()
    cases = {
        "garbage": (os.urandom(5000), "bad magic"),
        "truncated": (good[: len(good) // 2], "truncated"),
        "header_only_cut": (good[:30], "truncated file header"),
        "bad_block": (good[:44] + b"\xff\xff\xff\x7f" + good[48:], "corrupt block header"),
    }
    for name, (data, needle) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        res = shipper("stats", str(p))
        assert res.returncode == 1
        assert str(p) in res.stderr and needle in res.stderr, (name, res.stderr)
        assert "panic" not in res.stderr


# ---------------------------------------------------------------- Kafka
def consume(cfg, topic: str, isolation: str = "read_committed", timeout: float = 30.0) -> list:
    """Every message of the topic up to its current end (high watermark)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from flowlake.collectors import kafka

    c = Consumer({**cfg.kafka_client_conf(), "group.id": f"t-{uuid.uuid4()}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": isolation})
    try:
        ends = kafka.end_offsets(cfg, c, topic, isolation)
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends]
        c.assign(tps)
        out, deadline = [], time.monotonic() + timeout
        done = {p for p, end in ends.items() if end == 0}
        while time.monotonic() < deadline and len(done) < len(ends):
            m = c.poll(0.2)
            if m is not None and not m.error():
                if m.offset() < ends[m.partition()]:
                    out.append(m)
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
                continue
            # read_committed skips aborted records and markers: positions tell when we are done
            done |= {tp.partition for tp in c.position(tps) if tp.offset >= ends[tp.partition]}
        if len(done) == len(ends):
            return out
        raise AssertionError(f"{topic}: did not reach the end offsets {ends} in {timeout}s")
    finally:
        c.close()


def decode(msgs) -> list[dict]:
    """Flows of the messages, whatever their wire format (FlowBatch or one Avro record)."""
    from flowlake.pipelines.flow_messages import BATCH, ROW, FlowDecoder

    dec = FlowDecoder()
    out = []
    for m in msgs:
        kind, payload = dec.decode(m.value())
        assert kind in (BATCH, ROW), payload
        rows = payload.to_pylist() if kind == BATCH else [payload]
        for rec in rows:
            for k in ("time_start", "time_end"):
                if not isinstance(rec[k], int):
                    rec[k] = int(rec[k].timestamp() * 1000)
            rec["_key"], rec["_partition"] = m.key(), m.partition()
            out.append(rec)
    return out


def test_read_committed_end_waits_for_a_commit_s_markers(kafka, cfg):
    """A commit returns before the broker writes its markers, so the last stable offset can
    lag the committed records for a moment: end_offsets gives it `settle` seconds, and an
    open transaction (whose records are unreadable) holds it back only that long."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from flowlake.collectors import kafka as kafka_service

    topic = f"t-end-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(cfg.kafka_client_conf())
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    prod = Producer({**cfg.kafka_client_conf(), "transactional.id": topic})
    prod.init_transactions(30)
    cons = Consumer({**cfg.kafka_client_conf(), "group.id": topic, "isolation.level": "read_committed"})
    raw = Consumer({**cfg.kafka_client_conf(), "group.id": topic, "isolation.level": "read_uncommitted"})
    try:
        prod.begin_transaction()
        for i in range(5):
            prod.produce(topic, value=b"%d" % i)
        prod.flush(30)
        t0 = time.monotonic()
        assert kafka_service.end_offsets(cfg, cons, topic, "read_committed", settle=0.5) == {0: 0}
        assert time.monotonic() - t0 >= 0.5
        assert kafka_service.end_offsets(cfg, raw, topic, "read_uncommitted") == {0: 5}
        prod.commit_transaction(30)
        # right after the commit (its markers may still be on the way): 5 records + the marker
        assert kafka_service.end_offsets(cfg, cons, topic, "read_committed", settle=10) == {0: 6}
    finally:
        cons.close()
        raw.close()


def place(cfg, src: Path, name: str) -> Path:
    spool = cfg.path("nfcapd")
    spool.mkdir(parents=True, exist_ok=True)
    dst = spool / name
    shutil.copy(src, dst)
    return dst


def test_ship_decodes_with_fastavro_and_equals_file(kafka, cfg, nffiles):
    f = place(cfg, nffiles["sampled"], "nfcapd.202601010000")
    res = subprocess.run([FLOWLAKE, "ship", str(f)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr + res.stdout
    assert "1 files shipped" in res.stdout
    got = [r for r in decode(consume(cfg, cfg.kafka.flows_topic)) if r["source_file"] == f.name]
    want = dump_as_shipped(f)
    got.sort(key=lambda r: r["file_seq"])
    assert len(got) == len(want)
    keys = {}
    for g, w in zip(got, want):
        w = {**w, "source_file": f.name}
        assert {k: g[k] for k in w} == w
        conv = (g["exporter"], *sorted([g["src_addr"], g["dst_addr"]]))
        assert keys.setdefault(conv, g["_partition"]) == g["_partition"], "one conversation, one partition"
    # the ledger has the file with nfdump's totals; a second ship skips it
    from flowlake.collectors import ship

    entry = ship.read_ledger(cfg)[f.name]
    tot = nfdump_totals(f)
    assert (entry["flows"], entry["packets"], entry["bytes"]) == (int(tot["flows"]), int(tot["packets"]), int(tot["bytes"]))
    again = subprocess.run([FLOWLAKE, "ship", str(f)], capture_output=True, text=True)
    assert again.returncode == 0 and "1 skipped" in again.stdout
    assert len([r for r in decode(consume(cfg, cfg.kafka.flows_topic)) if r["source_file"] == f.name]) == len(want)


def test_corrupt_and_truncated_are_quarantined_good_file_ships(kafka, cfg, nffiles):
    from flowlake.collectors import ship

    good = place(cfg, nffiles["lz4"], "nfcapd.202601020000")
    bad = cfg.path("nfcapd", "nfcapd.202601020005")
    bad.write_bytes(os.urandom(4096))
    data = nffiles["plain"].read_bytes()
    cut = cfg.path("nfcapd", "nfcapd.202601020010")
    cut.write_bytes(data[: len(data) * 2 // 3])
    state = ship.state_file(cfg)
    before = json.loads(state.read_text())["files_quarantined"] if state.exists() else 0
    res = subprocess.run([FLOWLAKE, "ship", "--pending"], capture_output=True, text=True)
    assert res.returncode == 1  # something was wrong, and the output says what
    assert "quarantined nfcapd.202601020005" in res.stderr and "bad magic" in res.stderr
    qdir = ship.quarantine_dir(cfg)
    assert "bad magic" in (qdir / bad.name).with_name(bad.name + ".reason").read_text()
    assert "truncated" in (qdir / (cut.name + ".reason")).read_text()
    assert not bad.exists() and not cut.exists() and (qdir / cut.name).exists()
    assert json.loads(state.read_text())["files_quarantined"] == before + 2
    got = [r for r in decode(consume(cfg, cfg.kafka.flows_topic)) if r["source_file"] == good.name]
    assert len(got) == len(dump(good))
    assert not [r for r in decode(consume(cfg, cfg.kafka.flows_topic, "read_uncommitted"))
                if r["source_file"] == cut.name], "nothing of a corrupt file reaches Kafka"


def test_sigkill_mid_file_then_restart_ships_each_flow_once(kafka, cfg, nffiles):
    from flowlake.collectors import ship

    a = place(cfg, nffiles["plain"], "nfcapd.202601030000")
    b = place(cfg, nffiles["lz4"], "nfcapd.202601030005")
    n_a, n_b = len(dump(a)), len(dump(b))
    # throttled so the kill lands inside file a's transaction
    argv = ship.serve_argv(cfg) + ["--throttle", str(max(20, n_a // 20))]  # about 20 s for a
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(cfg.path("shipper-killed.log"), "wb"))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen = [r for r in decode(consume(cfg, cfg.kafka.flows_topic, "read_uncommitted"))
                    if r["source_file"] == a.name]
            if seen:
                break
        assert seen, "the shipper never started on file a"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert a.name not in ship.read_ledger(cfg), "killed mid-file: a is not in the ledger"
    proc = subprocess.Popen(ship.serve_argv(cfg), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            ledger = ship.read_ledger(cfg)
            if a.name in ledger and b.name in ledger:
                break
            time.sleep(1)
        assert a.name in ledger and b.name in ledger
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert json.loads(ship.state_file(cfg).read_text())["state"] == "stopped"
    committed = decode(consume(cfg, cfg.kafka.flows_topic))
    for f, n in ((a, n_a), (b, n_b)):
        seqs = sorted(r["file_seq"] for r in committed if r["source_file"] == f.name)
        assert seqs == list(range(n)), f"{f.name}: no gap, no duplicate among {n} flows"
    raw = [r for r in decode(consume(cfg, cfg.kafka.flows_topic, "read_uncommitted")) if r["source_file"] == a.name]
    assert len(raw) > n_a, "the killed attempt's records are in the log, hidden by its aborted transaction"


def test_kafka_down_waits_keeps_files_and_stops_cleanly(cfg, nffiles, tmp_path):
    """No broker: the service reports it is waiting, ships nothing, deletes nothing,
    holds the spool lock against a concurrent backfill, and stops on SIGTERM."""
    from flowlake.collectors import ship

    ship.build_binary()
    spool, state = tmp_path / "spool", tmp_path / "shipper.json"
    (spool / "sub").mkdir(parents=True)
    f = spool / "sub" / "nfcapd.202601040000"
    shutil.copy(nffiles["plain"], f)
    dead = f"127.0.0.1:{free_port()}"
    argv = ship.serve_argv(cfg) + ["--brokers", dead, "--spool", str(spool), "--state", str(state),
                                   "--connect-timeout", "1s"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        st = {}
        while time.monotonic() < deadline:
            st = json.loads(state.read_text()) if state.exists() else {}
            if st.get("state") == "waiting_for_kafka":
                break
            time.sleep(0.3)
        assert st.get("state") == "waiting_for_kafka" and dead in st["last_error"], st
        assert st["files_shipped"] == 0 and f.exists()
        # a backfill while the service holds the spool lock is refused, naming the holder
        res = subprocess.run([FLOWLAKE, "ship", "--pending"], capture_output=True, text=True)
        assert res.returncode == 1 and f"another shipper (pid {proc.pid})" in res.stderr, res.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0, proc.stderr.read()
    assert json.loads(state.read_text())["state"] == "stopped"
    assert f.exists(), "never deletes an unshipped file"
