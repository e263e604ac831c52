"""The daily set's tables pinned row for row (issue 37's proof that speed work changes no
number): every job `flowlake jobs run` runs, over one small modelled day (the IPFIX model,
flow record revision 3's columns included, seed fixed), compared with the golden copy
tests/data/golden/daily_set.json.gz. A difference names the table and the rows found on
one side only.

Floats compare to 1e-9 relative (Spark may add doubles in another order); everything else
exactly. Reverse DNS is off (max_lookups 0: names stay unknown, whatever the machine's
resolver does), so the run depends on nothing outside the repository.

After a change meant to change a table, regenerate the copy and say in the commit which
table changed and why:

    FLOWLAKE_UPDATE_GOLDEN=1 .venv/bin/pytest tests/jobs/test_golden.py
"""
from __future__ import annotations

import datetime as dt
import decimal
import gzip
import json
import math
import os
from pathlib import Path

import numpy as np
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from test_jobs import private_cfg

from flowlake.collectors.traffic import api, lake_rows, model, record3
from flowlake.jobs import runner

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "daily_set.json.gz"
DAY = dt.date(2026, 3, 2)
FLOWS, SEED = 6000, 37
REL = 1e-9


def _model_lake(home: Path) -> int:
    p = api.params_for("ipfix")
    start = int(dt.datetime.combine(DAY, dt.time(), dt.UTC).timestamp() * 1000)
    f, _ = model.generate(p, start, 86_400_000, FLOWS, seed=SEED)
    table = lake_rows.lake_table(f, p, source_file="model", record3=record3.draw(f, SEED))
    hours = table.column("hour").to_numpy()
    for h in np.unique(hours):
        part = home / "lake" / "flows" / f"date={DAY}" / f"hour={h:02d}"
        part.mkdir(parents=True)
        pq.write_table(table.filter(hours == h).drop_columns(["date", "hour"]), part / "part-0.parquet")
    return table.num_rows


def _plain(v):
    """A value as JSON holds it (the golden copy's form)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        if v and isinstance(v[0], tuple) and len(v[0]) == 2:   # a map column arrives as pairs
            return _plain(dict(v))
        return [_plain(x) for x in v]
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)   # nan, inf: JSON has no spelling for them
    return v


def _key(row: list):
    """Sort key: the row without its floats (those may differ in the last bits), then floats rounded."""
    exact = [json.dumps(v, sort_keys=True) for v in row if not isinstance(v, float)]
    approx = [round(v, 6) for v in row if isinstance(v, float)]
    return exact, approx


def read_tables(lake: Path) -> dict:
    out = {}
    for folder in sorted((lake / "reports").iterdir()):
        part = folder / f"date={DAY}"
        if not part.is_dir():
            continue
        t = pads.dataset(str(part), format="parquet").to_table()
        cols = [c for c in t.column_names if c != "date"]
        rows = [[_plain(r[c]) for c in cols] for r in t.to_pylist()]
        out[folder.name] = {"columns": cols, "rows": sorted(rows, key=_key)}
    return out


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float))
                and math.isclose(a, b, rel_tol=REL, abs_tol=1e-12))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def differences(got: dict, want: dict) -> list[str]:
    out = []
    if set(got) != set(want):
        out.append(f"tables only now: {sorted(set(got) - set(want))}; only in the golden copy: "
                   f"{sorted(set(want) - set(got))}")
    for name in sorted(set(got) & set(want)):
        g, w = got[name], want[name]
        if g["columns"] != w["columns"]:
            out.append(f"{name}: columns {g['columns']} != golden {w['columns']}")
            continue
        if len(g["rows"]) == len(w["rows"]) and all(_same(a, b) for a, b in zip(g["rows"], w["rows"], strict=True)):
            continue
        only_now = [r for r in g["rows"] if not any(_same(r, x) for x in w["rows"])]
        only_golden = [r for r in w["rows"] if not any(_same(r, x) for x in g["rows"])]
        out.append(f"{name}: {len(g['rows'])} rows, golden {len(w['rows'])}; columns {g['columns']}\n"
                   f"  only now ({len(only_now)}): {only_now[:3]}\n"
                   f"  only golden ({len(only_golden)}): {only_golden[:3]}")
    return out


@pytest.fixture(scope="module")
def daily_set(spark, tmp_path_factory):
    home = tmp_path_factory.mktemp("golden-home")
    flows = _model_lake(home)
    cfg = private_cfg(home, FLOWLAKE_RDNS_MAX_LOOKUPS="0")
    found = runner.discover()
    outcomes = runner.run_jobs(spark, cfg, DAY, runner.order(found, sorted(found)))
    return {"cfg": cfg, "flows": flows, "outcomes": outcomes, "tables": read_tables(cfg.lake)}


@pytest.mark.integration
def test_every_table_of_the_daily_set_equals_its_golden_copy(daily_set):
    failed = [(o.job, o.status, o.error) for o in daily_set["outcomes"] if o.status != "ok"]
    assert failed == []
    got = daily_set["tables"]
    assert len(got) >= 30 and sum(len(t["rows"]) for t in got.values()) > 1000
    if os.environ.get("FLOWLAKE_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(GOLDEN, "wt") as f:
            json.dump({"day": str(DAY), "flows": daily_set["flows"], "seed": SEED, "tables": got}, f)
        pytest.fail(f"wrote {GOLDEN} ({len(got)} tables): unset FLOWLAKE_UPDATE_GOLDEN and run again")
    assert GOLDEN.exists(), f"{GOLDEN} missing: FLOWLAKE_UPDATE_GOLDEN=1 writes it"
    with gzip.open(GOLDEN, "rt") as f:
        want = json.load(f)
    assert (want["flows"], want["seed"]) == (daily_set["flows"], SEED)
    diff = differences(got, want["tables"])
    assert diff == [], "\n".join(diff)


def test_the_comparison_finds_a_changed_number_and_a_lost_row():
    want = {"t": {"columns": ["k", "x"], "rows": [["a", 1.0], ["b", 2.0]]}}
    assert differences({"t": {"columns": ["k", "x"], "rows": [["a", 1.0 + 1e-12], ["b", 2.0]]}}, want) == []
    diff = differences({"t": {"columns": ["k", "x"], "rows": [["a", 1.0], ["b", 2.001]]}}, want)
    assert len(diff) == 1 and "only now (1): [['b', 2.001]]" in diff[0] and "only golden (1): [['b', 2.0]]" in diff[0]
    assert "only golden (1)" in differences({"t": {"columns": ["k", "x"], "rows": [["a", 1.0]]}}, want)[0]
    assert "only in the golden copy: ['t']" in differences({}, want)[0]
