"""`flowlake cluster up|down|status`: a Spark standalone cluster on this machine
(flowlake/base/spark_cluster.py), for the ingest and the jobs to run on."""
from __future__ import annotations

import json

import click

from flowlake.base import config as _config
from flowlake.base import spark_cluster

from .tables import process_table


@click.group()
def cluster():
    """A Spark standalone cluster under $FLOWLAKE_HOME: one master and N workers ([cluster]
    workers), each its own JVM (Spark's Master and Worker from the installed pyspark).

    The ingest and the daily jobs run on it when [spark] master = "cluster" (or a
    spark://HOST:PORT URL): each then starts as its own application through spark-submit,
    its executors on the workers. Jobs that have an in-process engine (top_talkers in the
    Go kernel, flow_size_dist on DuckDB) run on Spark there ([reports] engine = auto).

    \b
    Examples:
      flowlake cluster up                                # master + 2 workers on loopback
      FLOWLAKE_CLUSTER_WORKERS=4 flowlake cluster up     # scale to 4 workers
      FLOWLAKE_SPARK_MASTER=cluster flowlake jobs run --date 2026-11-20
      FLOWLAKE_SPARK_MASTER=cluster flowlake up          # the stack's ingest on the cluster
      flowlake cluster status --json
      flowlake cluster down
    """


@cluster.command("up")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Number of workers (default [cluster] workers); extra running ones are stopped.")
def up_cmd(workers: int | None) -> None:
    """Start the master and the workers; return when every worker has registered.

    Idempotent: starts only what is not running. Ports: [cluster] port and webui_port
    (0 picks free ones; the choice is kept in $FLOWLAKE_HOME/cluster/cluster.json).
    """
    cfg = _config.get()
    try:
        info = spark_cluster.up(cfg, workers)
    except (RuntimeError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Spark cluster up: master {info['master']} (pid {info['master_pid']}), "
               f"{len(info['worker_pids'])} worker(s), web UI {info['webui']}", err=True)
    click.echo(f"run on it: FLOWLAKE_SPARK_MASTER=cluster (or {info['master']}) flowlake jobs run --date YYYY-MM-DD",
               err=True)


@cluster.command("down")
def down_cmd() -> None:
    """Stop the workers, then the master (running applications lose their executors)."""
    stopped = spark_cluster.down(_config.get())
    click.echo(f"stopped: {', '.join(stopped) or 'nothing was running'}", err=True)


@cluster.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status_cmd(as_json: bool) -> None:
    """Master and workers (state, pid, port), cores and memory in use, running
    applications, and the cluster's disk use (each bounded; see flowlake.toml)."""
    st = spark_cluster.status(_config.get())
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    if not st:
        click.echo("no Spark cluster under this FLOWLAKE_HOME (`flowlake cluster up` starts one)")
        return
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)

    print_status(st, Console())


def print_status(st: dict, console) -> None:
    """The cluster's tables; also part of `flowlake status`."""
    console.print(process_table(f"Spark cluster {st['master'] or ''}", "process", st["processes"]))
    d = st["disk"]
    apps = ", ".join(f"{a['name']} ({a['cores']} cores)" for a in st["active_apps"]) or "none"
    console.print(f"web UI {st['webui'] or '-'}; workers alive {st['alive_workers']}; cores {st['cores_used'] or 0}/{st['cores'] or 0} in use; "
                  f"memory {st['memory_used_mb'] or 0}/{st['memory_mb'] or 0} MB; running apps: {apps}; "
                  f"finished apps {st['completed_apps']}")
    console.print(f"disk: worker folders {d['work_bytes']:,} bytes; event logs {d['event_logs']} "
                  f"(keeps {d['event_logs_keep']}), {d['event_log_bytes']:,} bytes")
