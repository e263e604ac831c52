"""The Attacks dashboard's mitigation part (issue 36): the `mitigations_in_force` dataset
(superset/datasets.yaml) over a real lake/mitigations written by the loop's EventStore, and
the dashboard's charts in the provisioned bundle. The browser test renders them
(tests/hub/test_superset_browser.py, slug attacks)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pyarrow.dataset as pads
import yaml
from deltalake import DeltaTable

from flowlake import superset_cli
from flowlake.base import config
from flowlake.pipelines.mitigation import store

REPO = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2026, 11, 27, 23, 59, tzinfo=dt.UTC).timestamp()  # the events span midnight: two partitions


def in_force_sql() -> str:
    spec = yaml.safe_load((REPO / "superset" / "datasets.yaml").read_text())
    return next(d for d in spec["derived"] if d["name"] == "mitigations_in_force")["sql"]


def test_mitigations_in_force_is_the_routes_not_withdrawn_since(tmp_path):
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path)})
    ev = store.EventStore.from_config(cfg)

    def e(action, route, at, reason="r", ids=("a1",), origin="auto", method="rtbh"):
        return store.event(action, method, route.split(" ")[0], route, reason, attack_ids=list(ids), origin=origin,
                           session="established", at=T0 + at)
    ev.append([e("announce", "192.0.2.10/32", 0, "udp attack a1"),                    # in force
               e("announce", "192.0.2.11/32", 1), e("withdraw", "192.0.2.11/32", 120),  # withdrawn
               e("failed", "192.0.2.12/32", 2, "BGP session is active (retrying)"),     # not delivered yet
               e("dry-run-announce", "192.0.2.13/32", 3), e("dry-run-withdraw", "192.0.2.13/32", 60),
               e("dry-run-announce", "192.0.2.13/32", 90, "back"),                     # again, since 90 s
               e("refused", "", 4, "outside"),                                          # never a route
               e("announce", "192.0.2.14/32", 5, "operator x: test", (), "operator"),
               e("failed", "192.0.2.10/32", 200, "session down"),                       # a1's route, later failing
               e("announce", "[destination: 192.0.2.15/32][protocol: ==udp]", 6, method="flowspec")])
    ev.append([e("withdraw", "192.0.2.14/32", 300)])  # a second commit: the operator's route went
    con = duckdb.connect()
    files = DeltaTable(str(cfg.lake / "mitigations")).file_uris()
    con.register("mitigations", pads.dataset(files, format="parquet", partitioning="hive").to_table())
    rows = con.execute(f"SELECT route, state, since, attack_ids, origin, reason, last_reason FROM "
                       f"({in_force_sql().replace('${table_mitigations}', 'mitigations')}) ORDER BY route").fetchall()
    got = {r[0]: r[1:] for r in rows}
    assert set(got) == {"192.0.2.10/32", "192.0.2.12/32", "192.0.2.13/32",
                        "[destination: 192.0.2.15/32][protocol: ==udp]"}
    since = {k: v[1].timestamp() for k, v in got.items()}
    assert got["192.0.2.10/32"][0] == "failed, retrying" and since["192.0.2.10/32"] == T0
    assert got["192.0.2.10/32"][4:] == ("udp attack a1", "session down")  # why it went up; the latest word
    assert got["192.0.2.12/32"][0] == "failed, retrying"
    assert got["192.0.2.13/32"][0] == "dry-run: would announce" and since["192.0.2.13/32"] == T0 + 90
    assert got["[destination: 192.0.2.15/32][protocol: ==udp]"][0] == "announced"
    assert got["192.0.2.10/32"][2] == "a1" and got["192.0.2.10/32"][3] == "auto"


def test_the_attacks_dashboard_shows_the_mitigations(tmp_path):
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path)})
    bundle = superset_cli._bundle_module().build(cfg)
    dash = next(yaml.safe_load(t) for n, t in bundle.files.items() if n == "dashboards/attacks.yaml")
    charts = {yaml.safe_load(t)["slice_name"]: yaml.safe_load(t) for n, t in bundle.files.items()
              if n.startswith("charts/")}
    datasets = {yaml.safe_load(t)["uuid"]: yaml.safe_load(t)["table_name"] for n, t in bundle.files.items()
                if n.startswith("datasets/")}
    want = {"Mitigations in force": "mitigations_in_force", "Mitigation history": "mitigations",
            "Mitigation events per hour, by action": "mitigations"}
    for title, table in want.items():
        assert datasets[charts[title]["dataset_uuid"]] == table, title
        assert charts[title]["uuid"] in str(dash["position"]), title
    # the in-force view and the history read lake/mitigations (its columns from schemas/mitigations.py)
    assert {"route", "reason", "action"} <= set(bundle.views["mitigations"].replace('"', " ").split())
