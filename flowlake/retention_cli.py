"""`flowlake retention`: apply [retention] to every tier, or show what it would do."""
from __future__ import annotations

import json

import click

from flowlake import retention_service as daemon
from flowlake.base import config
from flowlake.pipelines.retention import report, run

EPILOG = """
\b
Examples:
  flowlake retention --dry-run          what would go per tier, and the space it frees
  flowlake retention                    remove it (the stack also does this on a schedule)
  flowlake retention --dry-run --json   the full list, machine-readable
  FLOWLAKE_RETENTION_FLOWS_DAYS=7 flowlake retention --dry-run   try a tighter bound first

\b
Tiers and keys ([retention] in flowlake.toml, FLOWLAKE_RETENTION_<KEY>; 0 days = forever):
  spool        nfcapd files, once the ledger AND the lake have their flows,
               spool_grace_hours after shipping; unshipped files never go
  kafka        flows.v1, active.v1, flows.dlq: retention.ms = kafka_hours,
               retention.bytes = kafka_bytes split over partitions (the broker deletes)
  flows        lake/flows/date=D older than flows_days (the flows' own date)
  quarantine   lake/quarantine/* older than quarantine_days
  rollup_1m/5m/1h  lake/rollups/<res>/date=D older than rollup_<res>_days
  attacks, mitigations  lake/attacks|mitigations/date=D older than attacks_days, mitigations_days
  reports, active  kept
Disk guard: above disk_high_water_pct used, the oldest expendable data goes too (spool
files already in the lake, then raw flow days that have rollups); below disk_floor_pct
free the running stack pauses the shipper and the ingest until space returns.
"""


@click.command("retention", epilog=EPILOG)
@click.option("--dry-run", is_flag=True, help="List what would be removed and the space it frees; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable plan (every unit, with its reason).")
@click.option("--serve", is_flag=True,
              help="Run as the stack's retention service: the disk guard every few seconds, a pass every "
                   "10 minutes (`flowlake up` starts it; log in $FLOWLAKE_HOME/log/retention.log).")
def retention(dry_run: bool, as_json: bool, serve: bool) -> None:
    """Bound the storage of every tier: spool, Kafka, lake flows, quarantine, rollups.

    Prints a table per tier: its limit, what it holds (units, size, oldest day) and
    what goes (units, bytes freed), then the units themselves with the reason.
    """
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)

    cfg = config.get()
    if serve:
        daemon.serve(cfg)
        return
    p = run.plan(cfg, kafka_apply=not dry_run)
    plan_json = p.as_json()
    if not dry_run:
        plan_json["result"] = run.execute(cfg, p)
    plan_json["dry_run"] = dry_run
    if as_json:
        click.echo(json.dumps(plan_json, indent=2, default=str))
        return
    report.render_plan(Console(), plan_json, cfg.home_dir, dry_run)
