"""The stream's part of `flowlake status`: the ingest's lag, enrichment, the alerts service
and its notifications, retention and the disk guard. `sections()` feeds `status --json`
and `/metrics`; `render()` prints."""
from __future__ import annotations

from rich.table import Table

from . import lake_tables
from .alerts import attacks as ddos_attacks
from .alerts import notify_status
from .alerts import service as alerts_service
from .enrich import status as enrich
from .mitigation import service as mitigation
from .retention import report


def _guarded(fn, cfg, errors=(OSError, ValueError), **on_error) -> dict:
    try:
        return fn(cfg)
    except errors as exc:  # status must never crash on a damaged state file or a bad config
        return {**on_error, "error": str(exc)}


def sections(cfg) -> dict:
    return {"retention": report.status_summary(cfg),
            "notify": _guarded(notify_status.status, cfg, Exception),
            "enrich": _guarded(enrich.status, cfg),
            "alerts": _guarded(alerts_service.status, cfg, Exception, enabled=True),
            "lake_logs": _guarded(lake_tables.log_status, cfg, Exception),
            "attacks": _guarded(ddos_attacks.status, cfg, Exception, enabled=True, open=[], ended_last_hour=0),
            "mitigation": _guarded(mitigation.status, cfg, Exception)}


def ingest_table(lag: dict):
    """The ingest's lag behind Kafka and its rate, per topic (pipelines/ingest_lag.py)."""
    t = Table(title="ingest: lag behind Kafka and rate")
    for col in ("topic", "offsets behind", "flows behind (est.)", "flows/s last min", "flows/s busy", "flows/msg"):
        t.add_column(col, justify="left" if col == "topic" else "right")
    fmt = lambda v: "-" if v is None else f"{v:,.0f}"  # noqa: E731
    for info in lag.values():
        t.add_row(info["topic"], fmt(info.get("offsets_behind")), fmt(info.get("flows_behind_estimate")),
                  fmt(info.get("rows_per_s_last_minute")), fmt(info.get("rows_per_s_while_busy")),
                  fmt(info.get("flows_per_message")))
    return t


def render(console, st: dict) -> None:
    console.print(ingest_table(st["counts"].get("ingest", {})))
    if "open_by_severity" in st["alerts"] or not st["alerts"].get("enabled"):
        alerts_service.print_status(console, st["alerts"])
    if "attacks" in st:
        ddos_attacks.print_status(console, st["attacks"])
    if "error" not in st["enrich"]:
        enrich.print_status(console, st["enrich"])
    report.render_status(console, st["retention"])
    lake_tables.render(console, st)
    if "error" in st.get("mitigation", {}):
        console.print(f"[bold red]mitigation: status unavailable: {st['mitigation']['error']}[/]")
    elif st.get("mitigation"):
        mitigation.print_status(console, st["mitigation"])
    if "error" in st["notify"]:
        console.print(f"[bold red]notifications: status unavailable: {st['notify']['error']}[/]")
    else:
        notify_status.render(console, st["notify"])
