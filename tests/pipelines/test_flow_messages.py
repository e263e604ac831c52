"""The flows topic's wire formats (schemas/messages.py) and their pure decoder
(pipelines/flow_messages.py): both formats give the same rows; every broken message
is named with a reason; the Arrow columns are the Flow record's, from the one schema."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pyarrow as pa

from flowlake.pipelines.flow_messages import BAD, BATCH, ROW, FlowDecoder
from flowlake.schemas import FLOW, Field, Record, avro, messages


def rows(n: int) -> list[dict]:
    t = dt.datetime(2026, 11, 20, 23, 59, 59, 999000, tzinfo=dt.timezone.utc)
    return [{"time_start": t, "time_end": t + dt.timedelta(seconds=i), "exporter": "127.0.0.2", "input_if": i,
             "output_if": 2**33, "src_addr": f"10.0.0.{i}", "dst_addr": "2001:db8::1", "src_port": 1024 + i,
             "dst_port": 443, "proto": 6, "tcp_flags": 0x1B, "tos": 0, "packets": i + 1, "bytes": 2**40 + i,
             "sampling_rate": 10, "src_as": 64500, "dst_as": 4200000000, "source_file": "d/nfcapd.1",
             "file_seq": i, "src_vlan": 100 + i, "dst_vlan": 4094, **rev3(i)} for i in range(n)]


def rev3(i: int) -> dict:
    """Revision 3's columns: every other row without the elements (null), MPLS stacks of
    1-3 labels and an empty one, a reverse biflow half (negative file_seq is the shipper's)."""
    if i % 2:
        return {n: None for n in FLOW.names[21:]} | {"biflow_half": 0}
    return {"flow_direction": 1, "next_hop": "10.255.0.1", "bgp_next_hop": "2001:db8::ffff", "src_mask": 24,
            "dst_mask": 0, "src_mac": "0a:00:00:00:00:01", "dst_mac": "02:00:5e:00:01:0b",
            "mpls_labels": [16 + j for j in range(i % 4 + 1)], "ingress_vrf": 2**32 - 1, "egress_vrf": 0,
            "forwarding_status": 130, "icmp_type": 8, "icmp_code": 0, "src_addr_nat": "198.18.0.7",
            "dst_addr_nat": "192.0.2.1", "src_port_nat": 65535, "dst_port_nat": 443, "nat_event": 1,
            "biflow_half": 2,
            # revision 4 (issue 33; the ingest fills them, both wire formats carry them)
            "dst_as_path": [64501, 4200000000][: i % 3], "dst_communities": ["65401:10"] if i % 4 else [],
            "dst_large_communities": ["64501:1:2"], "dst_prefix": "2001:db8::/32", "src_prefix": ""}


def test_both_formats_decode_to_the_same_table():
    dec = FlowDecoder()
    kind, batch = dec.decode(messages.encode_flow_batch(FLOW, rows(5)))
    assert kind == BATCH and batch.num_rows == 5
    singles = []
    for r in rows(5):
        kind, row = dec.decode(avro.encode(FLOW, r))
        assert kind == ROW
        singles.append(row)
    legacy = dec.rows_table(singles)
    assert legacy.schema == batch.schema == messages.arrow_schema(FLOW)
    assert legacy.equals(batch)
    assert batch.to_pylist() == rows(5)


def test_arrow_columns_come_from_the_flow_declaration():
    schema = messages.arrow_schema(FLOW)
    assert schema.names == FLOW.names
    assert schema.field("time_start").type == pa.timestamp("ms", tz="UTC")
    assert schema.field("proto").type == pa.int32() and schema.field("bytes").type == pa.int64()
    header = messages.flow_batch_header(FLOW)
    assert header[:5] == b"FLAR\x02" and header[5:] == avro.fingerprint(FLOW)


def test_every_broken_message_has_a_reason():
    dec = FlowDecoder()
    good = messages.encode_flow_batch(FLOW, rows(3))
    n = messages.FLOW_BATCH_HEADER_LEN
    other = Record("Other", "x", "another record", (Field("a", "long", "a"),))
    wrong_cols = Record("Flow", "flowlake.v1", "same name, fewer fields", FLOW.fields[:3])
    table = pa.Table.from_pylist(rows(2), schema=messages.arrow_schema(FLOW))
    nulls = table.set_column(2, "exporter", pa.array([None, "x"], pa.string()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, nulls.schema) as w:
        w.write_table(nulls)
    cases = {
        None: "shorter than any",
        b"xyz123": "bad magic bytes",
        good[:8]: "FlowBatch shorter than its header",
        good[:4] + b"\x03" + good[5:]: "version 3 is not supported",
        messages.encode_flow_batch(other, [{"a": 1}]): "schema fingerprint",
        good[:n] + b"\x00" * 50: "Arrow IPC stream does not decode",
        good[:n] + messages.encode_flow_batch(wrong_cols, [{k: r[k] for k in wrong_cols.names} for r in rows(1)])[n:]:
            "columns are not Flow's",
        good[:n] + sink.getvalue().to_pybytes(): "column exporter has nulls",
        avro.header(FLOW): "shorter than the Avro single-object header",
        avro.header(FLOW) + b"\xff\xff\xff": "does not decode as Flow",
        avro.encode(FLOW, rows(1)[0]) + b"\x00\x00": "2 bytes left over",
        avro.encode(other, {"a": 1}): "schema fingerprint",
    }
    for value, needle in cases.items():
        kind, reason = dec.decode(value)
        assert kind == BAD and needle in reason, (value[:16] if value else value, reason)


def test_schema_cli_prints_formats_and_arrow_columns():
    out = subprocess.run([sys.executable, "-m", "flowlake.cli", "schema", "formats"], capture_output=True,
                         text=True, check=True).stdout
    assert "| 1 | `avro`" in out and "| 2 | `arrow`" in out
    arrow = subprocess.run([sys.executable, "-m", "flowlake.cli", "schema", "arrow", "Flow"], capture_output=True,
                           text=True, check=True).stdout
    assert arrow.splitlines()[0] == "time_start: timestamp[ms, tz=UTC] not null"
    assert len([ln for ln in arrow.splitlines() if not ln.startswith(" ")]) == len(FLOW.fields)
    assert "mpls_labels: list<item: int32>" in arrow
