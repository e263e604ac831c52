"""`flowlake jobs`: discover the report jobs in jobs/, order them by DEPENDS and run
them for one date with ONE Spark session; print what each wrote and how long it took.

A job is any module in jobs/ with NAME and run(ctx) (see jobs/context.py). A job that
fails (or cannot even be imported) is reported and makes the exit status non-zero,
but the other jobs still run; jobs depending on a failed job are skipped.
"""
from __future__ import annotations

import datetime as dt
import importlib
import logging
import pkgutil
import time
import traceback
from dataclasses import dataclass, field

import click

log = logging.getLogger(__name__)
NOT_JOBS = {"runner", "context", "common", "port_map"}


@dataclass
class Job:
    name: str
    module: str
    tables: tuple = ()
    depends: tuple = ()
    doc: str = ""
    run: object = None
    error: str = ""  # import failure


@dataclass
class Outcome:
    job: str
    status: str  # ok | failed | skipped
    seconds: float = 0.0
    tables: dict = field(default_factory=dict)
    error: str = ""


def discover() -> dict[str, Job]:
    """Every module of the jobs package that defines NAME and run; broken ones as errors."""
    from flowlake import jobs as pkg

    found: dict[str, Job] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name in NOT_JOBS or info.name.startswith("_") or info.ispkg:
            continue
        modname = f"{pkg.__name__}.{info.name}"
        try:
            mod = importlib.import_module(modname)
        except Exception as exc:  # another engineer's module may be mid-edit: report, don't die
            found[info.name] = Job(info.name, modname, error=f"cannot import {modname}: {exc!r}")
            continue
        if not (hasattr(mod, "NAME") and callable(getattr(mod, "run", None))):
            continue
        name = mod.NAME
        if name in found:
            raise click.ClickException(f"job name {name!r} defined by both {found[name].module} and {modname}")
        found[name] = Job(name, modname, tuple(getattr(mod, "TABLES", ())), tuple(getattr(mod, "DEPENDS", ())),
                          ((mod.__doc__ or "").strip().splitlines() or [""])[0], mod.run)
    return found


def order(jobs: dict[str, Job], selected: list[str]) -> list[Job]:
    """Selected jobs in dependency order (a topological order; ties alphabetical), each job
    as soon after the jobs it depends on as it can run: what a job shares with its dependents
    (ctx.shared, often a cached DataFrame) is then released early (run_jobs), not held in the
    session's memory through the rest of the set."""
    for name in selected:
        for dep in jobs[name].depends:
            if dep not in jobs:
                raise click.ClickException(f"job {name!r} depends on unknown job {dep!r} (known: {', '.join(sorted(jobs))})")
    chosen = set(selected)
    pending = {n: {d for d in jobs[n].depends if d in chosen} for n in chosen}
    out: list[Job] = []
    while pending:
        ready = sorted(n for n, deps in pending.items() if not deps)
        if not ready:
            raise click.ClickException(f"jobs depend on each other in a cycle: {', '.join(sorted(pending))}")
        last = out[-1].name if out else None
        following = [n for n in ready if last in jobs[n].depends]
        n = (following or ready)[0]
        out.append(jobs[n])
        del pending[n]
        for deps in pending.values():
            deps.discard(n)
    return out


def _context_class():
    from flowlake.jobs.context import JobContext

    class RecordingContext(JobContext):
        """JobContext that also remembers rows per table for the summary."""

        def write(self, df, table):
            rows = super().write(df, table)
            self.results[table] = rows
            return rows

        def write_duckdb(self, con, query, table):
            rows = super().write_duckdb(con, query, table)
            self.results[table] = rows
            return rows

    return RecordingContext


def run_jobs(spark, cfg, date: dt.date, jobs: list[Job], progress=None) -> list[Outcome]:
    """Run jobs in the given order; never raises for a job's failure."""
    from flowlake.pipelines.lake_read import LakeReader

    Ctx = _context_class()
    shared: dict = {}  # state jobs may share within this run (e.g. the enriched flows)
    snapshot = LakeReader(cfg.lake)  # one for the run: shared DataFrames outlive their job
    try:
        return _run_jobs(spark, cfg, date, jobs, progress, Ctx, shared, snapshot)
    finally:
        snapshot.close()


