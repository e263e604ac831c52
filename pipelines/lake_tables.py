"""The lake's Delta tables as a whole (issue 38): which folders are tables, the table
properties every table holds ([lake] bounds of its log), and the log's part of
`flowlake status` (pipelines/status.py).

Anything that grows has a bound: a table's `_delta_log/` grows by one commit file per
commit; delta-rs writes a checkpoint every `[lake] checkpoint_interval` commits and then
deletes commit files older than `[lake] log_retention_hours`. The data files of versions
a compaction, a replace or a DELETE superseded go by VACUUM (`[compaction]
retired_grace_minutes`, in whole hours), so the oldest version still *readable* is
usually much younger than the oldest the log holds.
"""
from __future__ import annotations

from pathlib import Path

from .lake_read import DELTA_LOG

DEFAULT_CHECKPOINT_INTERVAL = 100
DEFAULT_LOG_RETENTION_HOURS = 48


def settings(cfg) -> dict:
    """The [lake] section (defaults when a config file predates it)."""
    data = getattr(cfg, "data", {}) or {}
    out = {"checkpoint_interval": DEFAULT_CHECKPOINT_INTERVAL, "log_retention_hours": DEFAULT_LOG_RETENTION_HOURS}
    out.update(data.get("lake") or {})
    return out


def table_properties(cfg) -> dict[str, str]:
    """The Delta table properties every lake table holds (the log's bounds)."""
    from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake only where a table is written)

    s = settings(cfg)
    return delta.log_properties(s["checkpoint_interval"], s["log_retention_hours"])


def delta_tables(lake: Path | str) -> list[str]:
    """The lake's Delta tables as names below the lake ("flows", "rollups/1m"): folders
    with a `_delta_log/`, two levels deep at most, hidden folders skipped."""
    lake = Path(lake)
    out = []
    if not lake.is_dir():
        return out
    for top in sorted(lake.iterdir()):
        if not top.is_dir() or top.name.startswith((".", "_")):
            continue
        if (top / DELTA_LOG).is_dir():
            out.append(top.name)
            continue
        out += [f"{top.name}/{sub.name}" for sub in sorted(top.iterdir())
                if sub.is_dir() and not sub.name.startswith((".", "_", "date=")) and (sub / DELTA_LOG).is_dir()]
    return out


def log_status(cfg) -> dict:
    """Per Delta table of the lake, what its log holds (delta.log_status), and the bounds
    configured ([lake]); a table whose log cannot be read has "error"."""
    from flowlake.base import delta  # noqa: PLC0415  (start-up: deltalake)

    tables = {}
    for name in delta_tables(cfg.lake):
        try:
            tables[name] = delta.log_status(Path(cfg.lake) / name)
        except Exception as exc:  # noqa: BLE001 - status must never crash on a damaged log; it names it
            tables[name] = {"error": f"{type(exc).__name__}: {exc}"}
    s = settings(cfg)
    return {"tables": tables, "checkpoint_interval": s["checkpoint_interval"],
            "log_retention_hours": s["log_retention_hours"]}


def render(console, st: dict) -> None:
    from rich.table import Table  # noqa: PLC0415  (start-up: rich, for the table only)

    logs = st.get("lake_logs") or {}
    if "error" in logs:
        console.print(f"[bold red]lake tables' Delta logs: status unavailable: {logs['error']}[/]")
        return
    if not logs.get("tables"):
        return
    t = Table(title=f"lake: Delta logs (checkpoint every {logs['checkpoint_interval']} commits, "
                    f"commit files kept {logs['log_retention_hours']} h)")
    for col in ("table", "version", "log files", "log bytes", "last checkpoint", "oldest in log", "oldest readable",
                "table's bounds"):
        t.add_column(col, justify="left" if col in ("table", "last checkpoint", "table's bounds") else "right")
    want = f"interval {logs['log_retention_hours']} hours"
    for name, info in logs["tables"].items():
        if "error" in info:
            t.add_row(name, "-", "-", "-", f"[red]{info['error']}[/]", "-", "-", "-")
            continue
        cp = info["last_checkpoint"]
        t.add_row(name, f"{info['version']:,}", f"{info['log_files']:,}", f"{info['log_bytes']:,}",
                  f"{cp['version']:,} at {cp['at']}" if cp else "none yet",
                  f"{info['oldest_log_version']:,}", f"{info['oldest_readable_version']:,}",
                  # a table made before [lake] was set holds its own until its writer next starts
                  "as configured" if (info["checkpoint_interval"], info["log_retention"]) ==
                  (logs["checkpoint_interval"], want) else
                  f"[yellow]every {info['checkpoint_interval']}, {info['log_retention']}[/]")
    console.print(t)
