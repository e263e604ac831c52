"""The Avro schema files the Go binaries read (state/*.avsc), written by the Python side
from schemas/ so both agree on one definition."""
from __future__ import annotations

from pathlib import Path


def write_schema(cfg, record, filename: str) -> tuple[Path, str]:
    """Write a record's Avro schema where the binary reads it: (path, fingerprint hex)."""
    from flowlake.schemas import avro  # noqa: PLC0415  (start-up: flowlake status)

    path = cfg.path("state", filename)
    text = record.avro_json()
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path, avro.fingerprint(record).hex()
