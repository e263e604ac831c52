"""One flow, counted once (issue 34): the counting rules of jobs/count_once.py on hand-made
observations and on the traffic model's multi-router border (collectors/traffic/border.py),
whose truth records each flow once: `boundary`, `key` and `auto` count each flow once (totals
equal the truth exactly), `all` counts every observation."""
from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_jobs import private_cfg

from flowlake.collectors.traffic import border, lake_rows, model
from flowlake.jobs import count_once, count_rule, runner, status
from flowlake.jobs.observation_points import observation_points
from flowlake.pipelines.enrich.apply import lake_schema
from flowlake.schemas import FLOWS_TABLE

DAY = dt.date(2026, 4, 7)
START = int(dt.datetime.combine(DAY, dt.time(), dt.UTC).timestamp() * 1000)


def modelled(n: int = 3000, seed: int = 34):
    p = border.params()
    f, _ = model.generate(p, START, 86_400_000, n, seed=seed)
    truth = lake_rows.lake_table(f, p, source_file="model")
    return truth, border.observations(truth)


@pytest.fixture(scope="module")
def day():
    return modelled()


# ---- without Spark ------------------------------------------------------------------------
def test_the_spark_rule_takes_its_names_from_the_light_module():
    """One list of rules and one settings reader: count_once (Spark) re-exports count_rule's."""
    for name in ("RULES", "KEY", "DEFAULT_WINDOW_SECONDS", "CountRuleError", "check_rule", "settings", "duckdb_sql"):
        assert getattr(count_once, name) is getattr(count_rule, name), name


def test_rule_names_are_checked():
    assert count_once.check_rule(" Key ") == "key"
    with pytest.raises(count_once.CountRuleError, match=r"\[site\] count_at = 'once': expected one of auto"):
        count_once.check_rule("once")

    class Site:
        count_at = "auto"
        dedup_window_seconds = -1

    class Cfg:
        site = Site()

    with pytest.raises(count_once.CountRuleError, match="dedup_window_seconds = -1"):
        count_once.settings(Cfg())
    Site.dedup_window_seconds = 30
    assert count_once.settings(Cfg(), "all") == ("all", 30.0)
    with pytest.raises(count_once.CountRuleError, match="--count-at = 'twice'"):
        count_once.settings(Cfg(), "twice")


def test_the_border_model_sees_flows_at_several_points(day):
    truth, obs = day
    seen = Counter(obs.column("truth_row").to_pylist())
    assert set(seen) == set(range(truth.num_rows)), "every truth flow is observed at least once"
    points = Counter(seen.values())
    assert points[1] > 0 and max(points) >= 4, points  # ingress-only entries once; crossings up to 5
    rates = set(obs.column("sampling_rate").to_pylist())
    assert rates == {1, 5, 10}
    assert set(obs.column("flow_direction").to_pylist()) == {0, 1}
    # sampled observations are multiples of their rate, as the lake's corrected counts are
    r = obs.column("sampling_rate").to_numpy()
    assert (obs.column("bytes").to_numpy() % r == 0).all()
    assert border.observed_totals(obs)["bytes"] > 1.5 * border.truth_totals(truth)["bytes"]


def lake_day(obs: pa.Table, flows, truth_row: bool = False) -> list[str]:
    """`obs` as the lake holds a day: one Parquet file per hour under `flows`
    (date=D/hour=HH/part-0.parquet); the model's truth_row kept only when asked (a test's
    key back to the truth). The count-once tests' one writer of a lake day."""
    hours = obs.column("hour").to_numpy()
    drop = ["date", "hour"] + ([] if truth_row else ["truth_row"])
    files = []
    for h in np.unique(hours):
        part = flows / f"date={DAY}" / f"hour={h:02d}"
        part.mkdir(parents=True)
        pq.write_table(obs.filter(pa.array(hours == h)).drop_columns(drop), part / "part-0.parquet")
        files.append(str(part / "part-0.parquet"))
    return files


