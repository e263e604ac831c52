"""Wire formats of the flows topic, versioned: what a Kafka message of flows.v1 holds.

Format 1 (`avro`): one Flow per message, Avro single-object encoding
    C3 01 | 8-byte CRC-64-AVRO fingerprint of Flow | Avro binary body
Format 2 (`arrow`, the shipper's default): a FlowBatch, many flows per message
    "FLAR" | version byte 2 | the same 8-byte fingerprint of Flow | Arrow IPC stream
    whose columns are Flow's fields in order (types from `arrow_schema(FLOW)`), record
    batch bodies zstd- or LZ4-frame-compressed, as each message's IPC metadata says
    (the live shipper writes zstd, `flowlake import` LZ4 by default: import.message_compression;
    Kafka compression is off for these messages).

The ingest reads both, so messages written before an upgrade still land; a message of
neither form, or naming another record's fingerprint, is quarantined with the reason.
The fingerprint ties both formats to the one Flow declaration in schemas/flow.py: change
a field and old messages are recognised as another schema instead of misread.

The Flow record itself is versioned by revision (`FLOW_REVISIONS` in schemas/flow.py, the
fingerprint names the revision a message was written with): revision 1 has the 19 fields
up to file_seq; revision 2 (issue 26) adds src_vlan and dst_vlan; revision 3 (issue 32) adds
the rest of what nfcapd 1.7.1 keeps (flow_direction ... biflow_half, all nullable). The
ingest reads every revision in both formats; fields a message's revision lacks take their
declared default (VLAN 0 = none; revision 3's fields null), so messages still in Kafka from
before an upgrade land.
"""
from __future__ import annotations

from dataclasses import dataclass

from .core import Record
from .flow import FLOW_REVISIONS

FLOW_BATCH_MAGIC = b"FLAR"
FLOW_BATCH_VERSION = 2
FLOW_BATCH_HEADER_LEN = len(FLOW_BATCH_MAGIC) + 1 + 8


@dataclass(frozen=True)
class WireFormat:
    version: int
    name: str       # the shipper's --format / shipper.message_format value
    layout: str
    doc: str


FLOW_FORMATS = (
    WireFormat(1, "avro", "C3 01 + fingerprint(8) + Avro binary Flow",
               "one Flow per message, Avro single-object encoding (the ingest decodes it row by row)"),
    WireFormat(2, "arrow", "'FLAR' + 0x02 + fingerprint(8) + Arrow IPC stream of Flow columns (zstd or LZ4 bodies)",
               "FlowBatch: up to shipper.flows_per_message flows of one nfcapd file and one partition "
               "per message, decoded a column at a time"),
)


def flow_batch_header(record: Record) -> bytes:
    from . import avro  # noqa: PLC0415  (start-up: flowlake status)

    return FLOW_BATCH_MAGIC + bytes([FLOW_BATCH_VERSION]) + avro.fingerprint(record)


def arrow_schema(record: Record):
    """The Arrow schema of a record (FlowBatch columns, and the lake's Parquet files)."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    types = {
        "int": pa.int32(), "long": pa.int64(), "double": pa.float64(), "string": pa.string(),
        "boolean": pa.bool_(), "bytes": pa.binary(), "timestamp_ms": pa.timestamp("ms", tz="UTC"),
        "date": pa.date32(), "array_int": pa.list_(pa.int32()),
        "array_long": pa.list_(pa.int64()), "array_string": pa.list_(pa.string()),
    }
    missing = [f.name for f in record.fields if f.type not in types]
    if missing:
        raise ValueError(f"{record.name}: no Arrow type for fields {missing}")
    return pa.schema([pa.field(f.name, types[f.type], nullable=f.nullable) for f in record.fields])


def encode_flow_batch(record: Record, rows: list[dict]) -> bytes:
    """A format-2 message from rows (tests and benches; the Go shipper writes the real ones)."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    schema = arrow_schema(record)
    table = pa.Table.from_pylist(rows, schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return flow_batch_header(record) + sink.getvalue().to_pybytes()


def flow_revisions() -> list[tuple[int, bytes, object]]:
    """(revision, fingerprint, record) of every Flow revision the ingest reads, oldest first."""
    from . import avro  # noqa: PLC0415  (start-up: flowlake status)

    return [(i + 1, avro.fingerprint(r), r) for i, r in enumerate(FLOW_REVISIONS)]


def markdown() -> str:
    lines = ["### flows topic wire formats", "",
             "| version | shipper.message_format | layout | meaning |", "|---|---|---|---|"]
    for f in FLOW_FORMATS:
        lines.append(f"| {f.version} | `{f.name}` | `{f.layout}` | {f.doc} |")
    lines += ["", "### Flow record revisions (both formats; the fingerprint names the revision)", "",
              "| revision | fingerprint | fields | added |", "|---|---|---|---|"]
    prev: list[str] = []
    for rev, fp, record in flow_revisions():
        added = [n for n in record.names if n not in prev]
        lines.append(f"| {rev} | `{fp.hex().upper()}` | {len(record.fields)} | "
                     f"{', '.join(added) if prev else 'first'} |")
        prev = record.names
    return "\n".join(lines) + "\n"
