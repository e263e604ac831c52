"""`flowlake snmp`: poll exporters' SNMP agents (names for the enricher, counters for the lake)."""
from __future__ import annotations

import json
import logging

import click

from flowlake.base import config as _config

from .service import poll_once, print_status, serve, status


@click.group()
def snmp() -> None:
    """SNMP poller: interface names, aliases, speeds and states per exporter, and counters.

    \b
    Exporters with SNMP: [exporters."ADDR"] snmp = true (or any snmp_* key), or every
    exporter seen sending flows with [snmp] poll_seen = true. Credentials in [snmp]
    (version "2c": community; "3": user, auth/priv protocols and passwords), overridable
    per exporter as snmp_<key>; snmp_agent = the agent's address when not ADDR.
    `flowlake up` runs `snmp serve` as a service; names go to
    $FLOWLAKE_HOME/state/snmp/interfaces.json, counters to lake/interface_counters/.

    \b
      flowlake snmp poll                 # poll every exporter once now, show the result
      flowlake snmp poll -e 192.0.2.1    # just this one
      flowlake snmp status --json
    """


@snmp.command("serve")
def serve_cmd() -> None:
    """Run the poller in the foreground (what `flowlake up` starts)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve()


@snmp.command("poll")
@click.option("-e", "--exporter", "exporters", multiple=True, help="Only this exporter (its address in the flows); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def poll_cmd(exporters: tuple[str, ...], as_json: bool) -> None:
    """Poll now: names, speeds and states into interfaces.json, a counter sample into the lake.

    Run twice to see counter deltas (the first poll of an exporter has none). Exit status 1
    when an agent failed (the error is also kept for `flowlake status`)."""
    try:
        result = poll_once(exporters=list(exporters) or None)
    except _config.ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        if not result["exporters"]:
            click.echo("no exporter has SNMP (see `flowlake snmp --help`)")
        for addr, s in result["exporters"].items():
            click.echo(f"{addr}: {s.get('agent')}: " + (f"ERROR {s['error']}" if s.get("error") else
                                                       f"{s.get('interfaces', 0)} interfaces, counters at {s.get('last_counters')}"))
    if any(s.get("error") for s in result["exporters"].values()):
        raise SystemExit(1)


@snmp.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status_cmd(as_json: bool) -> None:
    """The poller's state per exporter (also part of `flowlake status`)."""
    st = status()
    if as_json:
        click.echo(json.dumps(st, indent=1))
        return
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)

    print_status(Console(), st)
