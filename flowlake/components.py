"""The stack's components, registered once, in start order (`flowlake down` stops them in
the reverse order, the retention service first so it cannot restart what is being stopped).

Each class lives in the stage that runs it and follows flowlake.base.component.Component.
`flowlake up`, `down`, `status` and the `/metrics` endpoint (flowlake/metrics.py) loop over
this list; a new service (sfcapd, the BMP collector, the BGP speaker) is one line here."""
from __future__ import annotations

import importlib

from flowlake.base.component import Component

REGISTRY: tuple[str, ...] = (
    "flowlake.collectors.kafka:KafkaBroker",
    "flowlake.pipelines.ingest_service:Ingest",
    "flowlake.collectors.ship:Shipper",
    "flowlake.collectors.sampling:SamplingTap",   # before nfcapd: no sampler announcement is missed
    "flowlake.collectors.nfcapd:Nfcapd",
    "flowlake.collectors.sfcapd:SflowTap",        # before sfcapd: no datagram is missed
    "flowlake.collectors.sfcapd:Sfcapd",
    "flowlake.collectors.snmp.service:SnmpPoller",
    "flowlake.collectors.routing.service:Routing",
    "flowlake.retention_service:Retention",
    "flowlake.pipelines.hour_close:Compactor",
    "flowlake.pipelines.alerts.service:Alerts",
    "flowlake.collectors.bgp.speaker:Speaker",          # issue 36: the BGP speaker (gobgpd), before the loop
    "flowlake.pipelines.mitigation.service:Mitigation",  # issue 36: the mitigation loop
    "flowlake.jobs.query.service:QueryServer",
    "flowlake.superset_cli:Superset",
    "flowlake.metrics:Metrics",               # last up, first down: it reads the others
)
# Classes are imported when first asked for: `flowlake status` needs them all, a command
# that only names one (the disk guard, `flowlake import`) imports one.
_CLASSES: dict[str, type[Component]] = {}


def _load(target: str) -> type[Component]:
    if target not in _CLASSES:
        module, attr = target.split(":")
        _CLASSES[target] = getattr(importlib.import_module(module), attr)
    return _CLASSES[target]


def names() -> list[str]:
    return [_name(t) for t in REGISTRY]


def _name(target: str) -> str:
    return _load(target).name


def all_components(cfg) -> list[Component]:
    """Every registered component, in start order."""
    return [_load(t)(cfg) for t in REGISTRY]


def get(cfg, name: str) -> Component:
    for target in REGISTRY:
        cls = _load(target)
        if cls.name == name:
            return cls(cfg)
    raise KeyError(f"no component {name!r} (known: {', '.join(names())})")
