"""Avro helpers: canonical form, CRC-64-AVRO fingerprint and single-object framing."""
from __future__ import annotations

import io
import json
import struct

from . import SINGLE_OBJECT_MAGIC
from .core import Record

_EMPTY = 0xC15D213AA4D7A795
_TABLE = []
for _i in range(256):
    _fp = _i
    for _ in range(8):
        _fp = (_fp >> 1) ^ (_EMPTY & -(_fp & 1))
    _TABLE.append(_fp)


def crc64_avro(data: bytes) -> int:
    fp = _EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def fingerprint(record: Record) -> bytes:
    """8-byte little-endian CRC-64-AVRO of the schema's parsing canonical form."""
    import fastavro.schema  # noqa: PLC0415  (start-up: fastavro)

    canonical = fastavro.schema.to_parsing_canonical_form(record.avro_schema())
    return struct.pack("<Q", crc64_avro(canonical.encode()))


def header(record: Record) -> bytes:
    return SINGLE_OBJECT_MAGIC + fingerprint(record)


_PARSED: dict = {}


def parsed(record: Record):
    import fastavro  # noqa: PLC0415  (start-up: fastavro)

    # keyed by the record itself: revisions of one record share its name (schemas/flow.py)
    if record not in _PARSED:
        _PARSED[record] = fastavro.parse_schema(json.loads(record.avro_json()))
    return _PARSED[record]


def encode(record: Record, datum: dict) -> bytes:
    """One message: single-object header + schemaless Avro body."""
    import fastavro  # noqa: PLC0415  (start-up: fastavro)

    buf = io.BytesIO()
    buf.write(header(record))
    fastavro.schemaless_writer(buf, parsed(record), datum)
    return buf.getvalue()


def decode(record: Record, message: bytes) -> dict:
    import fastavro  # noqa: PLC0415  (start-up: fastavro)

    head = header(record)
    if message[: len(head)] != head:
        raise ValueError(f"message is not a single-object {record.name} (header {message[:10].hex()})")
    return fastavro.schemaless_reader(io.BytesIO(message[len(head):]), parsed(record))
