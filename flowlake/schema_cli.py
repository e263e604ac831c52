"""`flowlake schema` and `flowlake config`: print what the one schema module and the one
config file produce."""
from __future__ import annotations

import json

import click

from flowlake.base import config


@click.command()
@click.argument("view", type=click.Choice(["avro", "spark", "markdown", "sql", "list", "arrow", "formats"]))
@click.argument("name", required=False)
def schema(view: str, name: str | None) -> None:
    """Print a generated VIEW of record NAME (or every record).

    \b
    Examples:
      flowlake schema list
      flowlake schema avro Flow > flow.avsc
      flowlake schema markdown          # the docs table of every record
      flowlake schema formats           # wire formats of the flows topic, by version
      flowlake schema arrow Flow        # the columns of a FlowBatch message
    """
    from flowlake.schemas import messages, registry  # noqa: PLC0415  (start-up: flowlake config)

    if view == "formats":
        click.echo(messages.markdown())
        return
    records = registry()
    if view == "list":
        for rname, rec in sorted(records.items()):
            click.echo(f"{rname:24s} {rec.doc}")
        return
    chosen = [records[name]] if name else list(records.values())
    if name and name not in records:
        raise click.BadParameter(f"unknown record {name!r}; known: {', '.join(sorted(records))}")
    for rec in chosen:
        if view == "avro":
            click.echo(rec.avro_json())
        elif view == "spark":
            click.echo(rec.spark_ddl())
        elif view == "arrow":
            click.echo(messages.arrow_schema(rec).to_string(show_schema_metadata=False))
        elif view == "sql":
            click.echo(", ".join(f"{n} {t}" for n, t in rec.sql_columns()))
        else:
            click.echo(rec.markdown())


@click.command("config")
def config_cmd() -> None:
    """Print the effective configuration as JSON (file + FLOWLAKE_* overrides); passwords and
    secrets show only whether they are set."""
    cfg = config.get()
    data = {k: _masked(v) if isinstance(v, dict) else v for k, v in cfg.as_dict().items()}
    click.echo(json.dumps({"source": str(cfg.source) if cfg.source else None, **data}, indent=2))


SECRET_KEYS = ("_password", "_secret", "community")  # SNMP communities are passwords too


def _masked(table: dict) -> dict:
    """Secrets show only that they are set, at any depth ([exporters."ADDR"] snmp_* keys):
    they stay off screens and logs."""
    return {k: _masked(v) if isinstance(v, dict) else "(set, not shown)" if k.endswith(SECRET_KEYS) and v else v
            for k, v in table.items()}
