"""`flowlake active parse|import`: active-test result files -> JSON or Kafka active.v1."""
from __future__ import annotations

import json
from pathlib import Path

import click

from flowlake.base import config

from .parsers import FORMATS, parse_file
from .publish import publish
from .result import ParseError, to_json

_FORMAT = click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
                       help="Input format; auto looks at the content.")


@click.group()
def active():
    """Parse and import active-test results (ping, fping, iperf3, pScheduler, NetLogger, CSV).

    \b
    Examples:
      ping -D -c 10 192.0.2.1 > p.txt;  flowlake active parse p.txt
      iperf3 -c 192.0.2.1 -J > t.json; flowlake active import t.json
      flowlake active parse sweep.csv --format csv
      flowlake active import results/        # every file below it, each format detected
    """


def expand(paths) -> list[Path]:
    """FILES as given, a directory replaced by every file below it (recursively, sorted;
    hidden files and folders such as .git or editor swap files are left out)."""
    out: list[Path] = []
    for arg in map(Path, paths):
        if not arg.is_dir():
            out.append(arg)
            continue
        found = sorted(p for p in arg.rglob("*")
                       if p.is_file() and not any(part.startswith(".") for part in p.relative_to(arg).parts))
        if not found:
            raise click.ClickException(f"{arg}: directory holds no files to import")
        out.extend(found)
    return out


def _parse_all(files, fmt) -> list[dict]:
    records = []
    for path in files:
        try:
            records.extend(parse_file(path, fmt))
        except ParseError as exc:
            raise click.ClickException(str(exc)) from None
    return records


@active.command("parse")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True))
@_FORMAT
def parse_cmd(files, fmt):
    """Print the normalised records of FILES as JSON lines (no Kafka needed).
    A directory stands for every file below it.

    \b
    Example:
      flowlake active parse tests/data/active/iperf3_tcp.json
      flowlake active parse tests/data/active/
    """
    for rec in _parse_all(expand(files), fmt):
        click.echo(json.dumps(to_json(rec), sort_keys=True))


@active.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True))
@_FORMAT
@click.option("--topic", default=None, help="Kafka topic (default: [kafka] active_topic).")
def import_cmd(files, fmt, topic):
    """Publish FILES' results to Kafka active.v1 (Avro single-object encoding).

    A directory stands for every file below it, recursively (hidden ones left
    out); each file's format is detected on its own unless --format says otherwise.
    Every file is parsed completely before anything is sent: one malformed file
    stops the import with its file and line, and nothing is published.

    \b
    Examples:
      flowlake active import ping.txt iperf3.json --format auto
      flowlake active import /data/pinger/2026-11/ /data/iperf3/
    """
    from rich.progress import Progress  # noqa: PLC0415  (start-up: rich)

    cfg = config.get()
    files = expand(files)
    records = _parse_all(files, fmt)
    with Progress(transient=True) as bar:
        task = bar.add_task("publishing", total=len(records))
        try:
            n = publish(records, cfg, topic)
        except Exception as exc:  # noqa: BLE001 - Kafka errors reach the user named
            raise click.ClickException(f"publishing to Kafka failed: {exc}") from None
        bar.update(task, completed=n)
    click.echo(f"published {n} records from {len(files)} files to {topic or cfg.kafka.active_topic}")