def _run_jobs(spark, cfg, date, jobs, progress, Ctx, shared, snapshot) -> list[Outcome]:
    failed: set[str] = set()
    outcomes = []
    producer: dict[str, str] = {}  # shared key -> the job that put it there
    for i, job in enumerate(jobs):
        if job.error:
            outcomes.append(Outcome(job.name, "failed", error=job.error))
            failed.add(job.name)
            continue
        bad = [d for d in job.depends if d in failed]
        if bad:
            outcomes.append(Outcome(job.name, "skipped", error=f"depends on failed job(s) {', '.join(bad)}"))
            failed.add(job.name)
            continue
        ctx = Ctx(spark=spark, cfg=cfg, date=date, snapshot=snapshot)
        ctx.shared = shared
        if progress:
            progress(job.name)
        # Spark's jobs carry the report job's name (event logs, UI): bench/jobs.py --cluster splits by it
        spark.sparkContext.setJobGroup(job.name, f"flowlake job {job.name} for {date}")
        t0 = time.monotonic()
        try:
            job.run(ctx)
            outcomes.append(Outcome(job.name, "ok", time.monotonic() - t0, dict(ctx.results)))
        except Exception as exc:
            log.debug("job %s failed:\n%s", job.name, traceback.format_exc())
            outcomes.append(Outcome(job.name, "failed", time.monotonic() - t0, dict(ctx.results),
                                    f"{type(exc).__name__}: {_short(exc)}"))
            failed.add(job.name)
        producer.update({k: job.name for k in shared if k not in producer})
        _release(spark, shared, producer, jobs[i + 1:])
    for value in shared.values():  # the run's scratch: counted rows' folders, ...
        if hasattr(value, "unpersist"):
            value.unpersist()
    return outcomes


def _release(spark, shared: dict, producer: dict, rest: list[Job]) -> None:
    """Free the caches no job still to run needs. A cached DataFrame a job handed its
    dependents through ctx.shared (behaviour_classes' classified flows) is unpersisted once
    none of `rest` depends on that job; and while no such hand-off is alive, every cache a
    job left behind goes too (a transform's .cache() that the job cannot unpersist, as the
    transform returns its frame lazily). Without this the caches piled up over the set and
    later jobs ran 1.5-1.8x slower than alone (the demo day's set: 371-428 s -> 260 s with
    it; not for want of heap: a 4g driver changed nothing). The run's own scratch (counted
    rows, plans) stays; a cache the caller made in the session before the run goes too."""
    needed = {d for job in rest for d in job.depends}
    cached = {k for k, v in shared.items() if getattr(v, "is_cached", False)}
    for key in [k for k in cached if producer.get(k) not in needed]:
        shared.pop(key).unpersist()
        producer.pop(key, None)  # a later job may share under the same key again
        cached.discard(key)
    if not cached:
        spark.catalog.clearCache()


def _short(exc: Exception) -> str:
    java = getattr(exc, "java_exception", None)  # py4j errors: the JVM's message says what went wrong
    text = (str(java) if java is not None else str(exc)).strip().splitlines()
    return text[0][:300] if text else ""


def parse_date(ctx, param, value):
    if value is None:
        return None
    try:
        return dt.datetime.strptime(value, "%Y-%m-%d").date()
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date: use YYYY-MM-DD, e.g. 2026-11-20") from None


# ---- CLI ------------------------------------------------------------------------------
@click.group()
def jobs():
    """Run the daily Spark report jobs (top talkers, protocol/app mix, traffic time
    series, flow sizes, and every other job module in jobs/).

    \b
    Examples:
      flowlake jobs list
      flowlake jobs run --date 2026-11-20
      flowlake jobs run --date 2026-11-20 --job top_talkers --job app_mix
      flowlake jobs run --date 2026-11-20 --master spark://10.1.2.3:7077
      FLOWLAKE_SPARK_MASTER=cluster flowlake jobs run --date 2026-11-20   # `flowlake cluster up`
      flowlake jobs run --date 2026-11-20 --no-warm   # leave Superset's cache empty
    """


@jobs.command("list")
def list_cmd():
    """List the discovered jobs, the tables they write and their dependencies.

    \b
    Example:
      flowlake jobs list
    """
    from rich.console import Console
    from rich.table import Table

    table = Table(title="flowlake jobs")
    for col in ("job", "tables", "depends on", "what"):
        table.add_column(col)
    for job in discover().values():
        what = f"[red]{job.error}[/red]" if job.error else job.doc
        table.add_row(job.name, ", ".join(t.name for t in job.tables), ", ".join(job.depends), what)
    Console().print(table)


