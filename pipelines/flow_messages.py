"""Pure decoding of flows-topic messages (both wire formats of schemas/messages.py).

`FlowDecoder.decode(value)` says what a message is: a FlowBatch (format 2, an Arrow
table, decoded without touching a row), one legacy Avro Flow (format 1, a row to gather
with others), or bad, with the reason a person can act on. No Spark, no I/O.

Messages of an earlier Flow revision (schemas/messages.py) are read with that revision's
own declaration and given the fields added since, at their defaults: every message
decodes to the current record's columns.
"""
from __future__ import annotations

import io
import json

import pyarrow as pa

from flowlake.schemas import FLOW, SINGLE_OBJECT_MAGIC, avro, messages

BATCH, ROW, BAD = "batch", "row", "bad"


class FlowDecoder:
    def __init__(self, record=FLOW):
        import fastavro  # noqa: PLC0415  (start-up: fastavro)

        self.record = record
        self.schema = messages.arrow_schema(record)
        self.batch_header = messages.flow_batch_header(record)
        self.avro_header = avro.header(record)
        self.fingerprint = self.avro_header[2:]
        # Format 1 bodies are read with timestamps as plain longs (no datetime per value)
        # and cast a column at a time in rows_table.
        self._avro = _reader_schema(record)
        self._reader = fastavro.schemaless_reader
        # earlier revisions of this record: fingerprint -> (record, its Arrow schema, Avro
        # reader schema, the defaults of the fields it lacks)
        self._older = {}
        if record is FLOW:
            for _, fp, rec in messages.flow_revisions():
                if fp != self.fingerprint:
                    missing = {f.name: f.default for f in record.fields if f.name not in rec.names}
                    self._older[fp] = (rec, messages.arrow_schema(rec), _reader_schema(rec), missing)
        self._raw_schema = pa.schema([
            pa.field(f.name, pa.int64() if f.type == "timestamp_ms" else t.type, nullable=t.nullable)
            for f, t in zip(record.fields, self.schema)])

    def _foreign(self, fp: bytes) -> str:
        return (f"schema fingerprint {fp.hex().upper()} is not {self.record.namespace}.{self.record.name} "
                f"({self.fingerprint.hex().upper()})")

    def decode(self, value: bytes | None):
        """(BATCH, pa.Table) | (ROW, dict) | (BAD, reason)."""
        if value is None or len(value) < 3:
            return BAD, "message shorter than any flows format header"
        if value[:4] == messages.FLOW_BATCH_MAGIC:
            return self._batch(value)
        if value[:2] == SINGLE_OBJECT_MAGIC:
            return self._row(value)
        return BAD, ("neither a FlowBatch nor Avro single-object encoded (bad magic bytes "
                     f"{value[:4].hex().upper()})")

    def _batch(self, value: bytes):
        n = messages.FLOW_BATCH_HEADER_LEN
        if len(value) < n:
            return BAD, "FlowBatch shorter than its header"
        if value[4] != messages.FLOW_BATCH_VERSION:
            return BAD, f"FlowBatch version {value[4]} is not supported (this ingest reads {messages.FLOW_BATCH_VERSION})"
        fp = value[5:n]
        older = self._older.get(fp)
        if fp != self.fingerprint and older is None:
            return BAD, self._foreign(fp)
        schema = self.schema if older is None else older[1]
        try:
            table = pa.ipc.open_stream(pa.py_buffer(value)[n:]).read_all()
        except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
            return BAD, f"FlowBatch Arrow IPC stream does not decode: {exc}"
        if table.schema.names != schema.names or table.schema.types != schema.types:
            got = ", ".join(f"{f.name}:{f.type}" for f in table.schema)
            return BAD, f"FlowBatch columns are not {self.record.name}'s: got {got}"
        for f in schema:
            if not f.nullable and table.column(f.name).null_count:
                return BAD, f"FlowBatch column {f.name} has nulls, {self.record.name} requires a value"
        if older is not None:
            table = self._upgrade(table, older[3])
        return BATCH, table

    def _upgrade(self, table: pa.Table, missing: dict) -> pa.Table:
        """An earlier revision's table with the fields added since, at their defaults."""
        cols = []
        for f in self.schema:
            if f.name in missing:
                cols.append(pa.nulls(table.num_rows, f.type).fill_null(missing[f.name])
                            if missing[f.name] is not None else pa.nulls(table.num_rows, f.type))
            else:
                cols.append(table.column(f.name))
        return pa.Table.from_arrays(cols, schema=self.schema)

    def _row(self, value: bytes):
        if len(value) <= len(self.avro_header):
            return BAD, "message shorter than the Avro single-object header"
        older = None
        if value[:10] != self.avro_header:
            older = self._older.get(value[2:10])
            if older is None:
                return BAD, self._foreign(value[2:10])
        buf = io.BytesIO(value)
        buf.seek(10)
        try:
            row = self._reader(buf, self._avro if older is None else older[2])
        except Exception:  # fastavro raises EOFError, ValueError, UnicodeDecodeError, ...
            return BAD, f"Avro body does not decode as {self.record.name}"
        if buf.tell() != len(value):
            return BAD, f"Avro body does not decode as {self.record.name} ({len(value) - buf.tell()} bytes left over)"
        if older is not None:
            row.update(older[3])
        return ROW, row

    def rows_table(self, rows: list[dict]) -> pa.Table:
        """Format-1 rows gathered into one table of the FlowBatch schema."""
        return pa.Table.from_pylist(rows, schema=self._raw_schema).cast(self.schema)


def _reader_schema(record):
    """fastavro's parsed schema of a record, timestamps read as plain longs."""
    import fastavro  # noqa: PLC0415  (start-up: fastavro)

    raw = json.loads(record.avro_json())
    for f in raw["fields"]:
        if isinstance(f["type"], dict) and "logicalType" in f["type"]:
            f["type"] = f["type"]["type"]
    return fastavro.parse_schema(raw)
