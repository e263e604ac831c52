"""Superset provisioned from superset/*.yaml over a demo lake: REST checks, and the
bundle/secret/lake-confinement logic. Real Superset (its own venv), started once."""
from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from superset_lake import superset_up  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
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


def test_a_dashboard_reusing_a_uuid_is_refused(tmp_path):
    """Superset imports by UUID: a copy-pasted dashboard would silently replace another."""
    import shutil

    bundle = _bundle_mod()
    shipped = sorted((Path(__file__).resolve().parents[2] / "superset" / "dashboards").glob("*.yaml"))
    bundle._unique_uuids(shipped)  # the shipped dashboards and charts are all distinct
    for f in shipped:
        shutil.copy(f, tmp_path)
    shutil.copy(shipped[0], tmp_path / "99_copy.yaml")
    with pytest.raises(bundle.BundleError, match="is already used in"):
        bundle._unique_uuids(sorted(tmp_path.glob("*.yaml")))


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
    # a registry with one report table: the other report charts skipped by name, its charts kept
    from flowlake.schemas import FLOW, FLOWS_TABLE, registry

    bundle = mod.build(cfg, registry={"Flow": FLOW, "flows": FLOWS_TABLE, "top_talkers": registry()["top_talkers"]})
    assert any("traffic_totals" in msg and "not declared" in msg for msg in bundle.skipped)
    assert bundle.charts["daily-operations"] == ["Top talkers out (sources by bytes)", "Top talkers in (destinations by bytes)"]
    assert "datasets/traffic_totals.yaml" not in bundle.files and "datasets/top_talkers.yaml" in bundle.files


def test_dashboards_read_report_tables_only(cfg):
    """No dashboard chart scans the flow lake (10M+ flows a day): every chart's dataset is
    a report table or a view over report tables, and every dataset is a physical table
    (a view in the lake views file), so Superset sends plain SELECTs."""
    import yaml

    mod = _bundle_mod()
    bundle = mod.build(cfg)
    datasets = {yaml.safe_load(t)["uuid"]: yaml.safe_load(t) for n, t in bundle.files.items() if n.startswith("datasets/")}
    for name, text in bundle.files.items():
        if name.startswith("charts/"):
            ds = datasets[yaml.safe_load(text)["dataset_uuid"]]
            view = bundle.views[ds["table_name"]]
            assert ds["table_name"] not in ("flows", "active"), name
            assert str(cfg.lake / "flows") not in view and not re.search(r'(FROM|JOIN)\s+"?flows\b', view), name
    assert all(d["sql"] is None and d["schema"] == "main" for d in datasets.values())
    assert set(bundle.views) == {d["table_name"] for d in datasets.values()}
    # the direction filter is one required choice, 'all' by default, and the saved queries apply it
    dash = yaml.safe_load(bundle.files["dashboards/daily-operations.yaml"])
    flt = {f["name"]: f for f in dash["metadata"]["native_filter_configuration"]}
    assert flt["Direction"]["controlValues"]["multiSelect"] is False
    assert flt["Direction"]["controlValues"]["enableEmptyFilter"] is True
    assert flt["Direction"]["defaultDataMask"]["filterState"]["value"] == ["all"]
    volume = next(yaml.safe_load(t) for n, t in bundle.files.items() if n.startswith("charts/totals_"))
    assert {"col": "direction", "op": "IN", "val": ["all"]} in json.loads(volume["query_context"])["queries"][0]["filters"]


def test_lake_views_file_follows_the_lake(cfg, tmp_path):
    """The views file, built by Superset's DuckDB: a table without files yet is an empty
    relation with its declared columns (DuckDB 1.4 fails a glob matching nothing, so its
    view has no glob until the file is rewritten); once the table has files, Parquet files
    written later are read without rebuilding it; columns missing from a file read as NULL."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flowlake.base import config

    mod = _bundle_mod()
    env = {**os.environ, "FLOWLAKE_HOME": str(tmp_path)}
    cfg2 = config.load(env=env)
    out = tmp_path / "views.duckdb"

    def write_views():
        spec = tmp_path / "views.json"
        spec.write_text(json.dumps(mod.build(cfg2).views_sql()))
        res = subprocess.run([str(SUPERSET_PY), str(REPO / "superset" / "lake_views.py"), str(spec), str(out)],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr

    write_views()
    query = """
