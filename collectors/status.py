"""The collection stage's part of `flowlake status`: sampling, exporters' health, the SNMP
poller, the routing collector, the lab, the spool's bytes per flow. `sections()` feeds `status --json`
and `/metrics`; `render()` prints."""
from __future__ import annotations

from . import health, nfcapd, sampling
from .lab.status import status as lab_status
from .routing import service as routing_service
from .snmp import service as snmp_service


def _snmp(cfg) -> dict:
    """The SNMP poller per exporter and flow coverage warnings (collectors/snmp)."""
    try:
        return snmp_service.status(cfg)
    except Exception as exc:  # status must never crash on a damaged poller state
        return {"error": str(exc), "exporters": {}, "errors": 0}


def _spool(cfg) -> dict:
    """nfcapd's files: configured compression and bytes per flow of the newest files."""
    try:
        return nfcapd.spool_stats(cfg)
    except Exception as exc:  # noqa: BLE001  (status must never crash on a damaged spool file)
        return {"error": str(exc)}


def spool_line(sp: dict) -> str:
    if "error" in sp:
        return f"[bold red]spool: {sp['error']}[/]"
    held = ", ".join(f"{n} {c}" for c, n in sorted(sp["file_compression"].items())) or "no closed files"
    bpf = f"{sp['bytes_per_flow']:g} bytes/flow" if sp["bytes_per_flow"] is not None else "bytes/flow unknown"
    return (f"spool: {bpf} over the newest {sp['files_read']} files ({sp['flows']:,} flows, {sp['bytes']:,} bytes); "
            f"nfcapd writes {sp['compression']} (collector.spool_compression); files: {held}")


def _routing(cfg) -> dict:
    """The BMP collector: routers, sessions, routes per table, memory (collectors/routing)."""
    try:
        return routing_service.status(cfg)
    except Exception as exc:  # status must never crash on a collector that answers badly
        return {"enabled": True, "error": str(exc)}


def sections(cfg) -> dict:
    return {"sampling": sampling.status(cfg), "exporters": health.status(cfg), "snmp": _snmp(cfg),
            "routing": _routing(cfg), "lab": lab_status(cfg), "spool": _spool(cfg)}


def render(console, st: dict) -> None:
    console.print(spool_line(st["spool"]))
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
