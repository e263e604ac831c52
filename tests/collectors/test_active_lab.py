"""The bulk-impact lab, short version: real namespaces, tbf, softflowd -> nfcapd, ping,
iperf3; the bulk flow must reach the lake and raise RTT."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

import lake_sql
import nfcapd_capture
from flowlake import impact_lab as lab
from needs import require

pytestmark = pytest.mark.integration


def _lab_namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("fl-lab-")}


@pytest.fixture
def root():
    require("netns", "tbf", why="network namespaces and tbf for the bulk-impact lab")


def test_nfdump_flows_reads_an_interval_without_flows(tmp_path):
    """nfcapd rotates on the hour: a lab run across it leaves a file without flows, which
    nfdump -o json reports as text, not JSON."""
    empty, _ = nfcapd_capture.capture(tmp_path / "spool", lambda port: None)
    assert lab.nfdump_flows(empty.parent) == []


@pytest.mark.root
def test_lab_bulk_impact_short(root, spark, cfg, tmp_path):
    fig = lab.run_lab(seconds=20, rate="50mbit", lake=tmp_path / "lake", cfg=cfg)
    assert fig["bulk_flows_detected"] >= 1
    # the bulk flow is in the lake: the report table and the flows it came from
    bulk = spark.read.parquet(str(tmp_path / "lake" / "reports" / "bulk_transfers"))
    iperf = bulk.where("dst_port = 5201 and bytes > 1000000").collect()
    assert iperf, "no iperf3 bulk flow in lake/reports/bulk_transfers"
    assert 0.3 < iperf[0].link_share <= 1.2  # a 50 Mbit/s bottleneck carries about 50 Mbit/s
    flows = spark.read.option("basePath", str(tmp_path / "lake" / "flows")).parquet(*lake_sql.files(tmp_path / "lake"))
    assert flows.where("dst_port = 5201 and proto = 6").count() >= 1
    assert fig["tests_loaded"] >= 3 and fig["tests_unloaded"] >= 3
    assert fig["rtt_loaded_ms"] > fig["rtt_unloaded_ms"]
    assert not (set(fig["namespaces"]) & _lab_namespaces()), "lab namespaces left behind"


@pytest.mark.root
def test_lab_cleans_up_when_interrupted(root, cfg):
    before = _lab_namespaces()
    proc = subprocess.Popen([sys.executable, "-m", "flowlake.cli", "lab", "bulk-impact", "--seconds", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while time.time() < deadline and not (_lab_namespaces() - before):
        time.sleep(0.2)
    created = _lab_namespaces() - before
    assert created, "the lab did not create its namespaces"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert not (created & _lab_namespaces()), f"namespaces left after SIGTERM: {created & _lab_namespaces()}"
