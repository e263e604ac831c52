"""`flowlake reports export` on report tables the real jobs build (top_talkers, scanners) from a
small lake day of IPv4 and IPv6 flows: the plain export equals the partition as DuckDB reads it;
with --anonymise every column the schema declares as an address (single or comma-separated
list) carries the anonymise module's pseudonyms, never an original address, and every other
column is unchanged."""
from __future__ import annotations

import csv
import datetime as dt
import io
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
from conftest import run  # noqa: E402
from test_anonymise import DAY, FLOWLAKE, KEY, lake_from  # noqa: E402  (a lake day written by DuckDB)

from flowlake.jobs.anonymise import CryptoPAn  # noqa: E402

pytestmark = pytest.mark.integration


def flows() -> list[dict]:
    """Ordinary talkers (v4 and v6) and one scanner probing 30 hosts with one-packet flows."""
    rows = []
    base = {"src_port": 40000, "dst_port": 443, "proto": 6, "tcp_flags": 0x18, "tos": 0, "src_as": 0, "dst_as": 0}
    for i in range(40):
        src = f"10.0.{i % 4}.{i + 1}" if i % 3 else f"2001:db8:{i % 5:x}::{i + 1:x}"
        dst = f"203.0.113.{i % 7 + 1}" if i % 3 else f"2001:db8:ffff::{i % 7 + 1:x}"
        rows.append({**base, "src_addr": src, "dst_addr": dst, "packets": 10 + i, "bytes": 1500 * (i + 3)})
    for i in range(30):
        rows.append({**base, "src_addr": "198.51.100.66", "dst_addr": f"192.0.2.{i + 10}", "dst_port": 22,
                     "tcp_flags": 0x02, "packets": 1, "bytes": 60})
    return rows


@pytest.fixture(scope="module")
def home(spark, tmp_path_factory):
    """A home of its own whose lake holds the day and the jobs' report tables for it."""
    from flowlake.base import config
    from flowlake.jobs import runner

    home = tmp_path_factory.mktemp("export-home")
    lake_from(flows(), home / "lake")
    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(home)})
    found = runner.discover()
    outcomes = runner.run_jobs(spark, cfg, dt.date.fromisoformat(DAY), runner.order(found, ["top_talkers", "scanners"]))
    assert [(o.job, o.status) for o in outcomes] == [("scanners", "ok"), ("top_talkers", "ok")], outcomes
    return home


def export(home: Path, *args: str, key: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FLOWLAKE_ANON_KEY"}
    env["FLOWLAKE_HOME"] = str(home)
    if key:
        env["FLOWLAKE_ANON_KEY"] = KEY
    return subprocess.run([FLOWLAKE, "reports", "export", *args], capture_output=True, text=True, env=env, timeout=300)


def duckdb_rows(home: Path, table: str) -> list[dict]:
    import duckdb

    glob = str(home / "lake" / "reports" / table / f"date={DAY}" / "*.parquet")
    cur = duckdb.connect().execute(f"SELECT * FROM read_parquet('{glob}')")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def test_plain_csv_equals_the_partition(home):
    res = export(home, "top_talkers", "--date", DAY)
    assert res.returncode == 0, res.stderr
    got = list(csv.DictReader(io.StringIO(res.stdout)))
    want = duckdb_rows(home, "top_talkers")
    assert len(got) == len(want) > 20
    from flowlake.schemas import registry

    assert list(got[0]) == registry()["top_talkers"].names  # declared order, date last
    assert all(g["date"] == DAY for g in got)
    for g, w in zip(got, want):
        assert {k: g[k] for k in w} == {k: "" if v is None else str(v) for k, v in w.items()}


def check_anonymised(plain: list[dict], anon: list[dict], one: list[str], lists: list[str]) -> int:
    cp = CryptoPAn(KEY.encode())
    checked = 0
    assert len(plain) == len(anon) > 0
    for p, a in zip(plain, anon):
        for k in p:
            if k in one and p[k] is not None:
                assert a[k] == cp.one(p[k]) and a[k] != p[k], (k, p[k], a[k])
                checked += 1
            elif k in lists and p[k]:
                items = p[k].split(",")
                assert a[k].split(",") == [cp.one(x) for x in items], k
                assert not set(a[k].split(",")) & set(items)
                checked += len(items)
            else:
                assert a[k] == p[k], k  # not an address column: untouched
    return checked


def test_anonymised_json_and_parquet(home, tmp_path):
    plain = json.loads(export(home, "scanners", "--date", DAY, "--format", "json").stdout)
    assert [r["src_addr"] for r in plain] == ["198.51.100.66"] and len(plain[0]["sample_targets"].split(",")) == 10
    res = export(home, "scanners", "--date", DAY, "--format", "json", "--anonymise", key=True)  # key from the env
    assert res.returncode == 0, res.stderr
    assert check_anonymised(plain, json.loads(res.stdout), ["src_addr"], ["sample_targets"]) == 11

    keyfile = tmp_path / "anon.key"
    keyfile.write_text(KEY + "\n")
    out = tmp_path / "share" / "top.parquet"  # format from the suffix
    res = export(home, "top_talkers", "--date", DAY, "--anonymise", "--key-file", str(keyfile), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "addresses anonymised (src_addr, dst_addr)" in res.stderr
    anon = pq.read_table(out)
    plain_t = json.loads(export(home, "top_talkers", "--date", DAY, "--format", "json").stdout)
    src = pq.read_table(home / "lake" / "reports" / "top_talkers" / f"date={DAY}")
    assert anon.schema.remove(anon.schema.get_field_index("date")).equals(src.schema)  # the files' schema, + date
    anon_rows = [{k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in r.items()} for r in anon.to_pylist()]
    n = check_anonymised(plain_t, anon_rows, ["src_addr", "dst_addr"], [])
    versions = {ipaddress.ip_address(r[c]).version for r in plain_t for c in ("src_addr", "dst_addr") if r[c]}
    assert n > 40 and versions == {4, 6}


def test_export_errors_name_the_input(home, tmp_path):
    res = export(home, "no_such_table", "--date", DAY)
    assert res.returncode == 2 and "'no_such_table' is not a declared table (tables with 2026-11-20: scanners, top_talkers)" in res.stderr
    res = export(home, "fan_in", "--date", DAY)
    assert res.returncode == 1 and "no fan_in report for 2026-11-20" in res.stderr and "flowlake jobs run --date 2026-11-20" in res.stderr
    res = export(home, "scanners", "--date", "20-11-2026")
    assert res.returncode == 2 and "'20-11-2026' is not a date" in res.stderr
    res = export(home, "scanners", "--date", DAY, "--format", "parquet")
    assert res.returncode == 2 and "Parquet is binary: give a file with --out" in res.stderr
    res = export(home, "scanners", "--date", DAY, "--anonymise")
    assert res.returncode == 2 and "no anonymisation key" in res.stderr
    assert not list(tmp_path.iterdir())
    run([FLOWLAKE, "reports", "export", "--help"])
