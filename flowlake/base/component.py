"""The component contract: every long-running service of the stack is one `Component`.

A component is a class with a name, a typed view of its settings, and `start`, `stop`,
`state`, `status` and `metrics`. Each stage defines its own components beside the code
they run (collectors/nfcapd.py `Nfcapd`, pipelines/ingest.py `Ingest`, ...); the hub
registers them once, in start order (flowlake/components.py), and `flowlake up`, `down`,
`status` and the `/metrics` endpoint loop over that registry. Nothing else starts or stops
a service.

Why one contract: the stack used to start four services itself while others had their own
`managed()`, so pausing, status lines and restarts were written once per service.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import typing
from typing import Any, ClassVar, Iterator, NamedTuple

from .process import Managed, port_open


class Sample(NamedTuple):
    """One Prometheus sample: metric name (without the `flowlake_` prefix), help, value, labels."""
    name: str
    help: str
    value: float
    labels: dict[str, str]


def typed_settings(kind: type, section: Any, where: str):
    """An instance of the frozen dataclass `kind` from a config section (attribute access,
    flowlake.base.config.Section): each field is read by its name and checked against its
    annotation, so a component's code sees typed settings, and a wrong value fails naming
    [section] key."""
    hints = typing.get_type_hints(kind)
    values = {}
    for f in dataclasses.fields(kind):
        value = getattr(section, f.name)
        want = hints[f.name]
        origin = typing.get_origin(want) or want
        ok = isinstance(value, (int, float)) if want is float else isinstance(value, origin)
        if not ok or (want in (int, float) and isinstance(value, bool)):
            raise TypeError(f"config [{where}] {f.name} = {value!r}: expected {getattr(want, '__name__', want)}")
        values[f.name] = float(value) if want is float else value
    return kind(**values)


class Component:
    """Base class. Subclasses set `name` (the stack's and status's word for it) and
    implement `start`; the rest has defaults that fit a process with a pid file and a log
    under $FLOWLAKE_HOME (flowlake.base.process.Managed)."""

    name: ClassVar[str] = ""
    stop_timeout: ClassVar[float] = 30.0
    pausable: ClassVar[bool] = False   # the disk guard may stop it when the disk fills (retention)
    # Its typed settings: a frozen dataclass whose fields are keys of config [section].
    settings_type: ClassVar[type | None] = None
    section: ClassVar[str] = ""

    def __init__(self, cfg):
        self.cfg = cfg

    @functools.cached_property
    def settings(self):
        """The component's settings, typed (settings_type) and checked once."""
        if self.settings_type is None:
            raise AttributeError(f"{type(self).__name__} declares no settings_type")
        return typed_settings(self.settings_type, getattr(self.cfg, self.section), self.section)

    # ---- what `up` and `down` call ------------------------------------------------------
    def enabled(self) -> bool:
        """Whether `flowlake up` starts it with this configuration."""
        return True

    def start(self) -> int | None:
        """Start it unless it runs; return when it is healthy. Its pid (None: nothing to run)."""
        raise NotImplementedError

    def stop(self) -> bool:
        return self.managed().stop(timeout=self.stop_timeout)

    # ---- what `status` and `/metrics` read ----------------------------------------------
    def managed(self) -> Managed:
        return Managed(self.name, self.cfg.path("run"), self.cfg.path("log"))

    def port(self) -> int | None:
        return None

    def healthy_port(self) -> bool:
        """A running process whose port does not answer yet is `starting` (Kafka)."""
        return True

    def state(self, paused: list[str] = ()) -> dict:
        managed = self.managed()
        pid = managed.pid()
        if pid is None:
            state = "stopped" if not managed.pidfile.exists() else "dead"
        elif not self.healthy_port():
            state = "starting"
        else:
            state = "running"
        if state != "running" and self.name in paused:
            state = "paused"
        return {"pid": pid, "state": state, "port": self.port(), "log": str(managed.logfile)}

    def status(self) -> dict:
        """What `flowlake status --json` shows of it beyond its state (counters, lag, ...).
        Never raises for a damaged state file: the error goes into the dict."""
        return {}

    def metrics(self, state: dict | None = None, status: dict | None = None) -> Iterator[Sample]:
        """Prometheus samples: up, and every number of `status()` (the figures `flowlake
        status` prints come from the same dict, so the two never disagree)."""
        state = state if state is not None else self.state()
        yield Sample("component_up", "1 when the component's process runs", float(state["state"] == "running"),
                     {"component": self.name})
        yield from numeric_samples(f"{metric_name(self.name)}", status if status is not None else self.status(),
                                   {"component": self.name})


class ModuleComponent(Component):
    """A component whose module already has `managed(cfg)`, `start(cfg)`, `stop(cfg)` and,
    optionally, `status(cfg)` (the services written before the contract): the class names the
    module and adds only what differs. A status that raises reports its error instead."""

    functions: ClassVar[Any] = None  # the module: ModuleComponent subclasses set it to sys.modules[__name__]

    def managed(self) -> Managed:
        return self.functions.managed(self.cfg)

    def start(self) -> int | None:
        return self.functions.start(self.cfg)

    def stop(self) -> bool:
        return self.functions.stop(self.cfg)

    def status(self) -> dict:
        fn = getattr(self.functions, "status", None)
        if fn is None:
            return {}
        try:
            return fn(self.cfg)
        except Exception as exc:  # noqa: BLE001  (status and metrics must never crash on a damaged state file)
            return {"error": str(exc)}


def metric_name(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", str(text)).strip("_").lower()


def numeric_samples(prefix: str, data: Any, labels: dict[str, str], depth: int = 0) -> Iterator[Sample]:
    """Every int/float/bool leaf of a status dict as a sample `<prefix>_<key path>`. Keys that
    are names rather than fields (topics, exporters, channels: keys that are not identifiers)
    become a `key` label, so one metric carries them all."""
    if depth > 4:
        return
    if isinstance(data, bool):
        yield Sample(prefix, f"{prefix} (from flowlake status)", float(data), labels)
    elif isinstance(data, (int, float)):
        yield Sample(prefix, f"{prefix} (from flowlake status)", float(data), labels)
    elif isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and re.fullmatch(r"[a-z][a-z0-9_]*", key):
                yield from numeric_samples(f"{prefix}_{key}", value, labels, depth + 1)
            else:
                yield from numeric_samples(prefix, value, {**labels, f"key{depth}": str(key)}, depth + 1)


__all__ = ["Component", "ModuleComponent", "Sample", "Managed", "port_open", "typed_settings", "numeric_samples",
           "metric_name"]
