"""`flowlake demo`'s attack (flowlake/demo_attack.py, issue 36) through the stack's real parts
as `flowlake up` starts them: nfcapd (10 s files), the shipper, Kafka, the alerts service
with the DDoS detector and the mitigation loop in its default dry-run. The attack must be
recorded (attacks.json and lake/attacks, what the Attacks dashboard reads) and the loop must
decide what it would announce (mitigations.json and lake/mitigations), nothing sent."""
from __future__ import annotations

import io
import json
import os
import shutil

import pytest
from rich.console import Console
from test_ddos_stack import _wait  # the stack tests' one wait (tests/pipelines)

from flowlake import components, demo_attack
from flowlake.base import config
from flowlake.collectors import nfcapd
from flowlake.pipelines.alerts import service
from flowlake.pipelines.alerts.attacks import AttackStore
from flowlake.pipelines.mitigation import service as mitigation
from flowlake.pipelines.mitigation import store

pytestmark = pytest.mark.integration


def test_the_demo_attack_is_recorded_and_dry_run_decides(kafka, flowlake_home, monkeypatch):
    for k, v in {"FLOWLAKE_ALERTS_START_FROM": "latest", "FLOWLAKE_ALERTS_GROUP_ID": f"demo-attack-{os.getpid()}",
                 "FLOWLAKE_COLLECTOR_ROTATE_SECONDS": "10", "FLOWLAKE_DDOS_WARMUP_MINUTES": "0",
                 "FLOWLAKE_DDOS_MITIGATION": "dry-run"}.items():
        monkeypatch.setenv(k, v)
    config.reset()
    cfg = config.get()
    for path in (cfg.lake / "attacks", cfg.lake / "mitigations", cfg.path("state", "ddos"),
                 cfg.path("state", "alerts")):
        shutil.rmtree(path, ignore_errors=True)
    started = []
    stops = {"nfcapd": nfcapd.stop, "shipper": lambda c: components.get(c, "shipper").managed().stop(timeout=30),
             "alerts": service.stop, "mitigation": mitigation.stop}
    out = io.StringIO()
    try:
        for name, start in (("nfcapd", nfcapd.start), ("shipper", lambda c: components.get(c, "shipper").start()),
                            ("alerts", service.start), ("mitigation", mitigation.start)):
            start(cfg)
            started.append(name)
        _wait(lambda: json.loads(service.status_file(cfg).read_text()).get("assigned"), 60,
              "the alerts service's partitions")
        got = demo_attack.show(cfg, Console(file=out, width=200), "v9", seconds=50)
        victim = demo_attack.victim(cfg)
        assert got["victim"] == victim and got["attack"], out.getvalue()
        assert got["mitigation"] == f"dry-run: would announce rtbh {victim}/32", out.getvalue()
        rows = _wait(lambda: [r for r in AttackStore.from_config(cfg).read() if r["id"] == got["attack"]], 60,
                     "the attack in lake/attacks")
        assert rows[0]["victim"] == victim and rows[0]["attack_class"] == "amplification"
        ev = _wait(lambda: [e for e in store.EventStore.from_config(cfg).read() if e["action"] == "dry-run-announce"],
                   60, "the dry-run decision in lake/mitigations")
        assert ev[0]["prefix"] == f"{victim}/32" and ev[0]["attack_ids"] == got["attack"]
        assert not any(e["action"] == "announce" for e in store.EventStore.from_config(cfg).read())
    finally:
        for name in reversed(started):
            stops[name](cfg)
        config.reset()
    print(out.getvalue())
    assert f"recorded {got['detected_s']} s after it began" in out.getvalue()
