"""`flowlake import`: an existing nfdump/NfSen archive into the lake, beside the live stack.

The Go shipper does the work (`flowlake-shipper import`, collectors/shipper/import.go):
the same reader, encoder and one-transaction-per-file as the live shipper, but archive
files are known by their content (the SHA-256 of their decoded flows, so a recompressed
or moved copy is the same file) and every import shares one transactional id per ledger, so two imports fence each other and a rerun after a kill finds in the
ledger exactly what was committed. This module makes sure Kafka and the ingest run,
renders progress, waits for the ingest to land what was imported and rebuilds the
daily reports of every imported date.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from pathlib import Path

import click

from flowlake import components
from flowlake.base import config as _config
from flowlake.base.process import port_open
from flowlake.collectors import kafka, ship
from flowlake.pipelines import retention


def state_file(cfg) -> Path:
    return cfg.path("state", "import.json")


def transactional_id(cfg) -> str:
    """One per ledger: a second import fences the first instead of racing it."""
    return f"flowlake-import.{cfg.kafka.ledger_topic}"


def import_argv(cfg, paths, throttle: int = 0) -> list[str]:
    args = ship.common_args(cfg)
    # the live shipper's state, lock and transaction timeout are its own
    over = {"--state": str(state_file(cfg)), "--lock": str(cfg.path("run", "import.lock")),
            "--txn-timeout": f"{int(cfg.data['import']['txn_timeout_seconds'])}s"}
    for i in range(0, len(args) - 1):
        if args[i] in over:
            args[i + 1] = over[args[i]]
    argv = [str(ship.BINARY), "import", "--events", "--transactional-id", transactional_id(cfg),
            "--message-compression", str(cfg.data["import"]["message_compression"]), *args]
    if throttle:
        argv += ["--throttle", str(throttle)]
    return argv + [str(p) for p in paths]


def child_env(cfg) -> dict:
    """The shipper's environment plus the importer's memory bound."""
    return {**ship.child_env(cfg), "GOMEMLIMIT": f"{int(cfg.data['import']['memory_mb'])}MiB"}


def status(cfg) -> dict:
    """The last import's counters (state/import.json), for `flowlake status`."""
    try:
        return json.loads(state_file(cfg).read_text())
    except (OSError, ValueError):
        return {}


# ---- what the import needs running ----------------------------------------------------
def ensure_services(cfg, console) -> list[str]:
    """Start Kafka (local broker) and the ingest if they are not running; name them."""
    started = []
    if cfg.kafka.bootstrap:
        host, _, port = cfg.kafka.bootstrap.split(",")[0].rpartition(":")
        if not port_open(host.strip("[]"), int(port)):
            raise click.ClickException(
                f"Kafka at {cfg.kafka.bootstrap} (kafka.bootstrap) is not reachable: start that broker, "
                "or unset kafka.bootstrap to let flowlake run its own (`flowlake up`)")
    elif not kafka.healthy(cfg):
        console.print("Kafka is not running: starting the local broker (`flowlake down` stops it)")
        kafka.start(cfg)
        started.append("kafka")
    kafka.ensure_topics(cfg)
    if components.get(cfg, "ingest").state()["state"] != "running":
        console.print("the ingest is not running: starting it, so imported flows reach the lake "
                      "(`flowlake down` stops it)")
        components.get(cfg, "ingest").start()
        started.append("ingest")
    return started


# ---- waiting for the lake -------------------------------------------------------------
def kafka_high_watermarks(cfg) -> dict[int, int]:
    """End of the flows topic now (commit markers included): the imported flows lie before it."""
    from confluent_kafka import Consumer  # noqa: PLC0415  (start-up: confluent_kafka)

    consumer = Consumer({**cfg.kafka_client_conf(), "group.id": "flowlake-import", "enable.auto.commit": False})
    try:
        return kafka.end_offsets(cfg, consumer, cfg.kafka.flows_topic, "read_uncommitted")
    finally:
        consumer.close()


