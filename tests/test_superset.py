"""Superset provisioned from superset/*.yaml over a demo lake: REST checks, and the
bundle/secret/lake-confinement logic. Real Superset (its own venv), started once."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parent))
from superset_lake import superset_up  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SUPERSET_PY = REPO / ".venv-superset" / "bin" / "python"


@pytest.fixture(scope="module")
def superset(cfg, request):
    # One Superset for the whole run (both Superset test modules); stopped at session end.
    return superset_up(cfg, request.config)


@pytest.fixture(scope="module")
def api(superset):
    creds = superset["creds"]
    s = requests.Session()
    r = s.post(creds["url"] + "/api/v1/security/login",
               json={"username": creds["username"], "password": creds["password"], "provider": "db", "refresh": False})
    assert r.status_code == 200, r.text
    s.headers["Authorization"] = "Bearer " + r.json()["access_token"]
    s.base = creds["url"]
    return s


# ---- unit: bundle and SQL fragments (no Superset needed) ---------------------------------
def _bundle_mod():
    from flowlake import superset_cli

    return superset_cli._bundle_module()


def test_direction_sql_matches_python_ipaddress():
    import ipaddress

    import duckdb
    import numpy as np

    prefixes = ["10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32"]
    nets = [ipaddress.ip_network(p) for p in prefixes]
    rng = np.random.default_rng(3)
    addrs = [str(ipaddress.ip_address(int(x))) for x in rng.integers(0, 2**32, 300)]
    addrs += ["10.0.0.0", "10.255.255.255", "11.0.0.0", "9.255.255.255", "192.0.2.255", "192.0.3.0",
              "2001:db8::1", "2001:db9::1", "2001:db8:ffff::5", "fe80::1"]
    pairs = [(a, b) for a, b in zip(addrs, reversed(addrs))]
    sql = _bundle_mod().direction_sql(prefixes)
    con = duckdb.connect()
    con.execute("CREATE TABLE t(src_addr VARCHAR, dst_addr VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?)", pairs)
    got = con.execute(f"SELECT src_addr, dst_addr, {sql} FROM t").fetchall()

    def local(a):
        ip = ipaddress.ip_address(a)
        return any(ip.version == n.version and ip in n for n in nets)

    for src, dst, direction in got:
        s, d = local(src), local(dst)
        want = "internal" if s and d else "inbound" if d else "outbound" if s else "transit"
        assert direction == want, (src, dst)
    assert {g[2] for g in got} >= {"inbound", "outbound", "transit"}


def test_bad_prefix_and_missing_table_are_reported(cfg):
    mod = _bundle_mod()
    with pytest.raises(mod.BundleError, match="2001:db8::/33"):
        mod.direction_sql(["2001:db8::/33"])
    # a registry without report tables: report charts skipped by name, flow charts kept
    from flowlake.schemas import FLOW, FLOWS_TABLE

    bundle = mod.build(cfg, registry={"Flow": FLOW, "flows": FLOWS_TABLE})
    assert any("top_talkers" in msg and "not declared" in msg for msg in bundle.skipped)
    assert "Largest flows" in bundle.charts["daily-operations"]
    assert "datasets/top_talkers.yaml" not in bundle.files


def test_every_chart_has_query_context_and_fixed_uuids(cfg):
    mod = _bundle_mod()
    a, b = mod.build(cfg), mod.build(cfg)
    assert a.files == b.files  # deterministic: same UUIDs, same YAML
    import yaml

    charts = {n: yaml.safe_load(t) for n, t in a.files.items() if n.startswith("charts/")}
    assert len(charts) >= 20
    datasets = {yaml.safe_load(t)["uuid"] for n, t in a.files.items() if n.startswith("datasets/")}
    for name, chart in charts.items():
        qc = json.loads(chart["query_context"])
        assert qc["queries"], name
        assert chart["dataset_uuid"] in datasets, name


def test_secrets_generated_once_mode_600(cfg):
    from flowlake import superset_cli

    first = superset_cli.secrets(cfg)
    path = cfg.path("superset", "secrets.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert superset_cli.secrets(cfg) == first
    assert len(first["secret_key"]) >= 32


def test_config_refuses_default_secret(tmp_path):
    env = {**os.environ, "FLOWLAKE_SUPERSET_STATE_DIR": str(tmp_path),
           "FLOWLAKE_SUPERSET_SECRET_KEY": "CHANGE_ME_TO_A_COMPLEX_RANDOM_SECRET"}
    code = "import runpy; runpy.run_path('superset/superset_config.py')"
    res = subprocess.run([str(SUPERSET_PY), "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert res.returncode != 0 and "real SECRET_KEY" in res.stderr


def test_lake_connection_is_confined_and_read_only(tmp_path, cfg):
    """The DuckDB hooks of superset_config.py, run in Superset's venv on a real engine."""
    lake = tmp_path / "lake"
    (lake / "t").mkdir(parents=True)
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    code = f"""
import runpy, sqlalchemy as sa
conf = runpy.run_path('superset/superset_config.py')
eng = sa.create_engine('duckdb:///:memory:')
with eng.connect() as c:
    c.execute(sa.text("SELECT 1"))
    for q in ["SELECT * FROM read_csv('{outside}')", "SET enable_external_access = true"]:
        try:
            c.execute(sa.text(q)); print('ALLOWED', q)
        except Exception as e:
            print('BLOCKED', q)
for q in ["COPY (SELECT 1) TO '{lake}/t/x.csv'", "ATTACH '{lake}/x.db'", "SELECT 1"]:
    try:
        conf['_reject_writes'](q); print('ALLOWED', q)
    except conf['ReadOnlyLakeError']:
        print('BLOCKED', q)
"""
    env = {**os.environ, "FLOWLAKE_SUPERSET_STATE_DIR": str(tmp_path), "FLOWLAKE_LAKE_DIR": str(lake),
           "FLOWLAKE_SUPERSET_SECRET_KEY": "x" * 40}
    res = subprocess.run([str(SUPERSET_PY), "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["BLOCKED", "BLOCKED", "BLOCKED", "BLOCKED", "ALLOWED"], lines


# ---- integration: a real Superset --------------------------------------------------------
@pytest.mark.integration
def test_credentials_cli(superset, cfg):
    res = subprocess.run([str(REPO / ".venv" / "bin" / "flowlake"), "superset", "credentials", "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(res.stdout) == superset["creds"]
    assert superset["creds"]["url"] == f"http://127.0.0.1:{os.environ['FLOWLAKE_SUPERSET_PORT']}"


@pytest.mark.integration
def test_wrong_password_is_refused(superset):
    creds = superset["creds"]
    r = requests.post(creds["url"] + "/api/v1/security/login",
                      json={"username": creds["username"], "password": "not-" + creds["password"], "provider": "db"})
    assert r.status_code == 401


@pytest.mark.integration
def test_every_chart_returns_rows(api, superset):
    charts = api.get(api.base + "/api/v1/chart/?q=(page_size:200)").json()["result"]
    expected = sum(len(v) for v in superset["provision"]["dashboards"].values())
    assert len(charts) == expected >= 25
    empty, failed = [], []
    for chart in charts:
        r = api.get(f"{api.base}/api/v1/chart/{chart['id']}/data/")
        if r.status_code != 200:
            failed.append((chart["slice_name"], r.status_code, r.text[:200]))
        elif r.json()["result"][0]["rowcount"] == 0:
            empty.append(chart["slice_name"])
    assert not failed, failed
    assert not empty, empty


@pytest.mark.integration
def test_flow_totals_match_the_lake(api, superset, cfg):
    """A number on the dashboard equals the lake computed independently (pyarrow)."""
    import pyarrow.dataset as pads

    table = pads.dataset(str(cfg.lake / "flows"), format="parquet", partitioning="hive").to_table(columns=["bytes"])
    want = sum(table.column("bytes").to_pylist())
    charts = api.get(api.base + "/api/v1/chart/?q=(page_size:200)").json()["result"]
    chart = next(c for c in charts if c["slice_name"] == "Traffic volume")
    data = api.get(f"{api.base}/api/v1/chart/{chart['id']}/data/").json()["result"][0]["data"]
    assert int(data[0]["bytes"]) == want


@pytest.mark.integration
def test_reprovision_is_idempotent(api, superset, cfg):
    from flowlake import superset_cli

    def counts():
        return tuple(api.get(f"{api.base}/api/v1/{kind}/?q=(page_size:1)").json()["count"]
                     for kind in ("chart", "dashboard", "dataset", "database"))

    before = counts()
    superset_cli.provision(cfg)
    assert counts() == before
    assert before[1] == 4 and before[3] == 1
