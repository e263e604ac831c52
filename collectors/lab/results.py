"""A run's figures as ExperimentResult rows (one per metric) and their Avro encoding;
ledger.py publishes them to Kafka ([kafka] experiments_topic), once per run."""
from __future__ import annotations

from flowlake.collectors.active.publish import encode as single_object
from flowlake.collectors.active.result import make
from flowlake.schemas.experiments import METRICS

from .spec import Run


def rows(run: Run, figures: dict, start_ms: int, end_ms: int) -> list[dict]:
    p = run.params
    base = {
        "run_id": run.run_id, "study": run.study, "kind": run.kind, "protocol": p["protocol"],
        "congestion_control": p["congestion_control"] or "", "condition": run.condition.name,
        "path": p["path"] or "", "frame_size": p["frame_size"], "rate": p["rate"], "streams": p["streams"],
        "window": p["window"], "message_size": p["message_size"], "repetition": run.repetition,
        "start": int(start_ms), "end": int(end_ms),
    }
    out = []
    for metric, value in figures.items():
        if value is None or value != value or metric not in METRICS:
            continue
        out.append({**base, "metric": metric, "value": float(value), "unit": METRICS[metric]})
    return out


def encode(row: dict) -> bytes:
    return single_object(row, "ExperimentResult")


def probe_records(run: Run, latencies_ms: list[float], start_ms: int, end_ms: int) -> list[dict]:
    """Probe runs also feed the path_models job: one active `latency` record per probe,
    with the path and message size it needs."""
    return [make("latency", "lab-client", f"lab-server/{run.params['path']}", start_ms, end_ms,
                 {"path": run.params["path"], "message_size_bytes": run.params["message_size"],
                  "protocol": run.params["protocol"], "study": run.study, "run_id": run.run_id,
                  "condition": run.condition.name},
                 {"latency_ms": ms}, "flowlake-lab", "") for ms in latencies_ms]
