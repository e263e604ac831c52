"""`flowlake status` on a stack that is not running: every component reported stopped,
spool usage counted, and a loud warning once unshipped files pass the configured limit."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def test_status_reports_spool_and_warns_over_the_limit(tmp_path):
    spool = tmp_path / "nfcapd"
    spool.mkdir()
    for i in range(3):
        (spool / f"nfcapd.2026112000000{i}").write_bytes(b"\0" * 4000)
    env = {**os.environ, "FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_COLLECTOR_SPOOL_WARN_BYTES": "10000",
           "FLOWLAKE_KAFKA_PORT": "1"}  # nothing listens there: status must not hang or crash
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "status", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout)
    assert {c["state"] for c in st["components"].values()} == {"stopped"}
    assert st["counts"]["spool"]["files"] == 3 and st["counts"]["spool"]["bytes"] == 12000
    assert "above collector.spool_warn_bytes=10000" in st["counts"]["spool"]["warning"]
    table = subprocess.run([sys.executable, "-m", "flowlake.cli", "status"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and "WARNING" in table.stdout

    env["FLOWLAKE_COLLECTOR_SPOOL_WARN_BYTES"] = "1000000"
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "status", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert json.loads(res.stdout)["counts"]["spool"]["warning"] is None
