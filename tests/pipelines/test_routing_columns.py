"""Flow record revision 4 (issue 33): the routing columns' declaration, their path through the
wire formats and the ingest's table functions, without a collector (its lookups against real
routers: tests/collectors/test_routing_flows.py).

- revision 3 is frozen (its fingerprint pinned) and revision 4 appends the contract columns;
- a revision-3 FlowBatch (what a shipper of before sends) decodes with them null;
- the ingest writes them explicitly unknown (empty lists, '') when routing is off, and when
  the collector does not answer (the ingest goes on);
- src_as/dst_as follow [routing] as_sources: the first non-zero source wins, in its order;
- a bad as_sources fails naming the key.
"""
from __future__ import annotations

import pyarrow as pa
import pytest

from flowlake.base import config
from flowlake.collectors.routing import service
from flowlake.pipelines.enrich import apply, routing
from flowlake.pipelines.flow_messages import BATCH, FlowDecoder
from flowlake.schemas import avro, messages
from flowlake.schemas.core import TYPES
from flowlake.schemas.flow import FILLED_AT_INGEST, FLOW, FLOW_REV3, FLOW_REVISIONS

CONTRACT = [("dst_as_path", "array_long"), ("dst_communities", "array_string"),
            ("dst_large_communities", "array_string"), ("dst_prefix", "string"), ("src_prefix", "string")]


def test_revision_3_is_frozen_and_4_appends_the_routing_columns():
    assert avro.fingerprint(FLOW_REV3).hex() == "e58688d8c9fe1d2a"
    assert FLOW_REVISIONS[-2:] == (FLOW_REV3, FLOW) and FLOW.names[:40] == FLOW_REV3.names
    assert FLOW_REV3.names[-1] == "biflow_half"
    assert [(f.name, f.type) for f in FLOW.fields[40:]] == CONTRACT
    assert all(f.nullable for f in FLOW.fields[40:]) and FILLED_AT_INGEST == tuple(n for n, _ in CONTRACT)
    assert TYPES["array_long"][1:] == ("array<bigint>", "BIGINT[]")
    assert TYPES["array_string"][1:] == ("array<string>", "VARCHAR[]")
    schema = messages.arrow_schema(FLOW)
    assert schema.field("dst_as_path").type == pa.list_(pa.int64())
    assert schema.field("dst_communities").type == pa.list_(pa.string())


def _rows(n: int = 3) -> list[dict]:
    return [{"time_start": 1_775_606_400_000 + i, "time_end": 1_775_606_400_500 + i, "exporter": "192.0.2.1",
             "input_if": 1, "output_if": 2, "src_addr": f"10.0.0.{i + 1}", "dst_addr": f"198.18.{i}.9",
             "src_port": 4000 + i, "dst_port": 443, "proto": 6, "tcp_flags": 2, "tos": 0, "packets": 1, "bytes": 60,
             "sampling_rate": 1, "src_as": [0, 65010, 0][i % 3], "dst_as": [0, 0, 65020][i % 3],
             "source_file": "t", "file_seq": i, "src_vlan": 0, "dst_vlan": 0} for i in range(n)]


def test_a_revision_3_batch_decodes_with_the_routing_columns_null():
    kind, table = FlowDecoder().decode(messages.encode_flow_batch(FLOW_REV3, _rows()))
    assert kind == BATCH and table.schema == messages.arrow_schema(FLOW)
    for name, _ in CONTRACT:
        assert table.column(name).null_count == table.num_rows, name


def test_routing_off_writes_the_explicit_unknown():
    _, table = FlowDecoder().decode(messages.encode_flow_batch(FLOW_REV3, _rows()))
    out = apply.lake_tables(None)(table)
    assert out.column("dst_as_path").to_pylist() == [[], [], []]
    assert out.column("dst_communities").to_pylist() == [[], [], []]
    assert out.column("dst_large_communities").to_pylist() == [[], [], []]
    assert out.column("dst_prefix").to_pylist() == ["", "", ""] == out.column("src_prefix").to_pylist()
    assert out.column("src_as").to_pylist() == [0, 65010, 0]  # as exported
    assert out.schema.field("dst_as_path").type == pa.list_(pa.int64())


def test_a_collector_that_does_not_answer_leaves_them_unknown_and_the_ingest_goes_on(tmp_path, caplog):
    _, table = FlowDecoder().decode(messages.encode_flow_batch(FLOW_REV3, _rows()))
    plan = apply.Plan(key="t-routing-down", routing_socket=str(tmp_path / "no-such.sock"))
    out = apply.lake_tables(plan)(table)
    assert out.num_rows == 3 and out.column("dst_prefix").to_pylist() == ["", "", ""]
    assert out.column("dst_as_path").to_pylist() == [[], [], []]
    assert "routing lookups off" in caplog.text and "no-such.sock" in caplog.text
    assert routing.lookup_for(str(tmp_path / "no-such.sock")).errors == 1


@pytest.mark.parametrize("order,want", [
    (("flow", "routing", "geoip"), [1, 20, 300, 0]),
    (("routing", "flow", "geoip"), [10, 20, 300, 0]),
    (("geoip", "routing", "flow"), [100, 200, 300, 0]),
    (("routing",), [10, 20, 0, 0]),
])
def test_as_sources_first_non_zero_wins_in_order(order, want):
    flow = pa.array([1, 0, 0, 0], pa.int64())
    routed = pa.array([10, 20, 0, 0], pa.int64())
    geoip = pa.array([100, 200, 300, 0], pa.int64())
    got = routing.pick_as(order, {"flow": flow, "routing": routed, "geoip": geoip}).to_pylist()
    assert got == want


@pytest.mark.parametrize("value", ['["flow", "bgp"]', '[]', '["flow", "flow"]'])
def test_a_bad_as_sources_names_the_key(tmp_path, value):
    path = tmp_path / "flowlake.toml"
    path.write_text(f"[routing]\nas_sources = {value}\n")
    cfg = config.load(path, env={"FLOWLAKE_HOME": str(tmp_path)})
    with pytest.raises(config.ConfigError) as info:
        service.check(cfg)
    assert "[routing] as_sources" in str(info.value) and "flow, routing, geoip" in str(info.value)