@jobs.command("run")
@click.option("--date", "date", required=True, callback=parse_date, metavar="YYYY-MM-DD",
              help="UTC day to report on (flows whose start falls on it).")
@click.option("--job", "names", multiple=True, metavar="NAME",
              help="Run only this job (repeatable); default: every job. See `flowlake jobs list`.")
@click.option("--master", default=None, metavar="URL",
              help="Spark master (default: [spark] master): local[2]; cluster (this home's "
                   "`flowlake cluster up`); spark://host:7077. A cluster runs the jobs through spark-submit.")
@click.option("--warm/--no-warm", default=True, show_default=True,
              help="Afterwards, if this FLOWLAKE_HOME's Superset is up and provisioned, fill its chart "
                   "cache (`flowlake superset warm`): the first visitor then gets cached dashboards.")
def run_cmd(date: dt.date, names: tuple[str, ...], master: str | None, warm: bool):
    """Run report jobs for one date; each rewrites lake/reports/<table>/date=DATE/.

    Rerunning a date replaces exactly that date. A date without flows writes empty
    tables and says so. The exit status is non-zero if any job failed; the others
    still run. With a local master, or the lake on this machine's disk, top_talkers (Go
    kernel) and flow_size_dist (DuckDB) run in-process: same tables, 10-60x faster on one
    machine; [reports] engine = auto|spark|local (jobs/engines.py).

    \b
    Examples:
      flowlake jobs run --date 2026-11-20
      flowlake jobs run --date 2026-11-20 --job top_talkers
      FLOWLAKE_REPORTS_TOP_N=50 flowlake jobs run --date 2026-11-20 --job top_talkers
      FLOWLAKE_REPORTS_ENGINE=spark flowlake jobs run --date 2026-11-20 --job top_talkers
    """
    from rich.console import Console
    from rich.table import Table

    from flowlake.base import config
    from flowlake.base import spark as spark_factory

    from flowlake.pipelines.retention import disk

    console = Console(stderr=True)
    cfg = config.get()
    disk.refuse_below_floor(cfg, "jobs")  # the disk guard's pause: a full disk must not half-write reports
    found = discover()
    unknown = [n for n in names if n not in found]
    if unknown:
        raise click.BadParameter(f"unknown job(s) {', '.join(unknown)}; known: {', '.join(sorted(found))}",
                                 param_hint="--job")
    selected = order(found, list(names) or sorted(found))
    spark_factory.submit_if_cluster(f"flowlake-jobs-{date}", master, cfg)  # a cluster: through spark-submit
    from flowlake.pipelines.lake_read import lake_files  # noqa: PLC0415  (start-up: flowlake status)

    day = cfg.lake / "flows" / f"date={date.isoformat()}"
    if not day.exists() or not lake_files(cfg, "flows", [day])[1]:
        console.print(f"[yellow]no flows for {date} in {day}: the flow reports will be empty tables[/yellow]")
    with console.status("starting Spark ...") as status:
        spark = spark_factory.session(f"flowlake-jobs-{date}", master=master, cfg=cfg)
        outcomes = run_jobs(spark, cfg, date, selected,
                            progress=lambda name: status.update(f"running job [bold]{name}[/bold] for {date} ..."))
    summary = Table(title=f"flowlake jobs {date}")
    for col, just in (("job", "left"), ("status", "left"), ("table", "left"), ("rows", "right"), ("seconds", "right")):
        summary.add_column(col, justify=just)
    for o in outcomes:
        colour = {"ok": "green", "failed": "red", "skipped": "yellow"}[o.status]
        tables = list(o.tables.items()) or [("", None)]
        for i, (table, rows) in enumerate(tables):
            summary.add_row(o.job if i == 0 else "", f"[{colour}]{o.status}[/{colour}]" if i == 0 else "", table,
                            "" if rows is None else f"{rows:,}", f"{o.seconds:.1f}" if i == 0 else "")
    Console().print(summary)
    bad = [o for o in outcomes if o.status != "ok"]
    for o in bad:
        console.print(f"[red]{o.job}: {o.status}: {o.error}[/red]")
    if warm and len(bad) < len(outcomes):
        from flowlake.base import hooks

        hooks.after_reports(cfg, console)  # Superset's cache (the hub's; see base/hooks.py)
    if bad:
        raise SystemExit(1)