import duckdb, json, sys
con = duckdb.connect(sys.argv[1], read_only=True)
rows = con.execute("SELECT exporter, bytes, src_addrs, date FROM traffic_totals ORDER BY bytes").fetchall()
cols = [d[0] for d in con.execute("SELECT * FROM traffic_totals LIMIT 0").description]
print(json.dumps({"rows": [[str(x) for x in r] for r in rows], "cols": cols}))
"""

    def read():
        r = subprocess.run([str(SUPERSET_PY), "-c", query, str(out)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    empty = read()
    assert empty["rows"] == [] and empty["cols"] == [c for c in mod_registry_names("traffic_totals")]
    part = cfg2.lake / "reports" / "traffic_totals" / "date=2026-11-20"
    part.mkdir(parents=True)
    pq.write_table(pa.table({"hour": pa.array([None], pa.int32()), "direction": ["all"], "exporter": ["all"],
                             "flows": [3], "packets": [4], "bytes": [500]}), part / "part-0.parquet")
    assert read()["rows"] == []  # the table's first file: seen once the views are rewritten
    write_views()
    assert read()["rows"] == [["all", "500", "None", "2026-11-20"]]
    later = cfg2.lake / "reports" / "traffic_totals" / "date=2026-11-21"
    later.mkdir(parents=True)
    pq.write_table(pa.table({"direction": ["all"], "exporter": ["x"], "bytes": [700]}), later / "part-0.parquet")
    assert read()["rows"] == [["all", "500", "None", "2026-11-20"], ["x", "700", "None", "2026-11-21"]]


def mod_registry_names(table: str) -> list[str]:
    from flowlake.schemas import registry

    return registry()[table].names


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


def test_daily_line_charts_draw_their_points(cfg):
    """A line over days (time grain P1D or coarser) has one point per day; on the first
    day of data, or the demo's single day, a line without markers draws nothing at all
    (the capacity growth chart once looked empty that way). Dense series (5 minutes,
    hours) stay plain lines."""
    import yaml

    built = _bundle_mod().build(cfg)
    charts = [yaml.safe_load(t) for n, t in built.files.items() if n.startswith("charts/")]
    lines = [c for c in charts if c["viz_type"] == "echarts_timeseries_line"]
    daily = [c for c in lines if (c["params"].get("time_grain_sqla") or "").startswith("P1")]
    dense = [c for c in lines if (c["params"].get("time_grain_sqla") or "").startswith("PT")]
    assert len(daily) >= 5 and dense, ([c["slice_name"] for c in daily], [c["slice_name"] for c in dense])
    assert [c["slice_name"] for c in daily if not c["params"]["markerEnabled"]] == []
    assert [c["slice_name"] for c in dense if c["params"]["markerEnabled"]] == []


def test_report_tables_are_handlebars_templates(cfg):
    """Tables are static HTML (Superset's Handlebars chart): every listed column has a
    header and a cell; dates and times are selected as UTC text; a format the template
    cannot reproduce is refused, naming chart and column."""
    import yaml

    mod = _bundle_mod()
    bundle = mod.build(cfg)
    tables = [yaml.safe_load(t) for n, t in bundle.files.items() if n.startswith("charts/")]
    tables = [c for c in tables if c["viz_type"] == "handlebars"]
    assert len(tables) >= 10
    for chart in tables:
        p = chart["params"]
        labels = ([c if isinstance(c, str) else c["label"] for c in p.get("all_columns") or []] if p["query_mode"] == "raw"
                  else [c if isinstance(c, str) else c["label"] for c in p["groupby"]] + [m["label"] for m in p["metrics"]])
        tpl = p["handlebarsTemplate"]
        assert tpl.count("</th>") == len(labels) >= 1, chart["slice_name"]
        for label in labels:
            assert f"[{label}]" in tpl and f">{label}</th>" in tpl, (chart["slice_name"], label)
    largest = next(c for c in tables if c["slice_name"] == "Largest flows")
    ts = next(c for c in largest["params"]["all_columns"] if not isinstance(c, str))
    assert ts["label"] == "time_start" and "VARCHAR" in ts["sqlExpression"]
    assert '<td align="right">{{> si v=[bytes] f="%.4g"}}</td>' in largest["params"]["handlebarsTemplate"]
    assert '<td align="left">{{[src_addr]}}</td>' in largest["params"]["handlebarsTemplate"]  # may wrap (IPv6)

    ds = mod.Dataset("t", "u", "", [{"column_name": "share", "type": "DOUBLE"}], None)
    with pytest.raises(mod.BundleError, match=r"Top: format '\.3~%' for 'share'"):
        mod.chart_payload({"title": "Top", "viz": "table", "columns": ["share"], "formats": {"share": ".3~%"}}, ds, "Top")


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


def test_config_drops_only_superset_s_anonymous_user_warning(tmp_path):
    """Superset 6.1 warns on an event of a request without a logged-in user (upstream calls
    it noise and dropped it, apache/superset#42306); a CI run's log once had it. The
    config's filter drops that line, installed once however often the app is made, and
    keeps every other warning."""
    code = """
import logging, runpy
conf = runpy.run_path('superset/superset_config.py')
conf['_quiet_the_anonymous_user_noise'](); conf['_quiet_the_anonymous_user_noise']()
logging.warning('Failed to add user to db session: %s', Exception("Class 'werkzeug.local.LocalProxy' is not mapped"))
logging.warning('Failed to add user to db session: %s', Exception('database is locked'))
logging.warning('Unique file handle conflict')
print(len(logging.getLogger().filters))
"""
    env = {**os.environ, "FLOWLAKE_SUPERSET_STATE_DIR": str(tmp_path), "FLOWLAKE_SUPERSET_SECRET_KEY": "x" * 40}
    res = subprocess.run([str(SUPERSET_PY), "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "1"
    warned = [ln for ln in res.stderr.splitlines() if ln.startswith("WARNING:root:")]
    assert warned == ["WARNING:root:Failed to add user to db session: database is locked",
                      "WARNING:root:Unique file handle conflict"], res.stderr


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


def test_duckdb_connections_are_opened_by_the_one_at_a_time_hook(tmp_path):
    """superset_config.py's do_connect hook runs for every DuckDB connection (listened on the
    duckdb_engine dialect: on Engine, SQLAlchemy 1.4 never called it) and tries again an
    open that meets DuckDB's "Unique file handle conflict" (here: DuckDB made to raise it
    twice), instead of failing the chart query."""
    code = f"""
