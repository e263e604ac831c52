"""Records nfcapd 1.7.1 cannot decode, decoded by flowlake (issue 32, part 2;
docs/design/nfcapd-gaps.md): the traffic model exports each form from its own exporter
(collectors/traffic/gaps.py), a real nfcapd stores them (and loses what it loses), the
real sampling tap reads the same datagrams, and the shipper's rows equal the model's truth
row for row; the records completed and the ones that could not be decoded are counted
per exporter with the reason; nothing else is lost and nothing lands twice."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections import Counter

import pytest

from flowlake.base.gobuild import SHIPPER
from flowlake.collectors.traffic import gaps
from flowlake.collectors.traffic.exporter import open_socket
from nfcapd_capture import capture_tapped

KEYS = ("exporter", "time_start", "time_end", "src_addr", "dst_addr", "src_port", "dst_port", "proto", "input_if",
        "output_if", "packets", "bytes", "icmp_type", "icmp_code", "biflow_half")
NAT = ("src_addr_nat", "dst_addr_nat", "src_port_nat", "dst_port_nat", "nat_event")
# the element each form's own decode completes, and how nfcapd alone stores it
MAIN = {"micro": "times from flowStart/EndMicroseconds 154/155",
        "nat": "time from observationTimeMilliseconds 323",
        "icmp": "ICMP type/code from the destination port",
        "frame": "addresses from packet section 315", "reverse": "reverse elements (RFC 5103)",
        "physif": "interfaces from physical interfaces 252/253"}


def key(r: dict, form: str) -> tuple:
    extra = NAT if form == "nat" else ("tcp_flags",) if form == "reverse" else ()
    return tuple(r.get(k) for k in (*KEYS, *extra))


def dump(path, tap_dir=None, counts=None) -> list[dict]:
    argv = [str(SHIPPER.build()), "dump"]
    if tap_dir is not None:
        argv += ["--tap-dir", str(tap_dir)]
    if counts is not None:
        argv += ["--decode-counts", str(counts)]
    out = subprocess.run([*argv, str(path)], capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    d = tmp_path_factory.mktemp("gaps")
    start = int(dt.datetime.now(dt.UTC).timestamp() * 1000) - 3_600_000
    exports = gaps.build(start, 1_800_000, 300, seed=32)

    def feed(port: int) -> None:
        for ex in exports.values():
            sock = open_socket(ex.exporter, "127.0.0.1")
            for p in ex.datagrams:
                sock.sendto(p, ("127.0.0.1", port))
                time.sleep(0.0003)

    nf, log = capture_tapped(d / "spool", d / "tap", feed)
    assert "Bad Packets: 0" in log and "Sequence Errors: 0" in log, log[-800:]
    return nf, d / "tap", exports, d


@pytest.mark.integration
def test_the_lake_holds_the_routers_values_row_for_row(capture):
    nf, tap_dir, exports, d = capture
    rows = dump(nf, tap_dir, d / "counts.json")
    by = {}
    for r in rows:
        by.setdefault(r["exporter"], []).append(r)
    for form, ex in exports.items():
        got, want = Counter(key(r, form) for r in by[ex.exporter]), Counter(key(r, form) for r in ex.rows)
        missing, extra = want - got, got - want
        assert not missing and not extra, (form, list(missing)[:2], list(extra)[:2])
    # exactly-once keys: one row per (file, file_seq), a reverse half keyed -(its record's + 1)
    seqs = [r["file_seq"] for r in rows]
    assert len(seqs) == len(set(seqs)) == sum(len(ex.rows) for ex in exports.values())
    assert sum(r["biflow_half"] == 2 for r in by[exports["reverse"].exporter]) > 50


@pytest.mark.integration
def test_nfcapd_alone_loses_what_the_tap_completes(capture):
    """Without the tap's records the same file shows what nfcapd 1.7.1 lost (so the test
    above proves flowlake's own decode, not nfcapd's)."""
    nf, _, exports, _ = capture
    by: dict[str, list[dict]] = {}
    for r in dump(nf):
        by.setdefault(r["exporter"], []).append(r)
    assert all(r["time_start"] == r["time_end"] == 0 for f in ("micro", "nat") for r in by[exports[f].exporter])
    icmp = [r for r in by[exports["icmp"].exporter] if r["proto"] in (1, 58)]
    assert icmp and all(r["dst_port"] == 0 for r in icmp)
    frame = by[exports["frame"].exporter]
    assert all(r["src_addr"] == r["dst_addr"] == "0.0.0.0" and r["src_port"] == 0 for r in frame)
    phys = by[exports["physif"].exporter]
    assert all(r["input_if"] == r["output_if"] == 0 for r in phys) and phys[0]["src_addr"] != "0.0.0.0"
    # RFC 5103: the reverse flags and times overwrite the forward ones in nfcapd's record
    rev = exports["reverse"]
    truth = Counter(key(r, "reverse") for r in rev.rows if r["biflow_half"] == 1)
    alone = Counter(key(r, "reverse") for r in by[rev.exporter] if r["biflow_half"] == 1)
    assert sum((truth - alone).values()) > len(truth) // 2


@pytest.mark.integration
def test_completed_and_undecodable_are_counted_per_exporter(capture):
    _, tap_dir, exports, d = capture
    shipped = json.loads((d / "counts.json").read_text())
    tap = {e["address"]: e for e in json.loads((tap_dir / "tap.json").read_text())["exporters"].values()}
    for form, ex in exports.items():
        if form in MAIN:
            assert shipped[ex.exporter]["completed"][MAIN[form]] == ex.completed[MAIN[form]], form
            assert tap[ex.exporter]["decoded"][MAIN[form]] == ex.completed[MAIN[form]], form
        assert (tap[ex.exporter].get("undecodable") or {}) == ex.undecodable, form
    assert exports["nat"].undecodable["NAT event without addresses"] > 0
    assert exports["frame"].undecodable["packet section is not a parseable frame"] > 0
    assert exports["reverse"].undecodable["truncated reverse element"] > 0
    # a frame that does not parse has no correction: the shipper says so, and ships it as nfcapd stored it
    frame = shipped[exports["frame"].exporter]["not_completed"]
    assert sum(frame.values()) == exports["frame"].undecodable["packet section is not a parseable frame"]


def test_the_model_encodes_microsecond_times_exactly():
    for ms in (0, 1, 999, 1_795_857_279_588, 1_795_857_279_999):
        x = gaps.ntp(ms)
        secs, frac = x >> 32, x & 0xFFFFFFFF
        assert (secs - gaps.NTP_EPOCH) * 1000 + (frac * 1000 >> 32) == ms


def test_frames_carry_the_flow():
    import numpy as np  # noqa: PLC0415  (only this test)

    from flowlake.collectors.traffic import api, model  # noqa: PLC0415  (only this test)

    f, _ = model.generate(api.params_for("ipfix"), 0, 600_000, 200, seed=3, allow_v6=True)
    for fl in f:
        fr = gaps.frame_of(fl)
        off = 18 if int(fl["dst_port"]) % 2 else 14
        assert fr[off - 2:off] == (b"\x86\xdd" if fl["ipv6"] else b"\x08\x00")
        assert len(fr) > off + (40 if fl["ipv6"] else 20)
    assert np.any(f["ipv6"])


def test_status_counts_own_decode_per_exporter(tmp_path):
    """`flowlake status`: the shipper's completed / not completed counts and the tap's
    undecodable reasons, per exporter, in the sampling status and its printed table."""
    import io  # noqa: PLC0415  (only this test)

    from rich.console import Console  # noqa: PLC0415  (only this test)

    from flowlake.base import config  # noqa: PLC0415  (only this test)
    from flowlake.collectors import sampling  # noqa: PLC0415  (only this test)

    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path)})
    state = cfg.path("state", "shipper.json")
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"own_decode": {"127.0.0.84": {
        "completed": {"addresses from packet section 315": 193},
        "not_completed": {"no record of it from the tap (addresses 0)": 7}}}}))
    tap = sampling.tap_dir(cfg)
    tap.mkdir(parents=True)
    (tap / "tap.json").write_text(json.dumps({"exporters": {
        "127.0.0.84/4": {"address": "127.0.0.84", "domain": 4, "samplers": {}, "forms": {},
                         "undecodable": {"packet section is not a parseable frame": 7}},
        "127.0.0.85/5": {"address": "127.0.0.85", "domain": 5, "samplers": {}, "forms": {},
                         "undecodable": {"truncated reverse element": 3}}}}))
    st = sampling.status(cfg)
    own = st["own_decode"]
    assert own["127.0.0.84"]["completed"] == {"addresses from packet section 315": 193}
    assert own["127.0.0.84"]["undecodable"] == {"packet section is not a parseable frame": 7}
    assert own["127.0.0.85"] == {"completed": {}, "not_completed": {},
                                 "undecodable": {"truncated reverse element": 3}}
    out = io.StringIO()
    sampling.print_status(Console(file=out, width=250), st)
    text = out.getvalue()
    assert "records nfcapd could not decode" in text and "truncated reverse element" in text
    assert "193" in text and "packet section is not a parseable frame" in text


@pytest.mark.integration
def test_the_lake_equals_the_truth_across_a_kill(capture, kafka, tmp_path_factory):
    """The shipper service completes the records from the tap's directory, is SIGKILLed
    inside the file's transaction and restarted: the lake holds every row of the truth
    once (file_seq without gap or duplicate, reverse halves included), the shipper's state
    counts the records completed per exporter."""
    import shutil  # noqa: PLC0415  (only this test)
    import signal  # noqa: PLC0415  (only this test)

    import duckdb  # noqa: PLC0415  (only this test)
    from test_shipper import consume, decode  # noqa: PLC0415  (only this test)

    from flowlake.base import config, delta  # noqa: PLC0415  (only this test)
    from flowlake.collectors import kafka as kafka_service  # noqa: PLC0415  (only this test)
    from flowlake.collectors import sampling, ship  # noqa: PLC0415  (only this test)
    from flowlake.pipelines import ingest  # noqa: PLC0415  (only this test)

    nf, tap_dir, exports, _ = capture
    cfg = config.load(env={**__import__("os").environ, "FLOWLAKE_HOME": str(tmp_path_factory.mktemp("gaps-home")),
                           "FLOWLAKE_KAFKA_FLOWS_TOPIC": "flows.test-gaps",
                           "FLOWLAKE_KAFKA_ACTIVE_TOPIC": "active.test-gaps",
                           "FLOWLAKE_KAFKA_LEDGER_TOPIC": "ledger.test-gaps"})
    kafka_service.ensure_topics(cfg)
    shutil.copytree(tap_dir, sampling.tap_dir(cfg))
    spool = ship.spool_dir(cfg)
    spool.mkdir(parents=True, exist_ok=True)
    name = nf.name
    n_rows = sum(len(ex.rows) for ex in exports.values())
    shutil.copy(nf, spool / name)
    log = open(cfg.path("shipper-killed.log"), "wb")
    proc = subprocess.Popen(ship.serve_argv(cfg) + ["--throttle", str(n_rows // 15)], stdout=subprocess.DEVNULL,
                            stderr=log)
    try:
        deadline = time.monotonic() + 60
        seen = []
        while time.monotonic() < deadline and not seen:
            seen = [r for r in decode(consume(cfg, cfg.kafka.flows_topic, "read_uncommitted"))
                    if r["source_file"] == name]
        assert seen, "the shipper never started on the file"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    assert name not in ship.read_ledger(cfg), "killed mid-file"
    proc = subprocess.Popen(ship.serve_argv(cfg), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and name not in ship.read_ledger(cfg):
            time.sleep(1)
        assert name in ship.read_ledger(cfg)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    own = json.loads(ship.state_file(cfg).read_text())["own_decode"]
    for form, ex in exports.items():
        if form in MAIN:
            assert own[ex.exporter]["completed"][MAIN[form]] == ex.completed[MAIN[form]], form

    ingest.run(cfg, once=True)
    files = delta.version_files(cfg.lake / "flows")[1]
    cols = ", ".join(k for k in (*KEYS, *NAT, "tcp_flags", "file_seq") if k not in ("time_start", "time_end"))
    got = duckdb.connect().execute(
        f"select {cols}, epoch_ms(time_start), epoch_ms(time_end) from read_parquet({files!r}, union_by_name = true) "
        "where source_file = ?", [name]).fetchall()
    names = [k for k in (*KEYS, *NAT, "tcp_flags", "file_seq") if k not in ("time_start", "time_end")]
    lake = [dict(zip((*names, "time_start", "time_end"), g, strict=True)) for g in got]
    seqs = sorted(r["file_seq"] for r in lake)
    assert len(seqs) == len(set(seqs)) == n_rows, "each row once"
    for form, ex in exports.items():
        mine = Counter(key(r, form) for r in lake if r["exporter"] == ex.exporter)
        assert mine == Counter(key(r, form) for r in ex.rows), form
