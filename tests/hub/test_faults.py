"""Short form of the fault harness (`make soak` is the long one): SIGKILL each of nfcapd,
the shipper, the Kafka broker and the Spark ingest at random moments while NetFlow
streams in; after `flowlake up` restarts them, the lake equals what nfcapd wrote, per
file, with no flow twice."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def test_exactly_once_under_sigkill_of_every_component():
    res = subprocess.run(
        [sys.executable, "-m", "flowlake.faults", "--flows", "80000", "--faults", "4", "--seed", "7", "--json"],
        capture_output=True, text=True, timeout=1500)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    out = json.loads(res.stdout[res.stdout.index("{"):])
    print(json.dumps({k: v for k, v in out.items() if k != "mismatched_files"}, indent=1))
    killed = {f["killed"] for f in out["faults"]}
    assert killed == {"nfcapd", "shipper", "kafka", "ingest"}
    assert out["flows_nfcapd"] > 40000
    assert out["mismatched_files"] == {}, list(out["mismatched_files"].items())[:5]
    assert out["unexpected_files"] == {}
    assert out["duplicates"] == 0
    assert (out["health_flows_lake"], out["health_duplicates"]) == (out["flows_nfcapd"], 0)  # exporter health once
    assert (out["flows_lake"], out["packets_lake"], out["bytes_lake"]) == \
        (out["flows_nfcapd"], out["packets_nfcapd"], out["bytes_nfcapd"])
    assert res.returncode == 0
