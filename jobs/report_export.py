"""`flowlake reports export`: one report table's day as CSV, JSON or Parquet, optionally with
its addresses anonymised (Crypto-PAn, jobs/anonymise.py) for sharing with partners.

Which columns hold addresses is declared once, in the table's schema (schemas/, Field
address="one" or "list"), so a new report table is anonymised correctly when declared so.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import sys
from pathlib import Path

import click

from flowlake.base import config
from flowlake.jobs import anonymise
from flowlake.jobs.query import output
from flowlake.schemas import registry

FORMATS = ("csv", "json", "parquet")


def read_report(lake: Path, table: str, date: str):
    """lake/reports/<table>/date=D/ as a pyarrow Table in the declared column order, `date` included."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
    import pyarrow.dataset as ds  # noqa: PLC0415  (start-up: pyarrow)

    record = registry().get(table)
    base = Path(lake) / "reports"
    have = sorted(p.name for p in base.iterdir() if (p / f"date={date}").is_dir()) if base.is_dir() else []
    if record is None:
        raise click.BadParameter(f"{table!r} is not a declared table (tables with {date}: {', '.join(have) or 'none'})",
                                 param_hint="TABLE")
    part = base / table / f"date={date}"
    if not part.is_dir():
        raise click.ClickException(f"no {table} report for {date}: {part} does not exist (tables with {date}: "
                                   f"{', '.join(have) or 'none'}; `flowlake jobs run --date {date}` builds them)")
    t = ds.dataset(str(part), format="parquet", partitioning="hive").to_table()  # skips _* and .* files
    if "date" in record.names and "date" not in t.column_names:  # the partition value, not in the files
        t = t.append_column("date", pa.array([date] * t.num_rows, pa.string()))
    order = [n for n in record.names if n in t.column_names] + [n for n in t.column_names if n not in record.names]
    return record, t.select(order)


def not_addresses(t, one: list[str], lists: list[str]) -> set[str]:
    """Values of address columns that are not addresses (host names): anonymisation leaves them."""
    out = set()
    for name in one + lists:
        if name not in t.column_names:
            continue
        for v in set(t.column(name).to_pylist()):
            for item in (v.split(",") if name in lists else [v]) if v else []:
                try:
                    ipaddress.ip_address(item)
                except ValueError:
                    out.add(item)
    return out


def _rows(t):
    """Rows as dicts, maps as dicts (pyarrow gives maps as lists of pairs)."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    maps = {f.name for f in t.schema if pa.types.is_map(f.type)}
    for r in t.to_pylist():
        yield {k: dict(v) if k in maps and v is not None else v for k, v in r.items()}


def write(t, fmt: str, out: Path | None) -> None:
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    if out is None:
        output.stream(_rows(t), t.column_names, fmt, out=sys.stdout)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    if fmt == "parquet":
        pq.write_table(t, tmp, compression="zstd")
    else:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            output.stream(_rows(t), t.column_names, fmt, out=fh)
    tmp.replace(out)  # no half-written export under the final name


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def reports():
    """Report tables of the lake (lake/reports/<table>/date=D/)."""


@reports.command("export")
@click.argument("table")
@click.option("--date", "date", required=True, help="Report day, e.g. 2026-11-25.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File to write (default: standard output; Parquet needs a file).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="csv, json (an array of objects) or parquet; default: from --out's suffix, else csv.")
@anonymise.key_options("Write the table's address columns")
def export(table, date, out, fmt, key):
    """Export one day of a report table, optionally with addresses anonymised.

    TABLE is a report table (`flowlake jobs list` shows which job writes which),
    e.g. top_talkers, scanners, fan_in, largest_flows, new_talkers. Columns come
    in their declared order (`flowlake schema markdown TABLE`), the day in `date`.

    With --anonymise, the columns the table's schema declares as addresses
    (src_addr, dst_addr, address, and comma-separated lists such as
    sample_targets) get Crypto-PAn pseudonyms, the same ones `flowlake anonymise`
    and `nfanon -K KEY` give with the same key; every other column is unchanged.
    Host names in those columns (active-test targets) cannot be pseudonymised and
    stay as they are (a warning counts them). See README "Anonymisation" for what
    it protects and what it does not.

    \b
    Examples:
      flowlake reports export top_talkers --date 2026-11-25 --out top.csv
      flowlake reports export scanners --date 2026-11-25 --format json
      flowlake reports export top_talkers --date 2026-11-25 --anonymise --key-file anon.key --out share/top.parquet
    """
    try:
        dt.date.fromisoformat(date)
    except ValueError:
        raise click.BadParameter(f"'{date}' is not a date (YYYY-MM-DD)", param_hint="--date") from None
    if fmt is None:
        fmt = out.suffix.lstrip(".").lower() if out is not None and out.suffix.lstrip(".").lower() in FORMATS else "csv"
    if fmt == "parquet" and out is None:
        raise click.BadParameter("Parquet is binary: give a file with --out", param_hint="--format")
    record, t = read_report(config.get().lake, table, date)
    one, lists = record.address_fields("one"), record.address_fields("list")
    if key is not None:
        names = not_addresses(t, one, lists)
        if names:
            click.echo(f"warning: {len(names)} value(s) in address columns are host names, not addresses, "
                       f"and are exported as they are", err=True)
        t = anonymise.anonymise_table(t, anonymise.CryptoPAn(key), columns=one, list_columns=lists)
    write(t, fmt, out)
    if out is not None:
        what = f", addresses anonymised ({', '.join(one + lists)})" if key is not None else ""
        click.echo(f"{t.num_rows} rows of {table} for {date} written to {out} ({fmt}{what})", err=True)