def ingest_position(cfg) -> dict[int, int]:
    """Per partition of the flows topic, the offset the ingest has written up to: the
    offsets of its last committed micro-batch (Spark checkpoint offsets/N with commits/N)."""
    root = cfg.path("state", "checkpoints", "flows")
    commits = [int(p.name) for p in (root / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return {}
    lines = (root / "offsets" / str(max(commits))).read_text().splitlines()
    for line in lines[2:]:
        data = json.loads(line)
        if cfg.kafka.flows_topic in data:
            return {int(p): int(o) for p, o in data[cfg.kafka.flows_topic].items()}
    return {}


def wait_for_ingest(cfg, target: dict[int, int], timeout: float, progress=None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pos = ingest_position(cfg)
        behind = sum(max(0, end - pos.get(p, 0)) for p, end in target.items())
        if progress:
            progress(behind)
        if behind == 0:
            return
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"the ingest is still {behind:,} messages behind the import after {timeout:.0f}s "
                "(import.wait_lake_seconds): see `flowlake status`; rebuild reports later with "
                "`flowlake jobs run --date D`")
        time.sleep(2)


# ---- hooks -----------------------------------------------------------------------------
def day_warnings(cfg, days: list[dt.date]) -> list[str]:
    """Days older than [retention] flows_days: imported, but the next retention run
    removes their raw flows again (they survive as rollups only)."""
    expired = retention.expired_dates(cfg, days)
    if not expired:
        return []
    span = f"{expired[0]}" + (f" .. {expired[-1]}" if len(expired) > 1 else "")
    return [f"{len(expired)} day(s) ({span}) are older than retention.flows_days="
            f"{cfg.retention.flows_days}: their raw flows will be removed by the next retention run "
            "and survive as rollups only; raise FLOWLAKE_RETENTION_FLOWS_DAYS (0 = forever) to keep them"]


_NAME_DATE = re.compile(r"nfcapd\.(\d{4})(\d{2})(\d{2})\d{4}")


def named_days(paths) -> list[dt.date]:
    """The days the files below `paths` are named after (nfcapd.YYYYMMDDhhmm): known
    before anything ships, so the retention warning comes first."""
    days = set()
    for root in paths:
        names = [Path(root).name] if Path(root).is_file() else (f for _, _, fs in os.walk(root) for f in fs)
        for name in names:
            m = _NAME_DATE.match(name)
            if m:
                try:
                    days.add(dt.date(int(m[1]), int(m[2]), int(m[3])))
                except ValueError:
                    pass
    return sorted(days)


# ---- reports ---------------------------------------------------------------------------
def rebuild_reports(cfg, days: list[dt.date], console, names: tuple[str, ...] = ()) -> list[str]:
    """The report jobs (all, or `names`) for each day, in one Spark session; returns failures."""
    from flowlake.base import spark as spark_factory  # noqa: PLC0415  (start-up: flowlake status)
    from flowlake.jobs import runner  # noqa: PLC0415  (start-up: flowlake status)

    found = runner.discover()
    unknown = [n for n in names if n not in found]
    if unknown:
        raise click.BadParameter(f"unknown job(s) {', '.join(unknown)}; known: {', '.join(sorted(found))}",
                                 param_hint="--job")
    selected = runner.order(found, list(names) or sorted(found))
    failures = []
    with console.status("starting Spark for the reports ...") as st:
        spark = spark_factory.session("flowlake-import-reports", cfg=cfg)
        for day in days:
            outcomes = runner.run_jobs(spark, cfg, day, selected,
                                       progress=lambda name, d=day: st.update(f"reports for {d}: [bold]{name}[/bold]"))
            bad = [o for o in outcomes if o.status != "ok"]
            console.print(f"reports for {day}: {len(outcomes) - len(bad)} jobs ok"
                          + (f", [red]{len(bad)} failed[/red]" if bad else ""))
            failures += [f"{day} {o.job}: {o.status}: {o.error}" for o in bad]
    return failures


# ---- the command -----------------------------------------------------------------------
EXAMPLES = """
\b
Examples:
  flowlake import /srv/nfsen/profiles-data/live/router1     a whole NfSen channel tree
  flowlake import /archive/2025/03 /archive/2025/04         two months of an nfdump tree
  flowlake import nfcapd.202503011200 nfcapd.202503011205   single files
  flowlake import --no-reports /archive                     import only, reports later
  flowlake import --job traffic_totals /archive/2025         rebuild just one report per day
  flowlake status                                           files/flows imported, last run's state

\b
Files: every regular file below each PATH, in name order (YYYY/MM/DD/nfcapd.YYYYMMDDhhmm
is time order). Any compression nfdump writes (none, LZO -z, BZ2 -j, LZ4 -y, ZSTD);
a file the built-in reader rejects is handed to nfdump itself, so every file
nfdump 1.7 reads is imported. Others are copied to
$FLOWLAKE_HOME/lake/quarantine/nfcapd/ with a .reason file; the import goes on.

\b
Exactly once: each file ships in one Kafka transaction with its ledger record,
keyed by the SHA-256 of its decoded flows. Rerun the same command after a kill
or a failure: what was committed is skipped ("already imported"), the rest ships.
The same flows under another path or in another compression are skipped too.
Files in the live spool ($FLOWLAKE_HOME/nfcapd) are the live shipper's and are
skipped. A killed import holds back the live ingest for at most
import.txn_timeout_seconds, or until the rerun.

\b
Runs beside the live stack (`flowlake up`); with the stack down it starts Kafka
and the ingest it needs and leaves them running. Afterwards it waits for the
ingest to land the imported flows and rebuilds the daily reports of every
imported date (as `flowlake jobs run --date D`).
"""


@click.command("import", epilog=EXAMPLES)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--no-reports", is_flag=True, help="Do not wait for the lake nor rebuild the daily reports.")
@click.option("--job", "jobs", multiple=True, metavar="NAME",
              help="Rebuild only this report job (repeatable); default: every job (`flowlake jobs list`).")
@click.option("--throttle", type=int, default=0, hidden=True, help="Testing: at most this many flows/s.")
def import_cmd(paths: tuple[Path, ...], no_reports: bool, jobs: tuple[str, ...], throttle: int) -> None:
    """Import nfcapd files and whole nfdump/NfSen archive trees into the lake."""
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)

    cfg = _config.get()
    console = Console(stderr=True, soft_wrap=True)
    named = named_days(paths)
    for warning in day_warnings(cfg, named):
        console.print(f"[yellow]WARNING: {warning}[/yellow]")
    ship.build_binary()
    ensure_services(cfg, console)
    result = run_import(cfg, paths, console, throttle)
    show_summary(result, console)
    # days this run imported, and days of files an earlier (killed) run imported
    days = sorted(dt.date.fromisoformat(d) for d in set(result["days"]) | result["earlier_days"])
    for warning in day_warnings(cfg, [d for d in days if d not in named]):  # files named otherwise
        console.print(f"[yellow]WARNING: {warning}[/yellow]")
    problems = []
    if result["rc"] != 0:
        problems.append(result["error"])
    if days and not no_reports:
        target = kafka_high_watermarks(cfg)
        with console.status("waiting for the ingest to land the imported flows ...") as st:
            wait_for_ingest(cfg, target, float(cfg.data["import"]["wait_lake_seconds"]),
                            progress=lambda n: st.update(f"waiting for the ingest: {n:,} messages to go"))
        problems += rebuild_reports(cfg, days, console, jobs)
    for p in problems:
        console.print(f"[red]{p}[/red]")
    if problems:
        raise SystemExit(1)


def run_import(cfg, paths, console, throttle: int = 0) -> dict:
    """Run the Go importer with a progress bar; return its totals."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn  # noqa: PLC0415  (start-up: rich)

    argv = import_argv(cfg, paths, throttle)
    out = {"days": {}, "earlier_days": set(), "shipped": 0, "skipped": 0, "quarantined": [], "flows": 0, "rc": 0, "error": ""}
    t0 = time.monotonic()
    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.fields[done]}/{task.fields[files]} files"),
               TextColumn("{task.fields[rate]} flows/s"), TextColumn("ETA"), TimeRemainingColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("importing", total=None, done=0, files="?", rate="-")
        done = flows = 0
        run = ship.ShipperRun(argv, child_env(cfg))
        for ev in run:
            kind = ev.get("event")
            rate = f"{flows / max(time.monotonic() - t0, 1e-3):,.0f}"
            if kind == "plan":
                bar.update(task, total=max(ev["bytes"], 1), files=ev["files"])
            elif kind == "progress":
                bar.update(task, rate=f"{(flows + ev['flows']) / max(time.monotonic() - t0, 1e-3):,.0f}")
            elif kind in ("shipped", "skipped", "quarantined"):
                done += 1
                size = ev.get("size") or _size(ev["file"])
                if kind == "shipped":
                    flows += ev["flows"]
                    out["shipped"] += 1
                elif kind == "skipped":
                    out["skipped"] += 1
                    out["earlier_days"].update(ev.get("days") or {})
                    console.print(f"skipped {ev['file']}: {ev['reason']}")
                else:
                    out["quarantined"].append((ev["file"], ev["error"]))
                    console.print(f"[red]quarantined[/red] {ev['file']}: {ev['error']}")
                bar.update(task, advance=size, done=done, rate=rate)
            elif kind == "days":
                for d, n in (ev["days"] or {}).items():
                    out["days"][d] = out["days"].get(d, 0) + n
            elif kind == "failed":
                console.print(f"[red]failed[/red] {ev['file']}: {ev['error']}")
    out["rc"], out["error"] = run.rc, run.error
    out["flows"] = flows
    out["seconds"] = time.monotonic() - t0
    return out


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def show_summary(result: dict, console) -> None:
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    t = Table(title="flows imported per day (UTC, by flow start)")
    t.add_column("date")
    t.add_column("flows", justify="right")
    for d in sorted(result["days"]):
        t.add_row(d, f"{result['days'][d]:,}")
    t.add_row("[bold]total", f"[bold]{sum(result['days'].values()):,}")
    console.print(t)
    rate = result["flows"] / max(result["seconds"], 1e-3)
    console.print(f"{result['shipped']} files imported ({result['flows']:,} flows, {rate:,.0f} flows/s), "
                  f"{result['skipped']} skipped, {len(result['quarantined'])} quarantined "
                  f"(lake/quarantine/nfcapd/, with .reason files)")
