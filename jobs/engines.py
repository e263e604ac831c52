"""Which engine runs a report or answers `flowlake query`: decided here, once, for both.

Two engines read the lake, and for a query or a report either gives the same rows:
- local: in-process on this machine. Queries on DuckDB (jobs/query/duck.py); the reports
  that have a local implementation on DuckDB (flow_size_dist, observation_points) or in the Go kernel
  (top_talkers, jobs/toptalkers/). Every other report stays on Spark.
- spark: Spark on its master, the path for a lake on a cluster.

The setting is `[reports] engine` (FLOWLAKE_REPORTS_ENGINE) for the reports and
`[query] engine` (FLOWLAKE_QUERY_ENGINE, or `--engine` for one command) for `flowlake query`
and `flowlake host`: auto, local or spark. One rule decides `auto`, for both:

    auto = spark when Spark's master is a cluster (anything but local[...]) and the lake is
           not on this machine's disk (the executors have it, this machine does not);
           local otherwise: in local mode, or whenever the lake is on this machine's disk.

"Spark's master" is the one in effect: the report runner's session's master, or for a query
[spark] master (FLOWLAKE_SPARK_MASTER). `flowlake query --master URL` names a Spark master
for that command, and naming one asks for Spark: it counts as `--engine spark` unless
`--engine` is given (see jobs/query/engines.py).

tests/jobs/test_engines.py pins the rule; tests/jobs/test_jobs.py and tests/jobs/test_query.py hold the
engines equal, row for row, to each other and to nfdump.
"""
from __future__ import annotations

ENGINES = ("auto", "local", "spark")
SETTING = {"reports": "[reports] engine", "query": "[query] engine"}


def _setting(cfg, kind: str) -> str:
    section = getattr(cfg, kind)
    return str(getattr(section, "engine", "auto")).lower()


def choose(cfg, kind: str, requested: str | None = None, master: str | None = None) -> str:
    """The engine ("local" or "spark") for `kind` ("reports" or "query").

    requested: the engine asked for on the command line (else the config's setting);
    master: the Spark master in effect (else [spark] master)."""
    if kind not in SETTING:
        raise ValueError(f"engine kind {kind!r}: must be one of {', '.join(SETTING)}")
    choice = str(requested).lower() if requested else _setting(cfg, kind)
    if choice not in ENGINES:
        if kind == "query":
            raise ValueError(f"query engine {choice!r}: must be one of {', '.join(ENGINES)} "
                             "(config [query] engine, FLOWLAKE_QUERY_ENGINE or --engine)")
        raise ValueError(f"config [reports] engine = {choice!r}: must be one of auto, spark, local")
    if choice != "auto":
        return choice
    return auto(str(master or cfg.spark.master), lake_here(cfg))


def auto(master: str, lake_on_this_machine: bool) -> str:
    """The `auto` rule (module docstring): spark only for a cluster master and a lake this
    machine does not have; local otherwise."""
    cluster = not master.startswith("local")
    return "spark" if cluster and not lake_on_this_machine else "local"


def lake_here(cfg) -> bool:
    """The lake is on this machine's disk (its folder exists here)."""
    return cfg.lake.exists()


def for_reports(ctx) -> str:
    """The engine of a report job (top_talkers, flow_size_dist): choose() with the master of
    the runner's Spark session."""
    return choose(ctx.cfg, "reports", master=ctx.spark.sparkContext.master)


def status(cfg) -> dict:
    """For `flowlake status`: what `auto` (or the setting) picks here, with its inputs."""
    out = {"master": str(cfg.spark.master), "lake_on_this_machine": lake_here(cfg)}
    for kind in SETTING:
        try:
            out[kind] = {"setting": _setting(cfg, kind), "engine": choose(cfg, kind)}
        except ValueError as exc:
            out[kind] = {"setting": _setting(cfg, kind), "error": str(exc)}
    return out


def status_line(st: dict) -> str:
    """One line for `flowlake status` from status()."""
    parts = []
    for kind, setting in SETTING.items():
        s = st[kind]
        parts.append(f"{kind} {s.get('engine', 'error: ' + s.get('error', ''))} ({setting} = {s['setting']})")
    where = "on this machine" if st["lake_on_this_machine"] else "not on this machine"
    return f"engines: {', '.join(parts)}; Spark master {st['master']}, lake {where}"
