"""Rich tables the hub's commands share (`flowlake status`, `flowlake cluster status`)."""
from __future__ import annotations


def process_table(title: str, kind: str, procs: dict):
    """A rich table of processes: name, state (coloured), pid, port."""
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    t = Table(title=title)
    for col in (kind, "state", "pid", "port"):
        t.add_column(col)
    for name, c in procs.items():
        colour = {"running": "green", "dead": "red", "paused": "bold red"}.get(c["state"], "yellow")
        t.add_row(name, f"[{colour}]{c['state']}[/]", str(c["pid"] or "-"), str(c["port"] or "-"))
    return t
