"""Exporter health (issue 20): the shipper's flags, and what `flowlake status` shows.

The Go shipper (collectors/shipper/health.go) reads each nfcapd file's exporter stat,
exporter and sampler records and its flows, and publishes one ExporterHealth row per
exporter in the file's own Kafka transaction (exactly once, like the flows); the ingest
keeps them in lake/exporter_health/. After every committed file it also rewrites
$FLOWLAKE_HOME/state/exporter_health.json: per exporter its latest row, totals since it
was first seen and when its last flow arrived. Status reads that file (no Kafka, no
lake scan) and decides "silent" at the time it is asked.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from flowlake.base import config as _config
from flowlake.schemas.health import EXPORTER_HEALTH_RECORD

from .schema_files import write_schema


def state_file(cfg) -> Path:
    return cfg.path("state", "exporter_health.json")


def shipper_args(cfg) -> list[str]:
    """The shipper's health flags (schema written where it reads it)."""
    h = cfg.health
    path, fingerprint = write_schema(cfg, EXPORTER_HEALTH_RECORD, "exporter_health.avsc")
    return ["--health-topic", cfg.kafka.health_topic, "--health-schema", str(path),
            "--health-fingerprint", fingerprint, "--health-state", str(state_file(cfg)),
            "--silent-after", f"{float(h.silent_after_seconds)}s", "--forget-after", f"{float(h.forget_after_seconds)}s"]


def _iso(ms: int | None) -> str | None:
    if not ms:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def status(cfg=None, now_ms: int | None = None) -> dict:
    """Per exporter: the latest interval's figures, totals, last seen and `silent`
    (no flow for [health] silent_after_seconds, as of now)."""
    cfg = cfg or _config.get()
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    silent_after = float(cfg.health.silent_after_seconds)
    out = {"silent_after_seconds": silent_after, "forget_after_seconds": float(cfg.health.forget_after_seconds),
           "exporters": [], "silent": 0, "forgotten": 0, "state": str(state_file(cfg))}
    try:
        st = json.loads(state_file(cfg).read_text())
    except (OSError, ValueError):
        return out
    out["forgotten"] = st.get("exporters_forgotten", 0)
    for e in st.get("exporters") or []:
        last = e.get("last_interval") or {}
        seen = e.get("last_seen_ms") or 0
        since = seen or e.get("first_seen_ms") or now_ms
        silent = (now_ms - since) / 1000 >= silent_after
        out["silent"] += silent
        out["exporters"].append({
            "exporter": e["exporter"], "observation_domain": e["observation_domain"], "version": e["version"],
            "silent": silent, "last_seen": _iso(seen), "seconds_since_last_flow": round((now_ms - since) / 1000, 1),
            "flows_per_s": last.get("flows_per_s", 0.0), "bytes_per_s": last.get("bytes_per_s", 0.0),
            "sequence_failures": last.get("sequence_failures", 0),
            "sequence_failures_total": e.get("sequence_failures_total", 0),
            "flows_total": e.get("flows_total", 0), "bytes_total": e.get("bytes_total", 0),
            "packets_total": e.get("packets_total", 0), "datagrams_total": e.get("datagrams_total", 0),
            "files": e.get("files", 0), "templates": last.get("templates", 0),
            "template_layouts": last.get("template_layouts", ""), "samplers": last.get("samplers", 0),
            "sampler_rates": last.get("sampler_rates", ""), "sampling_rates": last.get("sampling_rates", ""),
            "clock_skew_ms": last.get("clock_skew_ms"), "interval_end": _iso(last.get("interval_end")),
        })
    return out


def _si(v: float) -> str:
    for e, p in ((9, "G"), (6, "M"), (3, "k")):
        if abs(v) >= 10 ** e:
            return f"{v / 10 ** e:.3g}{p}"
    return f"{v:.3g}"


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def status_table(health: dict):
    """The exporters as a rich Table for `flowlake status` (fits 80 columns; `--json` has all)."""
    from rich import box  # noqa: PLC0415  (start-up: rich)
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    t = Table(title=f"exporters ({len(health['exporters'])}; silent after {health['silent_after_seconds']:g} s, "
                    f"{health['forgotten']} forgotten after {health['forget_after_seconds']:g} s)",
              box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1), collapse_padding=True,
              caption="exporter/observation domain, version; seq: sequence failures last interval/total; "
                      "tpl: templates; skew: router clock - ours (ms); idle: since the last flow")
    t.add_column("exporter", no_wrap=True)
    for col in ("flows/s", "bytes/s", "seq", "tpl", "rate", "skew", "idle"):
        t.add_column(col, justify="left" if col == "rate" else "right", no_wrap=True)
    t.add_column("state", no_wrap=True)
    for e in health["exporters"]:
        state = "[bold red]SILENT[/]" if e["silent"] else "[green]ok[/]"
        skew = "-" if e["clock_skew_ms"] is None else f"{e['clock_skew_ms']:,}"
        t.add_row(f"{e['exporter']}/{e['observation_domain']} v{e['version']}", _si(e["flows_per_s"]),
                  _si(e["bytes_per_s"]), f"{e['sequence_failures']}/{e['sequence_failures_total']}",
                  str(e["templates"]), e["sampling_rates"] or "-", skew,
                  _age(e["seconds_since_last_flow"]) if e["last_seen"] else "never", state)
    return t
