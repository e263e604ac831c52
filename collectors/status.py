"""The collection stage's part of `flowlake status`: sampling, exporters' health, the SNMP
poller, the routing collector, the lab. `sections()` feeds `status --json` and `/metrics`; `render()` prints."""
from __future__ import annotations

from . import health, sampling
from .lab.status import status as lab_status
from .routing import service as routing_service
from .snmp import service as snmp_service


def _snmp(cfg) -> dict:
    """The SNMP poller per exporter and flow coverage warnings (collectors/snmp)."""
    try:
        return snmp_service.status(cfg)
    except Exception as exc:  # status must never crash on a damaged poller state
        return {"error": str(exc), "exporters": {}, "errors": 0}


def _routing(cfg) -> dict:
    """The BMP collector: routers, sessions, routes per table, memory (collectors/routing)."""
    try:
        return routing_service.status(cfg)
    except Exception as exc:  # status must never crash on a collector that answers badly
        return {"enabled": True, "error": str(exc)}


def sections(cfg) -> dict:
    return {"sampling": sampling.status(cfg), "exporters": health.status(cfg), "snmp": _snmp(cfg),
            "routing": _routing(cfg), "lab": lab_status(cfg)}


def render(console, st: dict) -> None:
    sampling.print_status(console, st["sampling"])
    exporters = st["exporters"]
    if exporters["exporters"]:
        console.print(health.status_table(exporters))
    if exporters["silent"]:
        console.print(f"[bold red]WARNING: {exporters['silent']} exporter(s) silent for "
                      f"{exporters['silent_after_seconds']:g} s or more (health.silent_after_seconds)[/]")
    if "error" in st["snmp"]:
        console.print(f"[bold red]SNMP poller status: {st['snmp']['error']}[/]")
    else:
        snmp_service.print_status(console, st["snmp"])
    routing_service.print_status(console, st["routing"])
    if st["lab"]:
        console.print(st["lab"]["line"])
