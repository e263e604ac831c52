"""`flowlake query --count-at` (issue 34): both query engines count the traffic model's
multi-router border (collectors/traffic/border.py) as the rule says: `boundary`, `key` and
`auto` give the truth (each flow once), `all` every observation; the rule used is named on
stderr; a filter on the flow key alone, applied before the matching, changes nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from test_count_once import lake_day, modelled

from flowlake.collectors.traffic import border
from flowlake.jobs import count_rule

RULES = count_rule.RULES


@pytest.fixture(scope="module")
def day():
    return modelled(3000, seed=341)


@pytest.fixture(scope="module")
def home(day, tmp_path_factory):
    """A lake of the border's observations, one Parquet file per hour."""
    _, obs = day
    home = tmp_path_factory.mktemp("query-count-at")
    lake_day(obs, home / "lake" / "flows")
    return home


def _cfg(home, **env):
    from flowlake.base import config  # noqa: PLC0415  (the test's config, per call)

    return config.load(env={**os.environ, "FLOWLAKE_HOME": str(home), **env})


def _totals(rows) -> dict:
    """A statistic's whole list (-n 0) of a one-column key: each flow once, so its sums are the totals."""
    return {k: int(sum(r[k] for r in rows)) for k in ("flows", "packets", "bytes")}


def _want(table: pa.Table, mask=None) -> dict:
    t = table if mask is None else table.filter(mask)
    return border.truth_totals(t)


def _engine(home, engine, rule):
    from flowlake.jobs.query.engines import open_engine  # noqa: PLC0415  (start-up)

    return open_engine(_cfg(home, FLOWLAKE_QUERY_ENGINE=engine), count_at=rule)


@pytest.mark.integration
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_both_engines_count_the_modelled_border_as_the_rule_says(spark, day, home, engine):
    from flowlake.jobs.query import parse  # noqa: PLC0415  (lark)

    truth, obs = day
    tcp_t, tcp_o = pc.equal(truth.column("proto"), 6), pc.equal(obs.column("proto"), 6)
    big_t, big_o = pc.greater(truth.column("bytes"), 20_000), pc.greater(obs.column("bytes"), 20_000)
    assert 0 < pc.sum(tcp_t.cast("int64")).as_py() < truth.num_rows
    assert 0 < pc.sum(big_t.cast("int64")).as_py() < truth.num_rows
    got_records = {}
    for rule in RULES:
        eng = _engine(home, engine, rule)
        try:
            assert (eng.name, eng.count_at) == (engine, rule)
            whole = _totals(eng.tops(parse("any"), [("proto", "bytes")], 0)["proto/bytes"])
            # a filter on the key (applied before the matching on DuckDB) and one on the counts (after)
            tcp = _totals(eng.top(parse("proto tcp"), "srcip", "bytes", 0))
            big = _totals(eng.top(parse("bytes > 20000"), "dstport", "flows", 0))
            got_records[rule] = len(list(eng.records(parse("any"), 0)))
            agg = eng.aggregate(parse("any"), ["proto"], "flows", 0)
        finally:
            eng.close()
        if rule == "all":
            assert whole == _want(obs) and tcp == _want(obs, tcp_o) and big == _want(obs, big_o)
        else:
            assert whole == _want(truth), rule
            assert tcp == _want(truth, tcp_t), rule
            assert big == _want(truth, big_t), rule
        assert sum(r["flows"] for r in agg) == whole["flows"]
    assert got_records == {r: (obs.num_rows if r == "all" else truth.num_rows) for r in RULES}
    assert obs.num_rows > 1.5 * truth.num_rows  # the border sees most flows more than once


