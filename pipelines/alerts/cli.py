"""`flowlake alerts list|show|ack|snooze|serve`."""
from __future__ import annotations

import getpass
import json
import re
import time

import click

from flowlake.base import config as _config

from .service import serve as run


def _store(cfg):
    from .store import AlertStore  # noqa: PLC0415  (start-up: pyarrow)

    return AlertStore.from_config(cfg)


@click.group()
def alerts() -> None:
    """Alerts of the live detectors (scans, fan-in floods, interface and exporter volume,
    silent exporters, new talkers on watched ports, block-listed prefixes).

    \b
    The alerts service (started by `flowlake up`) judges every rotated nfcapd interval
    as it reaches Kafka and keeps the alerts in lake/alerts/. One alert per detector and
    subject while its condition lasts; it resolves after [alerts] resolve_after_seconds
    without it. Thresholds, baselines and watch lists: [alerts] and [security] in
    flowlake.toml.

    \b
    Examples:
      flowlake alerts list                      open alerts (not resolved)
      flowlake alerts list --all --json         every stored alert as a JSON array
      flowlake alerts show 3fa2c1d09b7e
      flowlake alerts ack 3fa2c1d09b7e          stop its update notifications
      flowlake alerts snooze 3fa2c1d09b7e --for 2h
    """


@alerts.command("list")
@click.option("--all", "show_all", is_flag=True, help="Resolved alerts too (default: open ones only).")
@click.option("--detector", help="Only this detector (scan, fan_in, interface_volume, exporter_volume, "
                                 "exporter_silent, new_talker, blocklist).")
@click.option("--state", "state", type=click.Choice(["open", "acknowledged", "snoozed", "resolved"]),
              help="Only alerts in this state.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of objects: id, detector, subject, state, "
                                                      "severity, started, updated, ended, summary.")
def list_cmd(show_all: bool, detector: str | None, state: str | None, as_json: bool) -> None:
    """List alerts, newest first."""
    from .lifecycle import public  # noqa: PLC0415  (start-up: pyarrow)

    cfg = _config.get()
    now = int(time.time() * 1000)
    rows = [public(r, now) for r in sorted(_store(cfg).read(), key=lambda r: (-r["updated"], r["id"]))]
    if detector:
        rows = [r for r in rows if r["detector"] == detector]
    if state:
        rows = [r for r in rows if r["state"] == state]
    elif not show_all:
        rows = [r for r in rows if r["state"] != "resolved"]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    t = Table(title=f"alerts ({len(rows)}{'' if show_all or state else ' not resolved; --all for every one'})")
    for col in ("id", "detector", "subject", "state", "severity", "started", "updated", "summary"):
        t.add_column(col, overflow="fold")
    colours = {"critical": "bold red", "warning": "yellow"}
    for r in rows:
        t.add_row(r["id"], r["detector"], r["subject"], r["state"],
                  f"[{colours.get(r['severity'], 'white')}]{r['severity']}[/]", r["started"][:19], r["updated"][:19],
                  r["summary"])
    Console().print(t)


def _find(cfg, alert_id: str) -> dict:
    row = _store(cfg).find(alert_id)
    if row is None:
        raise click.ClickException(f"no alert {alert_id!r} in {_store(cfg).root} (`flowlake alerts list --all`)")
    return row


@alerts.command()
@click.argument("alert_id")
@click.option("--json", "as_json", is_flag=True, help="Every stored column as JSON.")
def show(alert_id: str, as_json: bool) -> None:
    """One alert with its evidence (ALERT_ID: its id, or a unique prefix of 4+ digits)."""
    from .lifecycle import public  # noqa: PLC0415  (start-up: pyarrow)
    from .store import iso  # noqa: PLC0415  (start-up: pyarrow)

    cfg = _config.get()
    row = _find(cfg, alert_id)
    full = {**row, **public(row)}
    for k in ("resolved_at", "acked_at", "snoozed_until"):
        full[k] = iso(row[k])
    full["details"] = json.loads(row["details"] or "{}")
    if as_json:
        click.echo(json.dumps(full, indent=1))
        return
    for k, v in full.items():
        if k != "details":
            click.echo(f"{k:14s} {'-' if v is None else v}")
    click.echo("details")
    for k, v in full["details"].items():
        click.echo(f"  {k:20s} {v}")


def _change(cfg, alert_id: str, **fields) -> dict:
    store = _store(cfg)
    with store.lock():
        row = _find(cfg, alert_id)
        if row["state"] == "resolved" and "state" in fields and fields["state"] != "snoozed":
            raise click.ClickException(f"alert {row['id']} is resolved already")
        row.update(fields)
        store.save([row])
    return row


@alerts.command()
@click.argument("alert_id")
@click.option("--by", default=None, help="Who acknowledges (default: the login name).")
def ack(alert_id: str, by: str | None) -> None:
    """Acknowledge an alert: it stays until resolved, its updates no longer notify."""
    cfg = _config.get()
    row = _find(cfg, alert_id)
    fields = {"acked_at": int(time.time() * 1000), "acked_by": by or getpass.getuser()}
    if row["state"] == "open":
        fields["state"] = "acknowledged"
    row = _change(cfg, alert_id, **fields)
    click.echo(f"acknowledged {row['id']} ({row['detector']} {row['subject']}) by {row['acked_by']}")


DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")


def parse_duration(text: str) -> float:
    m = DURATION.match(text.strip())
    if not m:
        raise click.BadParameter(f"{text!r}: expected a number and s, m, h or d (e.g. 30m, 2h)")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@alerts.command()
@click.argument("alert_id")
@click.option("--for", "duration", default="1h", show_default=True, help="How long: 30m, 2h, 1d ...")
def snooze(alert_id: str, duration: str) -> None:
    """Mute an alert's notifications for a while; should its subject fire again within
    that time (a new alert for the same detector and subject), it stays muted too."""
    cfg = _config.get()
    until = int((time.time() + parse_duration(duration)) * 1000)
    row = _find(cfg, alert_id)
    fields = {"snoozed_until": until}
    if row["state"] != "resolved":
        fields["state"] = "snoozed"
    row = _change(cfg, alert_id, **fields)
    from .store import iso  # noqa: PLC0415  (start-up: pyarrow)

    click.echo(f"snoozed {row['id']} ({row['detector']} {row['subject']}) until {iso(until)}")


@alerts.command()
@click.option("--once", is_flag=True, help="Judge what Kafka holds now, then exit (tests, backfills).")
def serve(once: bool) -> None:
    """Run the detectors on the live stream (what `flowlake up` starts)."""
    run(_config.get(), once=once)
