"""Lab specs, figures and run tagging without namespaces: errors name the key; the paced
metrics, the Mathis bound and the run_id tagging checked against hand-computed values."""
from __future__ import annotations

import io
import math
from pathlib import Path

import fastavro
import pytest

from flowlake.collectors.lab import metrics, results
from flowlake.collectors.lab.spec import SpecError, load, parse

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "lab"
BASE = {"study": "t", "topology": {"paths": {"a": {"rate": "10mbit"}}},
        "grid": [{"kind": "paced", "protocol": ["udp"], "frame_size": [200], "rate": [50]}]}


@pytest.mark.parametrize("name", ["smoke.toml", "paced.toml", "datatag.toml", "pbpd.toml"])
def test_examples_parse(name):
    spec = load(EXAMPLES / name)
    assert spec.runs and len({r.run_id for r in spec.runs}) == len(spec.runs)


@pytest.mark.parametrize("change, key", [
    ({"topology": {"paths": {"a": {"rate": "fast"}}}}, "topology.paths.a.rate"),
    ({"topology": {"paths": {"a": {"rate": "1mbit", "delay_ms": 5000}}}}, "topology.paths.a.delay_ms"),
    ({"topology": {"paths": {"a": {"rate": "1mbit", "delay_ms": "20ms"}}}}, "topology.paths.a.delay_ms"),
    ({"grid": [{"kind": "paced", "protocol": ["icmp"], "frame_size": [1], "rate": [1]}]}, "grid[0].protocol"),
    ({"grid": [{"kind": "paced", "frame_size": [200]}]}, "grid[0].rate"),
    ({"grid": [{"kind": "bulk", "conditions": ["nope"]}]}, "grid[0].conditions"),
    ({"grid": [{"kind": "bulk", "streams": ["four"]}]}, "grid[0].streams"),
    ({"grid": [{"kind": "split", "message_size": [1000]}]}, "grid[0].kind"),
    ({"conditions": {"lossy": {"loss_percent": 120}}}, "conditions.lossy.loss_percent"),
    ({"conditions": {"f": {"flap": {"down_s": 2}}}}, "conditions.f.flap.up_s"),
    ({"duration": 5}, "duration"),
])
def test_spec_errors_name_the_key(change, key):
    with pytest.raises(SpecError) as err:
        parse({**BASE, **change}, "x.toml")
    assert err.value.key == key and str(err.value).startswith(f"x.toml: {key}: ")


def test_a_path_delay_is_declared_in_ms_one_way():
    spec = parse({**BASE, "topology": {"paths": {"a": {"rate": "1mbit", "delay_ms": 20}}}})
    assert spec.paths["a"].delay_ms == 20.0


def test_udp_runs_do_not_multiply_over_congestion_controls():
    spec = parse({**BASE, "repetitions": 3, "conditions": {"a": {}, "b": {"loss_percent": 1}},
                  "grid": [{"kind": "bulk", "protocol": ["tcp", "udp"], "congestion_control": ["reno", "cubic"]}]})
    assert len(spec.runs) == (2 + 1) * 2 * 3


def test_paced_metrics_by_hand():
    rate, t0 = 100.0, 1000.0
    client = {"scheduled": 10, "rate": rate}
    # frames 0..9 due every 10 ms; 3 and 4 lost; 7 arrives 50 ms late; the rest 1 ms late
    frames = [(i, t0 + i / rate, t0 + i / rate, t0 + i / rate + (0.050 if i == 7 else 0.001))
              for i in range(10) if i not in (3, 4)]
    m = metrics.paced(client, {"frames": frames}, deadline_ms=10)
    assert m["dropped_frames"] == 2 and m["missed_deadlines"] == 1
    assert m["achieved_rate"] == pytest.approx(8 / 0.1)
    assert m["latency_p50"] == pytest.approx(1.0)
    # arrivals (ms): 1, 11, 21, 51, 61, 81, 91, 120 (frame 7): longest silence 21 -> 51
    assert m["max_inter_frame_delay"] == pytest.approx(30.0)


