"""`flowlake lab report`: a study's results from lake/experiments, read with DuckDB.

Three tables: every metric per grid point (mean and spread over the repetitions), bulk
TCP throughput beside its Mathis bound, and the path study's model against measurement.
"""
from __future__ import annotations

from pathlib import Path

import click

from flowlake.base import config

POINT = "kind, protocol, congestion_control, condition, path, frame_size, rate, streams, \"window\", message_size"


def experiments_source(lake: Path) -> str | None:
    """read_parquet of lake/experiments' current files (None: none yet). A Delta table
    (issue 38) is read at its newest version's file list (never a glob: its log holds
    Parquet checkpoints); a folder of the older layout by its visible files."""
    table = Path(lake) / "experiments"
    if (table / "_delta_log").is_dir():
        from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

        files = delta.version_files(table)[1]
    else:
        files = [str(p) for p in table.rglob("*.parquet")
                 if not any(s.startswith((".", "_")) for s in p.relative_to(table).parts)]
    if not files:
        return None
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in sorted(files))
    return f"read_parquet([{listed}], hive_partitioning = true, union_by_name = true)"


def queries(source: str, study: str) -> dict[str, str]:
    """`source`: the experiments' rows, a FROM expression (`experiments_source`)."""
    src = f"{source} WHERE study = '{study}'"
    return {
        "metrics per grid point (spread over repetitions)": f"""
            SELECT {POINT}, metric, unit, COUNT(*) AS runs, AVG(value) AS mean, STDDEV_SAMP(value) AS stddev,
                   MIN(value) AS min, MAX(value) AS max
            FROM {src} GROUP BY ALL ORDER BY ALL""",
        "bulk TCP: throughput against the Mathis bound": f"""
            SELECT congestion_control, condition, streams, "window",
                   AVG(value) FILTER (WHERE metric = 'throughput') AS throughput_bps,
                   AVG(value) FILTER (WHERE metric = 'mathis_bound') AS mathis_bound_bps,
                   AVG(value) FILTER (WHERE metric = 'rtt') AS rtt_ms, AVG(value) FILTER (WHERE metric = 'loss') AS loss
            FROM {src} AND kind = 'bulk' AND protocol = 'tcp' GROUP BY ALL ORDER BY ALL""",
        "paths: latency per message size, each path alone and both together": f"""
            SELECT message_size, path, protocol, kind,
                   AVG(value) FILTER (WHERE metric = 'latency') AS measured_ms,
                   AVG(value) FILTER (WHERE metric = 'predicted_latency') AS model_ms
            FROM {src} AND kind IN ('probe', 'split') GROUP BY ALL ORDER BY message_size, measured_ms""",
    }


@click.command("report")
@click.option("--study", required=True, help="Study name (the spec's `study`).")
@click.option("--lake", type=click.Path(file_okay=False), default=None, help="Lake folder (default: [paths] lake).")
def report_cmd(study, lake):
    """Print a lab study's results from lake/experiments.

    \b
    Example:
      flowlake lab report --study pbpd
    """
    import duckdb  # noqa: PLC0415  (start-up: duckdb)
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    root = Path(lake) if lake else Path(config.get().lake)
    source = experiments_source(root)
    if source is None:
        raise click.ClickException(f"no results in {root / 'experiments'}: run `flowlake lab run SPEC` with the stack up")
    con = duckdb.connect()
    console = Console()
    for title, sql in queries(source, study.replace("'", "''")).items():
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
        if not rows:
            continue
        keep = [i for i, c in enumerate(cols) if any(r[i] not in (None, "") for r in rows)]
        table = Table(title=f"{study}: {title}")
        for i in keep:
            table.add_column(cols[i], justify="right" if isinstance(rows[0][i], (int, float)) else "left")
        for r in rows:
            table.add_row(*["" if r[i] is None else f"{r[i]:.4g}" if isinstance(r[i], float) else str(r[i])
                            for i in keep])
        console.print(table)
