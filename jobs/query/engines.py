"""Which engine answers `flowlake query` and `flowlake host`: jobs/engines.py decides, for
the reports and the queries alike (its docstring has the one `auto` rule).

`[query] engine` (FLOWLAKE_QUERY_ENGINE, or `--engine` for one command):
- local: DuckDB inside the command (duck.py). Starts in ~0.1 s.
- spark: a Spark session on `[spark] master` (spark_engine.py), for a lake on a cluster.
- auto:  jobs/engines.py's rule: local when the lake is on this machine's disk or Spark runs
         in local mode; Spark when the master is a cluster and the lake is not here.
`--master` names a Spark master for the command, and so asks for Spark (as --engine spark)
unless --engine is given.
Both engines give the same rows (tests/jobs/test_query.py holds them equal, and to nfdump).
"""
from __future__ import annotations

import sys

from flowlake.jobs import count_rule
from flowlake.jobs import engines as _engines

ENGINES = _engines.ENGINES
PROGRESS = ("auto", "always", "never")


def choose(cfg, override: str | None = None, master: str | None = None) -> str:
    """jobs/engines.choose for a query; `master` (--master) asks for Spark unless `override`
    (--engine) names local or spark."""
    if master and str(override or cfg.query.engine).lower() == "auto":
        override = "spark"
    return _engines.choose(cfg, "query", requested=override)


def show_progress(cfg, flag: bool | None, stream=None) -> bool:
    """--progress/--no-progress, else [query] progress: auto = only when stderr is a terminal
    (piped or captured output never gets progress lines)."""
    if flag is not None:
        return flag
    mode = str(cfg.query.progress).lower()
    if mode not in PROGRESS:
        raise ValueError(f"config [query] progress = {mode!r}: must be one of {', '.join(PROGRESS)}")
    stream = stream or sys.stderr
    return mode == "always" or (mode == "auto" and stream.isatty())


def open_engine(cfg, start=None, end=None, engine: str | None = None, master: str | None = None,
                progress: bool = False, as_of=None, count_at: str | None = None):
    """The chosen engine over the flows of [start, end), read as of `as_of` (--as-of: a
    table version, or a time: the newest version committed at or before it; lake/flows
    must be a Delta table) or, by default, the newest version; counted by `count_at`
    (--count-at), else by `[query] count_at` (jobs/count_rule.py query_settings; CountRuleError
    names a bad one)."""
    rule, window, where = count_rule.query_settings(cfg, count_at)
    name = choose(cfg, engine, master)
    if name == "spark":
        from .spark_engine import SparkEngine

        eng = SparkEngine(cfg, start, end, master=master, progress=progress, as_of=as_of, count_at=rule,
                          window_seconds=window)
        eng.count_where = where
        return eng
    from .duck import DuckEngine, Progress

    eng = DuckEngine(cfg, start, end, threads=duck_threads(int(cfg.query.threads)),
                     progress=Progress(sys.stderr) if progress else None, as_of=as_of, count_at=rule,
                     window_seconds=window)
    eng.count_where = where  # named by say_rule
    return eng


def say_rule(eng, override: str | None = None, stream=None) -> None:
    """One line on stderr naming the counting rule the answer used (stdout stays nfdump-like)."""
    where = getattr(eng, "count_where", None)
    (stream or sys.stderr).write(count_rule.describe(eng.count_at, eng.window_seconds, override, where) + "\n")


def say_version(eng, as_of, stream=None) -> None:
    """With --as-of: one line on stderr naming the version of lake/flows read (stdout stays
    nfdump-like)."""
    if as_of is None:
        return
    text = as_of.isoformat() if hasattr(as_of, "isoformat") else str(as_of)
    (stream or sys.stderr).write(f"lake/flows read at version {eng.version} (--as-of {text})\n")


def duck_threads(configured: int, cores: int | None = None, load: float | None = None) -> int:
    """[query] threads, or for 0 every core unless the machine is oversubscribed (1-minute
    load average above twice the cores), then one. Every core, as nfdump and DuckDB itself
    do: the load average mostly counts the analyst's own last commands (a run of queries on
    an idle 2-core box holds it near 2), and one thread then left a core idle while nfdump
    used 1.3 (bench/query.py: a day's answers took 1.9x longer). One thread on a box far
    past its cores: the extra threads only wait for a core and their coordination costs CPU
    (load 14 on 2 cores: a day's top-N took 10-15 % less CPU and wall time on 1 than on 2)."""
    import os

    if configured > 0:
        return configured
    cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not on this platform
            load = 0.0
    return cores if load <= 2 * cores else 1
