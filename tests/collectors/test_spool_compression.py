"""nfcapd's spool compression ([collector] spool_compression, issue 32 "Speed and size").

A real nfcapd started the way `flowlake up` starts it (collectors/nfcapd.py) receives real
NetFlow from softflowd; its files must be LZ4-compressed by default (the file header's
compression field, read by nfdump, by the Go reader and by status), hold at most 30 bytes
per flow, and ship into Kafka exactly once. The same run with "none" writes plain files,
so the setting is what makes the difference.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from flowlake.base import config
from flowlake.base.ports import free_port
from flowlake.collectors import nfcapd, ship
from flowlake.collectors.status import spool_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from test_shipper import consume, decode, nfdump_totals  # noqa: E402

import pcapgen  # noqa: E402

pytestmark = pytest.mark.integration


def private_env(tmp_path: Path, name: str, env: dict) -> dict:
    return {**os.environ, "FLOWLAKE_HOME": str(tmp_path / name),
            "FLOWLAKE_COLLECTOR_PORT": str(free_port(socket.SOCK_DGRAM)),
            "FLOWLAKE_COLLECTOR_ROTATE_SECONDS": "60", **env}


def private_cfg(tmp_path: Path, name: str, env: dict):
    return config.load(env=private_env(tmp_path, name, env))


def collect_with_nfcapd(cfg, pcap: Path) -> list[Path]:
    """nfcapd as the stack runs it (its argv from the config), fed by softflowd, stopped."""
    nfcapd.start(cfg)
    try:
        subprocess.run(["softflowd", "-r", str(pcap), "-n", f"127.0.0.1:{cfg.collector.port}", "-v", "9",
                        "-m", "100000"], check=True, capture_output=True, timeout=120)
        time.sleep(0.5)
    finally:
        assert nfcapd.stop(cfg)  # SIGTERM: nfcapd closes and renames its current file
    files = sorted(p for p in nfcapd.spool_dir(cfg).rglob("nfcapd.*") if ".current." not in p.name)
    assert files, "nfcapd wrote no file"
    return files


def nfdump_says(path: Path) -> str:
    out = subprocess.run(["nfdump", "-v", str(path)], capture_output=True, text=True, check=True).stdout
    return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Version"))


def go_stats(path: Path) -> dict:
    res = subprocess.run([str(ship.BINARY), "stats", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def pcap(tmp_path_factory) -> Path:
    ship.build_binary()
    p = tmp_path_factory.mktemp("spool") / "a.pcap"
    pcapgen.write_pcap(p, 5000, seed=32, ipv6_share=0.2, start=time.time() - 3600)
    return p


def test_lz4_by_default_at_most_30_bytes_per_flow_and_shipped_exactly_once(kafka, tmp_path, pcap):
    topic = f"t-spool-{uuid.uuid4().hex[:8]}"
    cfg = private_cfg(tmp_path, "lz4", {"FLOWLAKE_KAFKA_FLOWS_TOPIC": topic,
                                        "FLOWLAKE_KAFKA_LEDGER_TOPIC": f"{topic}-ledger"})
    assert cfg.collector.spool_compression == "lz4"  # the default
    assert nfcapd.argv(cfg)[-1] == "-y"
    admin = AdminClient(cfg.kafka_client_conf())
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)

    files = collect_with_nfcapd(cfg, pcap)
    flows = size = 0
    for f in files:
        assert nfdump_says(f) == "2 - lz4 compressed", f
        assert go_stats(f)["compression"] == "lz4"
        assert nfcapd.file_summary(f) == {"compression": "lz4", "flows": int(nfdump_totals(f)["flows"])}
        flows += int(nfdump_totals(f)["flows"])
        size += f.stat().st_size
    assert flows >= 2000
    assert size / flows <= 30, f"{size / flows:.1f} bytes per flow in the LZ4 spool"
    # what `flowlake status` prints for the spool: the same figure
    st = nfcapd.spool_stats(cfg)
    assert st["bytes_per_flow"] == round(size / flows, 1) and st["flows"] == flows
    assert st["file_compression"] == {"lz4": len(files)} and st["compression"] == "lz4"

    # shipped into Kafka exactly once, the second run skips every file
    for attempt in range(2):
        res = subprocess.run(ship.ship_argv(cfg, [], pending=True), env=ship.child_env(cfg),
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        got = decode(consume(cfg, topic))
        assert len(got) == flows, f"run {attempt + 1}: {len(got)} flows in Kafka, nfdump counts {flows}"
        assert len({(r["source_file"], r["file_seq"]) for r in got}) == flows
        tot = [nfdump_totals(f) for f in files]
        assert sum(r["packets"] for r in got) == sum(int(t["packets"]) for t in tot)
        assert sum(r["bytes"] for r in got) == sum(int(t["bytes"]) for t in tot)
    ledger = ship.read_ledger(cfg)
    assert sorted(ledger) == sorted(str(f.relative_to(nfcapd.spool_dir(cfg))) for f in files)


def test_none_writes_plain_files_and_status_shows_their_size(tmp_path, pcap):
    env = private_env(tmp_path, "plain", {"FLOWLAKE_COLLECTOR_SPOOL_COMPRESSION": "none",
                                          "FLOWLAKE_KAFKA_PORT": "1"})  # status: no broker there
    cfg = config.load(env=env)
    assert "-y" not in nfcapd.argv(cfg)
    files = collect_with_nfcapd(cfg, pcap)
    assert {nfdump_says(f) for f in files} == {"2 - not compressed"}
    flows = sum(int(nfdump_totals(f)["flows"]) for f in files)
    size = sum(f.stat().st_size for f in files)
    assert size / flows > 60  # what the LZ4 default saves
    st = nfcapd.spool_stats(cfg)
    assert st["bytes_per_flow"] == round(size / flows, 1) and st["file_compression"] == {"none": len(files)}
    assert f"{round(size / flows, 1):g} bytes/flow" in spool_line(st) and "writes none" in spool_line(st)
    # `flowlake status`: the collector section's line and its key in --json
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "status", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["spool"]["bytes_per_flow"] == round(size / flows, 1)
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "status"], env={**env, "COLUMNS": "300"},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and f"spool: {round(size / flows, 1):g} bytes/flow" in res.stdout, res.stdout

