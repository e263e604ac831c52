"""The streaming ingest as a stack component (`flowlake ingest` in the background)."""
from __future__ import annotations

from dataclasses import dataclass

from flowlake.base.component import Component
from flowlake.base.process import python_argv, wait_until

from . import ingest_lag
from .ingest import counts


@dataclass(frozen=True)
class IngestSettings:
    """[spark] as the streaming ingest uses it."""
    master: str
    trigger_seconds: int
    max_offsets_per_trigger: int
    ingest_java_options: str


class Ingest(Component):
    """The streaming ingest (Spark Structured Streaming): Kafka -> lake, exactly once."""
    name = "ingest"
    stop_timeout = 90.0
    pausable = True
    settings_type = IngestSettings
    section = "spark"

    def start(self) -> int:
        proc = self.managed()
        if proc.running():
            return proc.pid()
        pid = proc.start(python_argv("ingest"))
        # Healthy once the streaming queries have written their first checkpoint metadata.
        meta = self.cfg.path("state", "checkpoints", "flows", "metadata")
        wait_until(meta.exists, 180, "the ingest's streaming query to start", interval=1, proc=proc)
        return pid

    def status(self) -> dict:
        return {"tables": counts(self.cfg), "lag": ingest_lag.status(self.cfg)}
