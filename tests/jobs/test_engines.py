"""The one engine selector (jobs/engines.py) for reports and queries: its `auto` rule,
the settings' errors, and what `flowlake status` is given. Pure: no Spark, no services."""
from __future__ import annotations

import pytest

from flowlake.base import config
from flowlake.jobs import engines


def _cfg(tmp_path, lake: bool = False, **env):
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path / "home"), **env})
    if lake:
        cfg.lake.mkdir(parents=True, exist_ok=True)
    return cfg


@pytest.mark.parametrize("master, lake_here, want", [
    ("local[2]", True, "local"),
    ("local[2]", False, "local"),       # local mode: always in-process
    ("local", False, "local"),
    ("spark://10.0.0.5:7077", True, "local"),   # a cluster, but the lake is on this disk
    ("spark://10.0.0.5:7077", False, "spark"),  # a cluster whose lake this machine lacks
    ("cluster", False, "spark"),        # this home's cluster (resolved later) is a cluster
    ("yarn", False, "spark"),
])
def test_auto_rule(master, lake_here, want):
    assert engines.auto(master, lake_here) == want


@pytest.mark.parametrize("kind", ["reports", "query"])
def test_one_rule_for_reports_and_queries(tmp_path, kind):
    var = f"FLOWLAKE_{kind.upper()}_ENGINE"
    cluster = {"FLOWLAKE_SPARK_MASTER": "spark://10.0.0.5:7077"}
    assert engines.choose(_cfg(tmp_path), kind) == "local"
    assert engines.choose(_cfg(tmp_path, **cluster), kind) == "spark"
    assert engines.choose(_cfg(tmp_path, lake=True, **cluster), kind) == "local"
    # the master in effect (a report's session) outranks [spark] master
    assert engines.choose(_cfg(tmp_path, lake=False, **cluster), kind, master="local[2]") == "local"
    assert engines.choose(_cfg(tmp_path / "x"), kind, master="spark://h:7077") == "spark"
    # a setting other than auto is taken as it is; the command line's request outranks it
    assert engines.choose(_cfg(tmp_path, **{var: "spark"}), kind) == "spark"
    assert engines.choose(_cfg(tmp_path, **{var: "LOCAL", **cluster}), kind) == "local"
    assert engines.choose(_cfg(tmp_path, **{var: "spark"}), kind, requested="local") == "local"


def test_settings_errors_name_the_setting(tmp_path):
    with pytest.raises(ValueError, match=r"config \[reports\] engine = 'postgres': must be one of auto, spark, local"):
        engines.choose(_cfg(tmp_path, FLOWLAKE_REPORTS_ENGINE="postgres"), "reports")
    with pytest.raises(ValueError, match="query engine 'postgres': must be one of auto, local, spark"):
        engines.choose(_cfg(tmp_path, FLOWLAKE_QUERY_ENGINE="postgres"), "query")
    with pytest.raises(ValueError, match="engine kind 'alerts'"):
        engines.choose(_cfg(tmp_path), "alerts")


def test_query_master_asks_for_spark(tmp_path):
    from flowlake.jobs.query.engines import choose

    cfg = _cfg(tmp_path, lake=True)
    assert choose(cfg, master="local[1]") == "spark"
    assert choose(cfg, override="auto", master="local[1]") == "spark"
    assert choose(cfg, override="local", master="spark://h:7077") == "local"
    with pytest.raises(ValueError, match="query engine 'postgres'"):
        choose(_cfg(tmp_path, FLOWLAKE_QUERY_ENGINE="postgres"), master="local[1]")


def test_status_shows_the_choice(tmp_path):
    st = engines.status(_cfg(tmp_path, FLOWLAKE_SPARK_MASTER="spark://10.0.0.5:7077",
                             FLOWLAKE_REPORTS_ENGINE="local"))
    assert st["reports"] == {"setting": "local", "engine": "local"}
    assert st["query"] == {"setting": "auto", "engine": "spark"}
    assert not st["lake_on_this_machine"]
    assert engines.status_line(st) == ("engines: reports local ([reports] engine = local), query spark "
                                       "([query] engine = auto); Spark master spark://10.0.0.5:7077, "
                                       "lake not on this machine")
    bad = engines.status(_cfg(tmp_path, FLOWLAKE_QUERY_ENGINE="duck"))
    assert "must be one of" in bad["query"]["error"] and "error" in engines.status_line(bad)