def _counted_rows(con, sql: str) -> list[tuple]:
    return sorted(con.execute(f"SELECT truth_row, exporter, flow_direction, bytes FROM ({sql})").fetchall())


@pytest.mark.parametrize("rule", ["key", "auto"])
def test_the_duckdb_rule_counts_alike_on_every_run_with_threads(day, tmp_path, rule):
    """The flow-key windows sort observations of equal times in a total order: with only the
    times (and exporter) as order, DuckDB's threads sorted ties differently in the rule's two
    windows, split a flow into two clusters and counted it twice, differently run to run (4
    extra rows for dst_port 443 on this day). Runs on 1 to 8 threads and by key buckets: the
    same rows, the truth; and on a day of ties only (every observation of a flow at its flow's
    times), the same rows."""
    import duckdb  # noqa: PLC0415  (only here)

    truth, obs = day
    # the hourly files, as the lake holds a day: DuckDB's threads scan them in varying order
    listed = ", ".join(f"'{f}'" for f in lake_day(obs, tmp_path, truth_row=True))
    day_files = f"read_parquet([{listed}], hive_partitioning = true)"
    con = duckdb.connect()
    con.execute("SET threads = 4")
    con.execute(f"CREATE VIEW ties AS SELECT * REPLACE (min(time_start) OVER (PARTITION BY truth_row) AS time_start, "
                f"max(time_end) OVER (PARTITION BY truth_row) AS time_end) FROM {day_files}")
    want = border.truth_totals(truth)
    key = ", ".join(count_rule.KEY)
    for source in (day_files, "ties"):
        rel = count_rule.duckdb_relation(con, source)
        runs = []
        for threads in (4, 1, 4, 2, 4, 8):
            con.execute(f"SET threads = {threads}")
            runs.append(_counted_rows(con, count_rule.duckdb_sql(rel, rule, 60)))
        # the keys asked about (a query's filter, a bucket of the memory-bound pass) change the
        # scan's order, never the rows
        runs.append(sorted(r for b in range(3) for r in _counted_rows(
            con, count_rule.duckdb_sql(rel, rule, 60, key_filter=f"hash({key}) % 3 = {b}"))))
        assert all(r == runs[0] for r in runs), (source, [len(r) for r in runs])
        if source != "ties":
            assert (len(runs[0]), sum(r[3] for r in runs[0])) == (want["flows"], want["bytes"])
            assert len({r[0] for r in runs[0]}) == want["flows"]  # each truth flow once