import runpy, duckdb, sqlalchemy as sa
conf = runpy.run_path('superset/superset_config.py')
real, raised = duckdb.connect, []
def flaky(*a, **k):
    if len(raised) < 2 and str(a[0] if a else k.get('database', '')).endswith('v.duckdb'):
        raised.append(1)
        raise duckdb.BinderException('Binder Error: Unique file handle conflict: Cannot attach "v"')
    return real(*a, **k)
duckdb.connect = flaky
eng = sa.create_engine('duckdb:///{tmp_path}/v.duckdb', poolclass=sa.pool.NullPool)
with eng.connect() as c:
    print(c.execute(sa.text("SELECT 7")).scalar(), conf['OPEN_RETRIES']['conflicts'])
"""
    env = {**os.environ, "FLOWLAKE_SUPERSET_STATE_DIR": str(tmp_path), "FLOWLAKE_LAKE_DIR": str(tmp_path / "lake"),
           "FLOWLAKE_SUPERSET_SECRET_KEY": "x" * 40}
    res = subprocess.run([str(SUPERSET_PY), "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["7", "2"], res.stdout + res.stderr[-3000:]


def test_views_file_connections_share_one_confined_instance(tmp_path):
    """Concurrent connections of one process to the read-only views file share one DuckDB
    instance: the first confines and locks it, the others must neither fail on the locked
    settings nor escape the lake (superset_config.py's connect hook, from 8 threads)."""
    lake = tmp_path / "lake"
    (lake / "t").mkdir(parents=True)
    outside = tmp_path / "secret.csv"
    outside.write_text("a\n1\n")
    code = f"""
import runpy, threading, duckdb, sqlalchemy as sa
conf = runpy.run_path('superset/superset_config.py')
con = duckdb.connect('{tmp_path}/views.duckdb')
con.execute("CREATE VIEW v AS SELECT 42 AS x"); con.close()
eng = sa.create_engine('duckdb:///{tmp_path}/views.duckdb', connect_args={{'read_only': True}},
                       poolclass=sa.pool.NullPool)
out, barrier = [], threading.Barrier(8)
def work():
    barrier.wait()
    with eng.connect() as c:
        got = c.execute(sa.text("SELECT x FROM v")).scalar()
        try:
            c.execute(sa.text("SELECT * FROM read_csv('{outside}')")); esc = 'ESCAPED'
        except Exception:
            esc = 'confined'
        out.append((got, esc))
ts = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sorted(set(out)), len(out))
"""
    env = {**os.environ, "FLOWLAKE_SUPERSET_STATE_DIR": str(tmp_path), "FLOWLAKE_LAKE_DIR": str(lake),
           "FLOWLAKE_SUPERSET_SECRET_KEY": "x" * 40}
    res = subprocess.run([str(SUPERSET_PY), "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["[(42,", "'confined')]", "8"], res.stdout + res.stderr[-3000:]


def test_data_cache_expires_when_the_jobs_rewrite_a_report(tmp_path):
    """superset/lake_cache.py: an entry is served until a report table folder changes
    (a partition renamed in, as the jobs do); a result stored after such a change that
    was looked up before it counts as the old lake's."""
    lake = tmp_path / "lake"
    (lake / "reports" / "top_talkers" / "date=2026-11-20").mkdir(parents=True)
    code = f"""
import os, sys, time
sys.path.insert(0, 'superset')
import lake_cache
lake_cache.CHECK_EVERY_S = 0
c = lake_cache.LakeAwareCache('{tmp_path}/cache', lake_dir='{lake}', threshold=100)
def rewrite():
    time.sleep(0.02)
    d = '{lake}/reports/top_talkers'
    os.rename(d + '/date=2026-11-20', d + '/.old'); os.rename(d + '/.old', d + '/date=2026-11-20')
out = [c.get('k')]                       # miss
c.set('k', 'v1', timeout=60); out.append(c.get('k'))
rewrite(); out.append(c.get('k'))        # the lake changed: miss
c.set('k', 'v2'); out.append(c.get('k'))
c.get('j'); rewrite(); c.set('j', 'old result')   # looked up, jobs ran, then stored
out.append(c.get('j'))
c.set('n', 5, timeout=60); out.append(c.get('n'))
print(out, c._file_count)
"""
    res = subprocess.run([str(SUPERSET_PY), "-c", code], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[None, 'v1', None, 'v2', None, 5] 3", res.stdout


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


def all_charts(api) -> list[dict]:
    """Every chart, page by page: Superset's list API gives at most 100 a page (a bigger
    page_size is cut to 100 without a word)."""
    out, page = [], 0
    while True:
        got = api.get(api.base + f"/api/v1/chart/?q=(page:{page},page_size:100)").json()
        out += got["result"]
        if not got["result"] or len(out) >= got["count"]:
            return out
        page += 1


@pytest.mark.integration
def test_every_chart_returns_rows(api, superset, cfg):
    """`flowlake superset check` (superset_check.check) over every dashboard of the test lake."""
    from flowlake.superset_check import check
    from flowlake.superset_cli import credentials

    charts = all_charts(api)
    expected = sum(len(v) for v in superset["provision"]["dashboards"].values())
    assert len(charts) == expected >= 25
    res = check(credentials(cfg))
    assert res["charts"] == expected and len(res["dashboards"]) == len(superset["provision"]["dashboards"])
    assert not res["failed"], res["failed"]
    assert not res["empty"], res["empty"]


def test_the_check_names_empty_charts_and_unknown_leaders():
    from flowlake.superset_check import judge

    assert judge({"rowcount": 0, "data": []}) == "empty"
    rows = [{"provider": "(unknown)", "hour": 3, "bytes": 900}, {"provider": "Cogent", "hour": 9, "bytes": 100}]
    assert judge({"rowcount": 2, "colnames": ["provider", "hour", "bytes"], "data": rows}) == "unknown first"
    rows[1]["bytes"] = 1000  # the largest names something: unknowns further down are fine
    assert judge({"rowcount": 2, "colnames": ["provider", "hour", "bytes"], "data": rows}) is None
    assert judge({"rowcount": 1, "colnames": ["total"], "data": [{"total": 5}]}) is None


@pytest.mark.integration
def test_totals_match_the_lake(api, superset, cfg):
    """The dashboard's totals equal the report table read independently (pyarrow):
    whole day, direction 'all', summed over the exporters (not the 'all' rows)."""
    import pyarrow.dataset as pads

    table = pads.dataset(str(cfg.lake / "reports" / "traffic_totals"), format="parquet",
                         partitioning="hive").to_table().to_pylist()
    day = [r for r in table if r["hour"] is None and r["direction"] == "all"]
    charts = {c["slice_name"]: c for c in all_charts(api)}
    got = api.get(f"{api.base}/api/v1/chart/{charts['Totals']['id']}/data/").json()["result"][0]["data"]
    assert len(got) == 1
    for key in ("bytes", "flows", "packets"):
        assert int(got[0][key]) == sum(r[key] for r in day if r["exporter"] != "all") > 0, key
    everyone = [r["src_addrs"] for r in day if r["exporter"] == "all"]
    assert int(got[0]["source addresses"]) == (everyone[0] if everyone else sum(r["src_addrs"] for r in day))


@pytest.mark.integration
def test_reprovision_is_idempotent(api, superset, cfg):
    from flowlake import superset_cli

    def counts():
        return tuple(api.get(f"{api.base}/api/v1/{kind}/?q=(page_size:1)").json()["count"]
                     for kind in ("chart", "dashboard", "dataset", "database"))

    before = counts()
    superset_cli.provision(cfg)
    assert counts() == before
    dashboards = len(list((Path(__file__).resolve().parents[2] / "superset" / "dashboards").glob("*.yaml")))
    assert before[1] == dashboards and before[3] == 1
