"""The alerts service (`flowlake alerts serve`, started by `flowlake up`): Kafka intervals
-> engine, a status file for `flowlake status`, clean stop on SIGTERM."""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass

from flowlake.base.component import ModuleComponent
from flowlake.base.process import Managed, wait_until
from flowlake.schemas.alerts import SEVERITIES

log = logging.getLogger(__name__)


def managed(cfg) -> Managed:
    return Managed("alerts", cfg.path("run"), cfg.path("log"))


def status_file(cfg):
    return cfg.path("state", "alerts", "service.json")


def start(cfg) -> int | None:
    """Start the service unless both [alerts] and [ddos] are disabled (with only [ddos] enabled
    it runs the DDoS detector alone); healthy once it wrote its status."""
    if not (cfg.alerts.enabled or cfg.ddos.enabled):
        return None
    proc = managed(cfg)
    if proc.running():
        return proc.pid()
    status_file(cfg).unlink(missing_ok=True)
    pid = proc.start([sys.executable, "-m", "flowlake.cli", "alerts", "serve"])
    wait_until(status_file(cfg).exists, 60, "the alerts service to start", interval=0.5, proc=proc)
    return pid


def stop(cfg) -> bool:
    return managed(cfg).stop(timeout=30)


def _write_status(cfg, doc: dict) -> None:
    path = status_file(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, default=str))
    os.replace(tmp, path)


def serve(cfg, once: bool = False) -> None:
    from .engine import Engine  # noqa: PLC0415  (start-up: numpy, pyarrow)
    from .source import KafkaIntervals  # noqa: PLC0415  (start-up: pyarrow)

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    engine = Engine.from_config(cfg)
    source = KafkaIntervals(cfg)
    started, latencies = time.time(), []
    log.info("alerts service: %d detectors, %d sinks, %d open alerts", len(engine.detectors),
             len(engine.lifecycle.sinks), len(engine.lifecycle.open))
    idle = 0
    try:
        while not stopping:
            files = source.poll(1.0)
            for name, flows in files:
                engine.process(name, flows)
                latencies = (latencies + [engine.last_interval["latency_s"]])[-60:]
            if files:
                source.commit()
            idle = 0 if files else idle + 1
            _write_status(cfg, {
                "pid": os.getpid(), "started": started, "heartbeat": time.time(), "assigned": source.assigned,
                "intervals": engine.intervals, "flows": engine.flows, "last_interval": engine.last_interval,
                "latency_s_max_last_60": max(latencies) if latencies else None,
                "findings": engine.findings, "detector_errors": engine.errors, "lifecycle": engine.lifecycle.counts,
                "open_by_severity": engine.lifecycle.open_by_severity(), "kafka": source.files.counts,
                "pending_files": len(source.files.pending), "messages_behind": source.lag(),
                "sinks": [_stats(s) for s in engine.lifecycle.sinks]})
            if once and idle >= 3:
                break
    finally:
        engine.save()
        for s in engine.lifecycle.sinks:
            try:
                s.close()
            except Exception as exc:
                log.warning("sink close: %s", exc)
        source.close()


def _stats(sink) -> dict:
    try:
        return {"sink": type(sink).__name__, **(sink.stats() if hasattr(sink, "stats") else {})}
    except Exception as exc:
        return {"sink": type(sink).__name__, "error": str(exc)}


def status(cfg) -> dict:
    """For `flowlake status`: the service, open alerts by severity (from the lake), its lag."""
    from .lifecycle import shown_state  # noqa: PLC0415  (start-up: pyarrow)
    from .store import AlertStore  # noqa: PLC0415  (start-up: pyarrow)

    out: dict = {"enabled": bool(cfg.alerts.enabled)}
    try:
        out["service"] = json.loads(status_file(cfg).read_text())
    except (OSError, ValueError):
        out["service"] = {}
    store = AlertStore.from_config(cfg)
    try:
        rows = store.read()
    except Exception as exc:  # status never crashes on a damaged file
        out["error"] = str(exc)
        rows = []
    now = int(time.time() * 1000)
    out["open_by_severity"] = {s: 0 for s in SEVERITIES}
    out["states"] = {}
    for r in rows:
        st = shown_state(r, now)
        out["states"][st] = out["states"].get(st, 0) + 1
        if st != "resolved":
            out["open_by_severity"][r["severity"]] += 1
    out["table"] = {**store.size(), "alerts": len(rows), "retention_days": int(cfg.retention.alerts_days)}
    svc = out["service"]
    last = svc.get("last_interval") or {}
    out["lag"] = {"last_interval_latency_s": last.get("latency_s"), "max_latency_s": svc.get("latency_s_max_last_60"),
                  "messages_behind": svc.get("messages_behind"), "pending_files": svc.get("pending_files"),
                  "heartbeat_age_s": round(time.time() - svc["heartbeat"], 1) if svc.get("heartbeat") else None}
    return out


def print_status(console, st: dict) -> None:
    """A few lines in `flowlake status`."""
    if not st.get("enabled"):
        console.print("alerts: disabled ([alerts] enabled = false)")
        return
    o, lag, t = st["open_by_severity"], st["lag"], st["table"]
    svc = st.get("service") or {}
    colour = "bold red" if o.get("critical") else "yellow" if o.get("warning") else "green"
    console.print(f"alerts: [{colour}]{o.get('critical', 0)} critical, {o.get('warning', 0)} warning open[/] "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(st['states'].items())) or 'none stored'}); "
                  f"lake/alerts {t['alerts']} alerts in {t['days']} days, {t['bytes']:,} bytes "
                  f"(kept {t['retention_days']} days)")
    if svc:
        console.print(f"alerts service: {svc.get('intervals', 0):,} intervals, {svc.get('flows', 0):,} flows judged; "
                      f"latency flows' end -> alerts {_s(lag['last_interval_latency_s'])} (max {_s(lag['max_latency_s'])} "
                      f"last 60 intervals); {lag['messages_behind'] if lag['messages_behind'] is not None else '?'} "
                      f"messages behind, {lag['pending_files'] or 0} files half read; "
                      f"heartbeat {_s(lag['heartbeat_age_s'])} ago")


def _s(v) -> str:
    return "-" if v is None else f"{v:.1f} s"


@dataclass(frozen=True)
class AlertsSettings:
    """[alerts] as the service's start uses it."""
    enabled: bool


class Alerts(ModuleComponent):
    """The live detectors on the flows stream ([alerts] enabled)."""
    name = "alerts"
    functions = sys.modules[__name__]

    settings_type = AlertsSettings
    section = "alerts"

    def enabled(self) -> bool:
        return self.settings.enabled or bool(self.cfg.ddos.enabled)  # [ddos] runs in this service too