@pytest.mark.integration
def test_the_key_filter_before_the_matching_equals_the_filter_after(day, home):
    """duckdb_sql's key_filter (what the DuckDB engine does for `host`/`port`/`proto` filters)
    keeps exactly the rows the rule keeps and the filter then selects."""
    import duckdb  # noqa: PLC0415  (only here)

    _, obs = day
    con = duckdb.connect()
    files = sorted(str(p) for p in (home / "lake" / "flows").rglob("*.parquet"))
    rel = count_rule.duckdb_relation(con, "read_parquet([" + ", ".join(f"'{f}'" for f in files) + "])")
    cond = "(proto = 6 AND dst_port < 1024) OR src_addr LIKE '10.%'"
    for rule in ("auto", "boundary", "key"):
        after = con.execute(f"SELECT file_seq FROM ({count_rule.duckdb_sql(rel, rule, 60)}) WHERE {cond} "
                            "ORDER BY file_seq").fetchall()
        before = con.execute(f"SELECT file_seq FROM ({count_rule.duckdb_sql(rel, rule, 60, cond)}) "
                             "ORDER BY file_seq").fetchall()
        assert before == after and 0 < len(after) < obs.num_rows, rule


FLOWLAKE = str(Path(sys.executable).with_name("flowlake"))


def _cli(home, *args, **env):
    """The real command (the fast path answers when it can), with the lake's home."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLOWLAKE_")}
    return subprocess.run([FLOWLAKE, "query", *args], capture_output=True, text=True,
                          env={**base, "FLOWLAKE_HOME": str(home), "FLOWLAKE_QUERY_ENGINE": "local", **env},
                          timeout=300)


@pytest.mark.integration
def test_query_names_the_rule_on_stderr_and_takes_the_config_s(day, home):
    truth, obs = day
    for args, env, rule, where in ((["--count-at", "key"], {}, "key", "--count-at"),
                                   ([], {}, "all", "[query] count_at"),
                                   ([], {"FLOWLAKE_QUERY_COUNT_AT": "key"}, "key", "[query] count_at"),
                                   ([], {"FLOWLAKE_QUERY_COUNT_AT": "site", "FLOWLAKE_SITE_COUNT_AT": "boundary"},
                                    "boundary", "[site] count_at"),
                                   (["--count-at", "all"], {"FLOWLAKE_SITE_COUNT_AT": "key"}, "all", "--count-at")):
        res = _cli(home, "any", "-s", "proto/bytes", "-n", "0", "--format", "json", *args, **env)
        assert res.returncode == 0, res.stderr
        assert f"counted with {where} = {rule}" in res.stderr, res.stderr
        rows = json.loads(res.stdout)["proto/bytes"]
        want = border.observed_totals(obs) if rule == "all" else border.truth_totals(truth)
        assert sum(r["bytes"] for r in rows) == want["bytes"], (args, env)
    bad = _cli(home, "any", "--count-at", "twice")
    assert bad.returncode == 2 and "--count-at" in bad.stderr and "'twice' is not one of" in bad.stderr, bad.stderr
    wrong = _cli(home, "any", FLOWLAKE_QUERY_COUNT_AT="site", FLOWLAKE_SITE_COUNT_AT="twice")
    assert wrong.returncode == 1, wrong.stderr
    assert "[site] count_at = 'twice': expected one of auto, boundary, key, all" in wrong.stderr, wrong.stderr
    wrong = _cli(home, "any", FLOWLAKE_QUERY_COUNT_AT="once")
    assert wrong.returncode == 1 and "[query] count_at = 'once': expected one of" in wrong.stderr, wrong.stderr


def test_the_query_engines_rule_module_imports_no_spark():
    """count_rule (the rule's names, settings and DuckDB form) and the DuckDB query engine
    load without pyspark: `flowlake query` starts in ~0.1 s."""
    probe = ("import sys\nimport flowlake.jobs.count_rule, flowlake.jobs.query.duck, flowlake.jobs.query.engines, "
             "flowlake.jobs.query.fast\nprint(sorted(m for m in ('pyspark', 'pandas', 'pyarrow') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", res.stdout


def test_the_cli_offers_the_rule_s_names():
    from flowlake.jobs.query.cli import query  # noqa: PLC0415  (click)

    (opt,) = [p for p in query.params if p.name == "count_at"]
    assert tuple(opt.type.choices) == count_rule.RULES and opt.default is None