def test_a_day_larger_than_the_memory_limit_is_counted_in_key_buckets_exactly(day, tmp_path, monkeypatch, caplog):
    """The rule's windows keep a partition in memory, so counted_parquet splits a day larger
    than DuckDB's memory_limit (at ROWS_PER_GIB) into passes over hash buckets of the flow key:
    the rows are those of one pass, and each truth flow is counted once."""
    import duckdb  # noqa: PLC0415  (only here)

    truth, obs = day
    files = lake_day(obs, tmp_path / "lake", truth_row=True)
    cfg = private_cfg(tmp_path / "home", FLOWLAKE_SITE_COUNT_AT="auto")
    con = duckdb.connect()
    con.execute("SET threads = 4")
    con.execute("SET memory_limit = '1GiB'")
    assert count_rule.memory_limit_bytes(con) == pytest.approx(2**30, rel=0.01)
    assert count_rule.passes_for(2_500_000, 2**30) == 3 and count_rule.passes_for(10, 2**30) == 1

    def rows(folder) -> list[tuple]:
        got = f"SELECT truth_row, exporter, flow_direction, bytes FROM read_parquet('{folder}/*/*.parquet')"
        return sorted(con.execute(got).fetchall())

    done = {}
    one = count_rule.counted_parquet(con, files, cfg, tmp_path / "one", report=done)
    assert done == {"rule": "auto", "observations": obs.num_rows, "passes": 1, "memory_limit": "1.0 GiB"}, done
    assert one and not any("pass" in p for p in one)  # the day fits: one pass
    monkeypatch.setattr(count_rule, "ROWS_PER_GIB", obs.num_rows // 4)  # a quarter of the day per GiB
    with caplog.at_level("INFO", logger="flowlake.count_once"):
        many = count_rule.counted_parquet(con, files, cfg, tmp_path / "many")
    n = count_rule.passes_for(obs.num_rows, count_rule.memory_limit_bytes(con))
    assert n >= 4 and f"in {n} passes" in caplog.text, caplog.text
    assert {p.split("/")[-1].split("_")[0] for p in many} == {f"pass{b}" for b in range(n)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake", "many", "one"]  # the buckets' copy is gone
    assert rows(tmp_path / "many") == rows(tmp_path / "one")
    want = border.truth_totals(truth)
    got = rows(tmp_path / "many")
    assert (len(got), sum(r[3] for r in got), len({r[0] for r in got})) == (want["flows"], want["bytes"], want["flows"])


# ---- Spark: the rules ----------------------------------------------------------------------
def frame(spark, table: pa.Table, tmp_path, name="obs"):
    """A Spark frame of the lake's flows schema from an Arrow table (missing columns null)."""


    path = tmp_path / f"{name}.parquet"
    table = table.drop_columns([c for c in ("date", "hour", "truth_row") if c in table.column_names])
    types = {f.name: f.type for f in lake_schema()}
    table = pa.table({c: table.column(c).cast(pa.string() if pa.types.is_dictionary(types[c]) else types[c])
                      for c in table.column_names})
    pq.write_table(table, path)
    return spark.read.schema(FLOWS_TABLE.spark_schema()).parquet(str(path))


def totals(df) -> dict:
    from pyspark.sql import functions as F  # noqa: PLC0415  (pyspark only for the integration tests)

    row = df.agg(F.count(F.lit(1)).alias("flows"), F.sum("packets").alias("packets"),
                 F.sum("bytes").alias("bytes")).first()
    return {"flows": row["flows"], "packets": row["packets"] or 0, "bytes": row["bytes"] or 0}


def _obs(**kw) -> dict:
    row = {"time_start": dt.datetime(2026, 4, 7, 10, 0, tzinfo=dt.UTC),
           "time_end": dt.datetime(2026, 4, 7, 10, 0, 30, tzinfo=dt.UTC),
           "exporter": "10.9.0.1", "input_if": 1, "output_if": 10, "src_addr": "203.0.113.5",
           "dst_addr": "10.1.1.1", "src_port": 443, "dst_port": 50000, "proto": 6, "packets": 100,
           "bytes": 100_000, "sampling_rate": 1, "flow_direction": 0, "in_if_boundary": "external",
           "out_if_boundary": "internal"}
    row.update(kw)
    return row


@pytest.mark.integration
def test_rules_on_hand_made_observations(spark, tmp_path):
    """One flow seen four times (ingress + egress at R1, ingress at an unclassified R2,
    sampled 1:10 at R3 with a coarser estimate), and a second flow seen once."""
    rows = [_obs(),                                                     # R1 ingress, entering: counts
            _obs(flow_direction=1),                                     # R1 egress of the same packets
            _obs(exporter="10.9.0.2", input_if=5, output_if=6, in_if_boundary="", out_if_boundary="",
                 time_start=dt.datetime(2026, 4, 7, 10, 0, 1, tzinfo=dt.UTC)),
            _obs(exporter="10.9.0.3", input_if=7, output_if=8, sampling_rate=10, packets=90, bytes=99_990,
                 in_if_boundary="internal", out_if_boundary="internal"),
            _obs(src_port=444, packets=7, bytes=7000)]                  # another flow (another port)
    df = frame(spark, pa.Table.from_pylist(rows), tmp_path)
    want_once = {"flows": 2, "packets": 107, "bytes": 107_000}
    for rule in ("auto", "boundary", "key"):
        got = count_once.count_once(df, rule, 60)
        assert totals(got) == want_once, rule
        kept = {(r["exporter"], r["flow_direction"]) for r in got.collect()}
        assert kept == {("10.9.0.1", 0)}, (rule, kept)  # the unsampled ingress record, both flows
    assert totals(count_once.count_once(df, "all")) == {"flows": 5, "packets": 397, "bytes": 406_990}
    # outside the window: the same key an hour later is another flow
    later = _obs(time_start=dt.datetime(2026, 4, 7, 11, 0, tzinfo=dt.UTC),
                 time_end=dt.datetime(2026, 4, 7, 11, 0, 5, tzinfo=dt.UTC), exporter="10.9.0.2",
                 in_if_boundary="", out_if_boundary="")
    df2 = frame(spark, pa.Table.from_pylist(rows + [later]), tmp_path, "later")
    assert totals(count_once.count_once(df2, "key", 60))["flows"] == 3
    # a long flow cut by the active timeout at one point stays whole (all its records count)
    cut = [_obs(time_start=dt.datetime(2026, 4, 7, 10, m, tzinfo=dt.UTC),
                time_end=dt.datetime(2026, 4, 7, 10, m, 59, tzinfo=dt.UTC), input_if=1 + m % 2)
           for m in range(3)]
    df3 = frame(spark, pa.Table.from_pylist(cut + [_obs(exporter="10.9.0.2", flow_direction=1)]), tmp_path, "cut")
    assert totals(count_once.count_once(df3, "key", 60))["flows"] == 3


@pytest.mark.integration
def test_a_flow_entering_and_leaving_on_external_interfaces_counts_once_and_is_reported(spark, tmp_path):
    """Contradictory direction data (issue 34's bad input): one flow whose ingress record at R1
    enters on an external interface and whose record at R2 leaves on one (a transit, or
    interfaces classified wrong). `boundary` keeps both observations by its own test; every
    rule but `all` counts the flow once (the best point: unsampled R1), observation_points
    reports it, and the DuckDB twin keeps the same row."""
    import duckdb  # noqa: PLC0415  (only here)

    rows = [_obs(),                                                         # R1: in on its uplink
            _obs(exporter="10.9.0.2", input_if=4, output_if=2, sampling_rate=2, in_if_boundary="internal",
                 out_if_boundary="external"),                                # R2: out on its uplink
            _obs(exporter="10.9.0.2", src_port=445, input_if=4, output_if=2, in_if_boundary="internal",
                 out_if_boundary="external", packets=3, bytes=3000)]        # another flow, leaving: counts
    df = frame(spark, pa.Table.from_pylist(rows), tmp_path, "contra")
    for rule in ("auto", "boundary", "key"):
        got = count_once.count_once(df, rule, 60)
        assert totals(got) == {"flows": 2, "packets": 103, "bytes": 103_000}, rule
        assert sorted((r["exporter"], r["src_port"]) for r in got.collect()) == [("10.9.0.1", 443), ("10.9.0.2", 445)]
        con = duckdb.connect()
        rel = count_once.duckdb_relation(con, f"read_parquet('{tmp_path / 'contra.parquet'}')")
        twin = con.execute(f"SELECT exporter, src_port FROM ({count_rule.duckdb_sql(rel, rule, 60)}) ORDER BY 1, 2")
        assert twin.fetchall() == [("10.9.0.1", 443), ("10.9.0.2", 445)], rule
    assert totals(count_once.count_once(df, "all"))["flows"] == 3
    rows = {r["exporter"]: r for r in observation_points(df, "boundary", 60).collect()}
    assert (rows["all"]["contradictory"], rows["all"]["counted"]) == (1, 2)
    assert (rows["10.9.0.1"]["contradictory"], rows["10.9.0.2"]["contradictory"]) == (1, 1)


@pytest.mark.integration
def test_a_flow_that_never_crosses_the_boundary_counts_once_and_is_not_dropped(spark, tmp_path):
    """Scanning between two internal hosts, seen only on internal interfaces (R1 ingress and
    egress, and the core): no observation is external, so `boundary` keeps none of them; the
    site's rule must not hide it from scanners/fan_in/top talkers' `internal` direction. It
    counts once at its best point (as under `key`), beside an entering flow counted at its
    boundary; the DuckDB twin keeps the same rows."""
    import duckdb  # noqa: PLC0415  (only here)

    inside = {"src_addr": "10.1.1.7", "dst_addr": "10.1.2.9", "src_port": 40000, "dst_port": 22,
              "in_if_boundary": "internal", "out_if_boundary": "internal", "packets": 2, "bytes": 120}
    rows = [_obs(),                                                         # entering: counts at R1
            _obs(flow_direction=1),                                         # its egress record at R1
            _obs(**inside, input_if=3, output_if=4),                        # R1 ingress, internal both sides
            _obs(**inside, input_if=3, output_if=4, flow_direction=1),      # R1 egress of it
            _obs(**{**inside, "packets": 0, "bytes": 0}, exporter="10.9.0.9", input_if=30, output_if=31,
                 sampling_rate=10),                                         # the core, sampled: no packet
            *[_obs(**{**inside, "dst_port": port}, exporter="10.9.0.9", input_if=30, output_if=31)
              for port in (23, 25)]]                                        # two more probes, seen at the core only
    df = frame(spark, pa.Table.from_pylist(rows), tmp_path, "inside")
    want = [("10.9.0.1", 0, 22), ("10.9.0.1", 0, 50000), ("10.9.0.9", 0, 23), ("10.9.0.9", 0, 25)]
    for rule in ("auto", "boundary", "key"):
        got = count_once.count_once(df, rule, 60)
        assert sorted((r["exporter"], r["flow_direction"], r["dst_port"]) for r in got.collect()) == want, rule
        assert totals(got) == {"flows": 4, "packets": 106, "bytes": 100_360}, rule
        con = duckdb.connect()
        rel = count_once.duckdb_relation(con, f"read_parquet('{tmp_path / 'inside.parquet'}')")
        twin = con.execute(f"SELECT exporter, flow_direction, dst_port FROM ({count_rule.duckdb_sql(rel, rule, 60)}) "
                           "ORDER BY ALL").fetchall()
        con.close()
        assert twin == want, rule
    assert totals(count_once.count_once(df, "all"))["flows"] == 7


@pytest.mark.integration
@pytest.mark.parametrize("rule", ["auto", "boundary", "key", "all"])
def test_rules_equal_the_truth_on_the_modelled_border(spark, day, tmp_path, rule):
    truth, obs = day
    got = totals(count_once.count_once(frame(spark, obs, tmp_path), rule, 60))
    want = border.observed_totals(obs) if rule == "all" else border.truth_totals(truth)
    assert got == want


@pytest.mark.integration
def test_a_modelled_day_s_traffic_totals_count_each_flow_once(spark, day, tmp_path_factory):
    """traffic_totals and top_talkers through the runner over a lake of the border's
    observations: each rule's whole-day totals equal the truth (all: the observations)."""
    truth, obs = day
    home = tmp_path_factory.mktemp("count-once-home")
    lake_day(obs, home / "lake" / "flows")
    for rule in ("auto", "key", "all"):
        cfg = private_cfg(home, FLOWLAKE_SITE_COUNT_AT=rule)
        out = runner.run_jobs(spark, cfg, DAY, runner.order(runner.discover(), ["traffic_totals"]))
        assert [(o.status, o.error) for o in out] == [("ok", "")], rule
        rows = pq.read_table(cfg.lake / "reports" / "traffic_totals" / f"date={DAY}").to_pylist()
        (day_all,) = [r for r in rows if r["hour"] is None and r["direction"] == "all" and r["exporter"] == "all"]
        want = border.observed_totals(obs) if rule == "all" else border.truth_totals(truth)
        assert {k: day_all[k] for k in ("flows", "packets", "bytes")} == want, rule


@pytest.mark.integration
def test_observation_points_describe_the_modelled_border(spark, day, tmp_path):
    truth, obs = day
    rows = {r["exporter"]: r for r in observation_points(frame(spark, obs, tmp_path), "auto", 60).collect()}
    a, b, c, core = (rows[r.address] for r in border.ROUTERS)
    assert (a["exports"], a["classified"], a["count_at"], a["external_ifs"]) == ("both", True, "boundary", "1 if1")
    assert (b["exports"], b["classified"], b["count_at"], b["external_ifs"]) == ("ingress", False, "key", "")
    assert (c["exports"], c["count_at"]) == ("ingress", "boundary")
    assert (core["exports"], core["counted"], core["external_ifs"]) == ("both", 0, "")
    site = rows["all"]
    assert (site["count_at"], site["observations"], site["counted"]) == ("auto", obs.num_rows, truth.num_rows)
    assert site["bytes_counted"] == border.truth_totals(truth)["bytes"]
    points = {}
    for t, e, d in zip(obs.column("truth_row").to_pylist(), obs.column("exporter").to_pylist(),
                       obs.column("flow_direction").to_pylist(), strict=True):
        points.setdefault(t, set()).add((e, d))
    want = sum(len(p) > 1 for p in points.values()) / truth.num_rows
    # records of one long flow (cut by the active timeout) are one flow to the rule: a record
    # whose sibling crossed a second router counts as seen at several points
    assert site["multi_point_share"] == pytest.approx(want, abs=0.02)
    assert 0.5 < want < 0.95
    assert sum(r["counted"] for k, r in rows.items() if k != "all") == truth.num_rows
    assert site["contradictory"] == 0  # the model's flows enter or leave, none both


@pytest.mark.integration
@pytest.mark.parametrize("rule", ["auto", "boundary", "key", "all"])
def test_observation_points_on_duckdb_equal_spark(spark, day, tmp_path, rule):
    """The local engine's observation_points (DuckDB, the rule's windows in SQL) against the
    Spark job, row for row: the modelled border, and the hand-made contradictory flow and the
    flow that never crosses the boundary (every branch of the rule)."""
    import duckdb  # noqa: PLC0415  (only here)

    from flowlake.jobs.observation_points import observation_points_sql  # noqa: PLC0415

    _truth, obs = day
    hand = [_obs(), _obs(exporter="10.9.0.2", input_if=4, output_if=2, sampling_rate=2, in_if_boundary="internal",
                         out_if_boundary="external"),
            _obs(src_addr="10.1.1.7", dst_addr="10.1.2.9", src_port=40000, dst_port=22, in_if_boundary="internal",
                 out_if_boundary="internal", input_if=3, output_if=4, flow_direction=1),
            _obs(exporter="10.9.0.9", src_port=445, in_if_boundary=None, out_if_boundary=None, sampling_rate=10)]
    for name, table in (("border", obs), ("hand", pa.Table.from_pylist(hand))):
        spark_rows = observation_points(frame(spark, table, tmp_path, name), rule, 60).collect()
        con = duckdb.connect()
        query = observation_points_sql(con, [str(tmp_path / f"{name}.parquet")], rule, 60)
        cur = con.execute(query)
        cols = [d[0] for d in cur.description]
        duck_rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        con.close()
        want = {r["exporter"]: r.asDict() for r in spark_rows}
        got = {r["exporter"]: r for r in duck_rows}
        assert sorted(got) == sorted(want) and len(want) >= 3, name
        for exporter, w in want.items():
            g = {k: got[exporter][k] for k in w}
            assert g == {**w, "multi_point_share": pytest.approx(w["multi_point_share"], rel=1e-12)}, (name, exporter)


@pytest.mark.integration
def test_observation_points_run_on_spark_when_duckdb_runs_out_of_memory(spark, day, tmp_path_factory,
                                                                         monkeypatch, caplog):
    """The rule's windows do not spill in DuckDB: a day too big for its memory is reported by
    Spark instead (here DuckDB gets 2 MB), with a warning, and the table is the Spark job's."""
    import duckdb  # noqa: PLC0415  (only here)

    from flowlake.pipelines import duck  # noqa: PLC0415  (only here)

    _truth, obs = day
    home = tmp_path_factory.mktemp("op-oom")
    lake_day(obs, home / "lake" / "flows")
    cfg = private_cfg(home, FLOWLAKE_SITE_COUNT_AT="auto")
    monkeypatch.setattr(duck, "connect", lambda cfg: duckdb.connect(config={"memory_limit": "2MB", "threads": 1}))
    with caplog.at_level("WARNING", logger="flowlake.jobs.observation_points"):
        out = runner.run_jobs(spark, cfg, DAY, runner.order(runner.discover(), ["observation_points"]))
    assert [(o.status, o.error) for o in out] == [("ok", "")]
    assert "DuckDB ran out of memory" in caplog.text and "running it on Spark" in caplog.text
    got = pq.read_table(cfg.lake / "reports" / "observation_points" / f"date={DAY}").to_pylist()
    want = observation_points(frame(spark, obs, tmp_path_factory.mktemp("op-oom-ref")), "auto", 60).collect()
    assert {r["exporter"]: r["counted"] for r in got} == {r["exporter"]: r["counted"] for r in want}
    assert {r["exporter"]: r["external_ifs"] for r in got} == {r["exporter"]: r["external_ifs"] for r in want}


def test_status_shows_the_border_from_the_last_report(tmp_path):
    from rich.console import Console  # noqa: PLC0415  (only here)

    cfg = private_cfg(tmp_path, FLOWLAKE_SITE_COUNT_AT="boundary")
    assert status.border_status(cfg)["date"] is None
    part = cfg.lake / "reports" / "observation_points" / "date=2026-04-07"
    part.mkdir(parents=True)
    base = {"external_ifs": "", "classified": True, "count_at": "boundary", "bytes_observed": 10, "bytes_counted": 5,
            "contradictory": 0}
    rows = [{**base, "exporter": "127.0.0.2", "exporter_name": "border-a", "external_ifs": "1 if1", "exports": "both",
             "observations": 20, "counted": 10, "multi_point_share": 0.5},
            {**base, "exporter": "127.0.0.3", "exporter_name": "", "exports": "ingress", "classified": False,
             "count_at": "key", "observations": 7, "counted": 3, "multi_point_share": 0.25},
            {**base, "exporter": "all", "exporter_name": "all", "exports": "both", "count_at": "boundary",
             "observations": 27, "counted": 13, "multi_point_share": 0.4, "contradictory": 4}]
    pq.write_table(pa.Table.from_pylist(rows), part / "part-0.parquet")
    st = status.border_status(cfg)
    assert (st["date"], st["unclassified"], st["site"]["counted"]) == ("2026-04-07", ["127.0.0.3"], 13)
    console = Console(record=True, width=300)
    status._print_border(console, st)
    text = console.export_text()
    assert "count_at = boundary" in text and "40.0% of flows seen at more than one point" in text
    assert "127.0.0.2 (border-a): exports both, external interfaces 1 if1, counted by boundary" in text
    assert "counted by key: 127.0.0.3" in text
    assert "4 flows entered and left on external interfaces (transit, or contradictory direction data" in text
    assert "each counted once by boundary" in text
    assert "the rule's pass" not in text  # no run has applied it here
    # the last run's pass, as common.counted_files records it
    (cfg.path("state")).mkdir(parents=True, exist_ok=True)
    (cfg.path("state") / count_rule.PASS_STATE).write_text(json.dumps(
        {"rule": "boundary", "observations": 10_059_340, "passes": 11, "memory_limit": "976.5 MiB",
         "date": "2026-04-07", "seconds": 101.0}))
    console = Console(record=True, width=300)
    status._print_border(console, status.border_status(cfg))
    assert ("the rule's pass on 2026-04-07: 10,059,340 observations by boundary in 11 passes over flow-key "
            "buckets (the day outgrew [site] dedup_memory_mb") in console.export_text()


@pytest.mark.integration
@pytest.mark.parametrize("rule", ["auto", "boundary", "key", "all"])
def test_the_duckdb_twin_counts_the_same_rows_as_spark(spark, day, tmp_path, rule):
    """count_rule.duckdb_sql (the light module of the query engines and the local report
    engines: no pyspark) keeps exactly the rows count_once keeps on Spark: the pin between them."""
    import duckdb  # noqa: PLC0415  (only here)

    truth, obs = day
    df = frame(spark, obs, tmp_path)
    want = sorted(r["file_seq"] for r in count_once.count_once(df, rule, 60).select("file_seq").collect())
    con = duckdb.connect()
    rel = count_rule.duckdb_relation(con, f"read_parquet('{tmp_path / 'obs.parquet'}')")
    got = sorted(r[0] for r in con.execute(f"SELECT file_seq FROM ({count_rule.duckdb_sql(rel, rule, 60)})").fetchall())
    assert got == want
    tot = con.execute(f"SELECT count(*), sum(bytes) FROM ({count_rule.duckdb_sql(rel, rule, 60)})").fetchone()
    expect = border.observed_totals(obs) if rule == "all" else border.truth_totals(truth)
    assert (tot[0], tot[1]) == (expect["flows"], expect["bytes"])


@pytest.mark.integration
def test_local_report_engines_apply_the_rule_as_spark_does(spark, day, tmp_path_factory):
    """top_talkers (Go kernel) and flow_size_dist (DuckDB) on this machine read the rows the
    rule counts: the same tables as the Spark engine under `auto`, and other tables under `all`."""
    truth, obs = day
    home = tmp_path_factory.mktemp("count-once-local")
    lake_day(obs, home / "lake" / "flows")
    got = {}
    for rule, engine in (("auto", "local"), ("auto", "spark"), ("all", "local")):
        cfg = private_cfg(home, FLOWLAKE_SITE_COUNT_AT=rule, FLOWLAKE_REPORTS_ENGINE=engine)
        out = runner.run_jobs(spark, cfg, DAY, runner.order(runner.discover(), ["top_talkers", "flow_size_dist"]))
        assert [(o.status, o.error) for o in out] == [("ok", "")] * 2, (rule, engine)
        tables = {t: pq.read_table(cfg.lake / "reports" / t / f"date={DAY}").to_pylist()
                  for t in ("top_talkers", "flow_size_dist")}
        got[rule, engine] = {"top_talkers": sorted(map(str, tables["top_talkers"])),
                             "size_all": [r for r in tables["flow_size_dist"] if r.get("hour") is None
                                          and r["direction"] == "all" and r["flow_class"] == "all"]}
    # the run's pass, for `flowlake status` (the last run, `all`, needed none and left the file)
    last = json.loads((cfg.path("state") / count_rule.PASS_STATE).read_text())
    assert {k: last[k] for k in ("rule", "observations", "passes", "date")} == (
        {"rule": "auto", "observations": obs.num_rows, "passes": 1, "date": DAY.isoformat()}), last
    assert status.border_status(cfg)["last_pass"] == last
    assert got["auto", "local"]["top_talkers"] == got["auto", "spark"]["top_talkers"]
    assert got["auto", "local"]["top_talkers"] != got["all", "local"]["top_talkers"]
    for key, want in ((("auto", "local"), border.truth_totals(truth)), (("auto", "spark"), border.truth_totals(truth)),
                      (("all", "local"), border.observed_totals(obs))):
        (row,) = got[key]["size_all"]
        assert (row["flows"], row["bytes"]) == (want["flows"], want["bytes"]), key
