"""The `flowlake` command. Subcommands live in their own modules and load lazily,
so `flowlake --help` is instant and a broken optional module cannot break the rest."""
from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from flowlake.base import quick_exit
from flowlake.base.config import ConfigError
from flowlake.collectors.commands import COMMANDS as COLLECTOR_COMMANDS
from flowlake.jobs.commands import COMMANDS as JOB_COMMANDS
from flowlake.pipelines.commands import COMMANDS as PIPELINE_COMMANDS

# name -> (module:attribute, one-line help). Each attribute is a click command or group.
# Each stage owns its commands (collectors/commands.py, pipelines/commands.py,
# jobs/commands.py); the hub's own are here: the stack, the labs, Superset, the demo.
HUB_COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("flowlake.stack:up", "Start the local stack (Kafka, nfcapd, shipper, ingest, Superset)."),
    "down": ("flowlake.stack:down", "Stop every component of the local stack."),
    "status": ("flowlake.stack:status", "Components, pids, ports and per-stage counts."),
    "import": ("flowlake.importer:import_cmd", "Import an nfcapd archive (files or YYYY/MM/DD trees) beside the live stack."),
    "cluster": ("flowlake.cluster:cluster", "Start, stop and show a Spark standalone cluster (master + workers)."),
    "lab": ("flowlake.lab_cli:lab", "Network-namespace labs with real packets: `lab run SPEC.toml` studies, bulk-impact."),
    "superset": ("flowlake.superset_cli:superset", "Superset credentials and dashboard provisioning."),
    "demo": ("flowlake.demo:demo", "The main job end to end: stack, a day of traffic, reports, Superset."),
    "schema": ("flowlake.schema_cli:schema", "Print generated views (Avro, Spark, Markdown) of a record."),
    "lake": ("flowlake.lake_cli:lake", "The lake's tables: `lake migrate` turns an older Parquet lake into Delta tables."),
    "retention": ("flowlake.retention_cli:retention", "Expire old data per tier ([retention]); --dry-run shows what goes."),
    "metrics": ("flowlake.metrics:metrics", "Prometheus metrics of the stack (one scrape, or --serve /metrics)."),
    "config": ("flowlake.schema_cli:config_cmd", "Print the effective configuration."),
}
COMMANDS: dict[str, tuple[str, str]] = {**COLLECTOR_COMMANDS, **PIPELINE_COMMANDS, **JOB_COMMANDS, **HUB_COMMANDS}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        target, _ = COMMANDS[name]
        module, attr = target.split(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            reason = str(exc)  # `exc` itself is unbound once this block ends

            @click.command(name=name, help=COMMANDS[name][1])
            def unavailable():
                raise click.ClickException(f"'{name}' is not available in this install: {reason}")
            return unavailable

    def format_commands(self, ctx, formatter):
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="flowlake")
@click.option("-v", "--verbose", count=True, help="More log detail (-vv for debug).")
def main(verbose: int) -> None:
    """flowlake: passive flow analytics for network operators.

    Routers export NetFlow/IPFIX to nfcapd; flowlake ships every flow into Kafka,
    streams it into a Parquet lake with Spark and computes daily reports that
    Superset shows.

    \b
    Typical use:
      flowlake up                 start the local stack (returns when healthy)
      flowlake status             what runs, and counts at every stage
      flowlake jobs run --date 2026-11-20
      flowlake query 'proto tcp and dst port 22' --stats srcip/flows
      flowlake down

    Configuration: flowlake.toml, overridden by FLOWLAKE_* environment variables
    (`flowlake config` shows the result).
    """
    from flowlake.base import logs  # noqa: PLC0415  (start-up: flowlake --help)

    logs.setup(verbose)




def run() -> None:
    try:
        main(standalone_mode=True)
    except SystemExit as exc:
        if quick_exit.requested() and not exc.code:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except OSError:  # a closed pipe (`| head`): the normal way out, as without quick_exit
                raise exc from None
            logging.shutdown()
            os._exit(0)
        raise
    except ConfigError as exc:
        click.echo(f"flowlake: configuration error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    run()
