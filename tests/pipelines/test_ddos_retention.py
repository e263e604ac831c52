"""lake/attacks and lake/mitigations (issue 36) are retention tiers: the days older than
[retention] attacks_days / mitigations_days go (Delta DELETE, then VACUUM past the grace),
the others stay, and `flowlake status` shows both tiers with their limits."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from flowlake.base import config
from flowlake.pipelines.alerts.attacks import AttackStore
from flowlake.pipelines.mitigation import store
from flowlake.schemas.attacks import ATTACKS

FLOWLAKE = [sys.executable, "-m", "flowlake.cli"]
TODAY = dt.datetime.now(dt.UTC).date()


def ms(days_ago: int) -> int:
    day = TODAY - dt.timedelta(days=days_ago)
    return int(dt.datetime.combine(day, dt.time(12), dt.UTC).timestamp() * 1000)


def attack_row(aid: str, days_ago: int) -> dict:
    row = {f.name: None for f in ATTACKS.fields}
    row.update(id=aid, victim="198.51.100.7", scope="host", attack_class="udp", protocol=17, peak_pps=1e5,
               peak_bps=1e9, peak_flows=10.0, threshold="pps >= 20000 (absolute)", top_sources="203.0.113.1",
               src_ports="123", dst_ports="80", countries="", exporters="192.0.2.1", input_interfaces="192.0.2.1/3",
               hosts=1, packets=1e6, bytes=1e9, intervals=3, started=ms(days_ago), updated=ms(days_ago) + 30_000,
               ended=ms(days_ago) + 90_000, detected_at=ms(days_ago) + 5_000)
    return row


def cli(home: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    e = {**os.environ, "FLOWLAKE_HOME": str(home), "FLOWLAKE_KAFKA_PORT": "1", **env}
    res = subprocess.run([*FLOWLAKE, *args], env=e, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"{args} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res


def test_attacks_and_mitigations_expire_by_their_days_keys(tmp_path):
    home = tmp_path / "home"
    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(home)})
    assert (cfg.retention.attacks_days, cfg.retention.mitigations_days) == (365, 365)  # the defaults
    attacks = AttackStore.from_config(cfg)
    attacks.save([attack_row("old000000001", 40), attack_row("new000000001", 2)])
    events = store.EventStore.from_config(cfg)
    events.append([store.event("dry-run-announce", "rtbh", "198.51.100.7/32", "198.51.100.7/32", "r",
                               attack_ids=[aid], at=ms(age) / 1000) for aid, age in
                   (("old000000001", 40), ("old000000001", 35), ("new000000001", 2))])
    env = {"FLOWLAKE_RETENTION_ATTACKS_DAYS": "30", "FLOWLAKE_RETENTION_MITIGATIONS_DAYS": "10"}

    st = json.loads(cli(home, "status", "--json", env=env).stdout)["retention"]
    tiers = {t["tier"]: t for t in st["tiers"]}
    assert tiers["attacks"]["limit"] == "30 days" and tiers["attacks"]["units"] == 2
    assert tiers["mitigations"]["limit"] == "10 days" and tiers["mitigations"]["units"] == 3
    assert tiers["attacks"]["oldest"] == (TODAY - dt.timedelta(days=40)).isoformat()
    shown = cli(home, "status", env=env).stdout
    assert "attacks" in shown and "mitigations" in shown and "30 days" in shown, shown

    dry = json.loads(cli(home, "retention", "--dry-run", "--json", env=env).stdout)
    gone = sorted((u["tier"], u["day"]) for u in dry["remove"] if u["tier"] in ("attacks", "mitigations"))
    old = lambda n: (TODAY - dt.timedelta(days=n)).isoformat()  # noqa: E731
    assert gone == [("attacks", old(40)), ("mitigations", old(40)), ("mitigations", old(35))]

    cli(home, "retention", "--json", env={**env, "FLOWLAKE_COMPACTION_RETIRED_GRACE_MINUTES": "0"})
    assert [r["id"] for r in attacks.read()] == ["new000000001"]
    assert [(e["attack_ids"], e["date"]) for e in events.read()] == [("new000000001", old(2))]
    assert not (cfg.lake / "attacks" / f"date={old(40)}").exists()  # vacuumed past the grace
    assert not list((cfg.lake / "mitigations").glob(f"date={old(35)}/*.parquet"))
    # the detector and the loop keep writing after a pass
    attacks.save([attack_row("new000000002", 1)])
    assert sorted(r["id"] for r in attacks.read()) == ["new000000001", "new000000002"]