def test_mathis_bound_and_iperf3_figures():
    # MSS 1460 B, RTT 10 ms, p = 1e-4: 1460*8/0.01*sqrt(1.5)/0.01 = 143.1 Mbit/s
    assert metrics.mathis_bound(1460, 10, 1e-4) == pytest.approx(1460 * 8 / 0.01 * math.sqrt(1.5) / 0.01)
    doc = {"start": {"test_start": {"protocol": "TCP"}, "tcp_mss_default": 1448},
           "end": {"sum_sent": {"bytes": 1448 * 10000, "retransmits": 10}, "sum_received": {"bits_per_second": 9e6},
                   "streams": [{"sender": {"mean_rtt": 20000}}]}}
    m = metrics.iperf3(doc)
    assert m["loss"] == pytest.approx(0.001) and m["rtt"] == pytest.approx(20.0)
    assert m["mathis_bound"] == pytest.approx(metrics.mathis_bound(1448, 20.0, 0.001))


def test_experiment_rows_round_trip_avro():
    from flowlake.schemas.experiments import EXPERIMENT_RESULT

    run = parse(BASE).runs[0]
    rows = results.rows(run, {"achieved_rate": 50.0, "latency_p99": None, "loss": 0.01}, 1_700_000_000_000,
                        1_700_000_005_000)
    assert [(r["metric"], r["unit"]) for r in rows] == [("achieved_rate", "frames/s"), ("loss", "fraction")]
    schema = fastavro.parse_schema(EXPERIMENT_RESULT.avro_schema())
    back = fastavro.schemaless_reader(io.BytesIO(results.encode(rows[0])[10:]), schema)
    assert back["run_id"] == run.run_id and back["frame_size"] == 200 and back["streams"] is None


def test_run_id_tagging(tmp_path):
    import pyarrow as pa

    from flowlake.collectors.lab import tag as lab_tag

    reg = tmp_path / "runs.jsonl"
    reg.write_text('{"run_id": "r1", "exporter": "127.88.0.5", "start": 1000000, "end": 1086400000}\n'
                   '{"run_id": "r1", "exporter": "127.88.0.5", "start": 1000000, "end": 2000000}\n'
                   '{"run_id": "r2", "exporter": "127.88.0.5", "start": 3000000, "end": 4000000}\n'
                   # r3 began, then the lab was killed in it: voided (end before start)
                   '{"run_id": "r3", "exporter": "127.88.0.5", "start": 6000000, "end": 6086400000}\n'
                   '{"run_id": "r3", "exporter": "127.88.0.5", "start": 6000000, "end": 5990000}\n{"cut')
    table = pa.table({"exporter": ["127.88.0.5", "127.88.0.5", "127.88.0.5", "10.0.0.1", "127.88.0.5", "127.88.0.5"],
                      "time_start": pa.array([1500000, 3500000, 2500000, 1500000, 5000000, 6001000],
                                             pa.timestamp("ms", tz="UTC"))})
    out = lab_tag.tag(table, lab_tag.load(reg))
    assert out.column("run_id").to_pylist() == ["r1", "r2", "", "", "", ""]


def test_a_flow_stamped_early_goes_to_the_run_it_overlaps_most():
    """v9 stamps put a run's flow ~1 s early, inside the previous run's window: the run
    whose window holds most of the flow gets it; a one-packet flow stays where it lies."""
    import pyarrow as pa

    from flowlake.collectors.lab import tag as lab_tag

    runs = {"r2": ("127.88.0.5", 1_000_000, 1_004_232), "r3": ("127.88.0.5", 1_004_999, 1_009_473)}
    ms = lambda v: pa.array(v, pa.timestamp("ms", tz="UTC"))  # noqa: E731
    table = pa.table({"exporter": ["127.88.0.5"] * 3, "time_start": ms([1_004_153, 1_004_100, 1_004_700]),
                      "time_end": ms([1_008_154, 1_004_100, 1_004_700])})
    assert lab_tag.tag(table, runs).column("run_id").to_pylist() == ["r3", "r2", "r3"]

