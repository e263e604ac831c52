"""The demo's SNMP (flowlake/demo_snmp.py): a real snmpd per modelled router serving the
model's counters, polled by flowlake's poller on the modelled day's clock, read by job
interface_capacity beside the day's flows. Checked against the model: every poll's counters
as snmpd served them, the job's counter bytes per hour equal to the model's, the flow
coverage of each interface what the frames' overhead and the dropped flows make it."""
from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from flowlake import demo_site, demo_snmp
from flowlake.base import config as _config
from flowlake.collectors.snmp import coverage
from flowlake.collectors.traffic import if_counters, lake_rows, model, record3
from flowlake.jobs.context import JobContext
from flowlake.jobs.interface_capacity import run as capacity

pytestmark = pytest.mark.integration  # real snmpd agents

DAY = dt.date(2025, 11, 20)
START = int(dt.datetime(2025, 11, 20, tzinfo=dt.UTC).timestamp() * 1000)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    if not (shutil.which("snmpd") or Path("/usr/sbin/snmpd").exists()):
        pytest.fail("the demo's SNMP needs snmpd (`make setup` installs it)", pytrace=False)
    root = tmp_path_factory.mktemp("demo-snmp")
    base = _config.load(_config.DEFAULTS_FILE, env={"FLOWLAKE_HOME": str(root / "home")})
    cfg = _config.load(demo_site.prepare(base), env={})
    p = demo_site.params("v9", cfg)
    f, _ = model.generate(p, START, 86_400_000, 20_000, seed=7)
    x = record3.draw(f, 7)
    counters_file = root / "interfaces.json"
    counters_file.write_text(json.dumps(if_counters.series(f, p, START, START + 86_400_000, rev3=x)))
    doc = json.loads(counters_file.read_text())
    table = lake_rows.lake_table(f, p, version=9, record3=x)
    table = table.filter(pc.equal(table["date"], str(DAY)))  # flows that start after midnight are the next day's
    for hour in range(24):  # the lake's layout, one file an hour of the day
        part = cfg.lake / "flows" / f"date={DAY}" / f"hour={hour:02d}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.filter(pc.equal(table["hour"], hour)).drop_columns(["date", "hour"]),
                       part / "part-0.parquet")
    summary = demo_snmp.replay(cfg, counters_file)
    capacity(JobContext(spark=None, cfg=cfg, date=DAY))
    return cfg, doc, table, summary


def _in_day(row) -> float:
    ts, te = (int(row[k].timestamp() * 1000) for k in ("time_start", "time_end"))
    if te <= ts:
        return row["bytes"]
    return row["bytes"] * (min(te, START + 86_400_000) - ts) / (te - ts)


def _counters(cfg):
    return pq.read_table(cfg.lake / "interface_counters").to_pylist()


def test_every_poll_of_the_day_lands_as_snmpd_served_it(demo):
    cfg, doc, _table, summary = demo
    assert summary["errors"] == 0, summary["last_error"]
    routers = doc["routers"]
    n_if = sum(len(r["interfaces"]) for r in routers.values())
    assert summary["agents"] == 3 and summary["polls"] == len(doc["times_ms"])
    assert summary["rows"] == n_if * len(doc["times_ms"])
    rows = _counters(cfg)
    assert len(rows) == summary["rows"]
    times = doc["times_ms"]
    for r in rows:
        k = times.index(int(r["time"].timestamp() * 1000))
        exp, idx = r["exporter"], r["if_index"]
        want = routers[exp]["interfaces"][str(idx)]
        name, alias, mbps = demo_site.interfaces(exp)[idx]
        assert (r["if_name"], r["speed_mbps"], r["oper_status"]) == (name, mbps, 1)
        assert r["in_octets_counter"] == want["in_octets"][k] and r["out_octets_counter"] == want["out_octets"][k]
        assert r["in_discards_counter"] == want["in_discards"][k] % 2 ** 32
        if k == 0:
            assert r["in_octets"] is None  # the day's first poll is the baseline
        else:
            assert r["in_octets"] == want["in_octets"][k] - want["in_octets"][k - 1]
            assert r["interval_s"] == pytest.approx(300)
    # the poller's inventory, as the enricher reads it: the names snmpd served
    inv = json.loads((cfg.path("state", "snmp") / "interfaces.json").read_text())["exporters"]
    assert {a: e["sys_name"] for a, e in inv.items()} == {a: n for a, (n, _) in demo_site.ROUTERS.items()}
    assert inv["127.0.0.3"]["interfaces"]["1"]["description"] == demo_site.ROUTERS["127.0.0.3"][1]


def test_the_capacity_report_has_the_model_counters_and_coverage(demo):
    cfg, doc, table, _summary = demo
    reports = cfg.lake / "reports"
    cov = pq.read_table(reports / "flow_coverage" / f"date={DAY}").to_pylist()
    util = pq.read_table(reports / "interface_utilisation" / f"date={DAY}").to_pylist()
    k0 = doc["times_ms"].index(START)
    day_rows = table.to_pylist()
    for exp, r in doc["routers"].items():
        for idx, c in r["interfaces"].items():
            idx = int(idx)
            for side in ("in", "out"):
                hours = {h["hour"]: h for h in cov if (h["exporter"], h["if_index"], h["side"]) == (exp, idx, side)}
                assert len(hours) == 25, (exp, idx, side)  # every hour and the day
                series = c[f"{side}_octets"]
                for hour in range(24):
                    a, b = k0 + 12 * hour, k0 + 12 * (hour + 1)
                    assert hours[hour]["counter_bytes"] == pytest.approx(series[b] - series[a], abs=1e-3)
                    assert hours[hour]["counter_seconds"] == pytest.approx(3600)
                day = hours[None]
                col = "input_if" if side == "in" else "output_if"
                # the share of each flow's bytes within the day (spread over its lifetime, as the counters)
                flow_bytes = sum(_in_day(x) for x in day_rows if x["exporter"] == exp and x[col] == idx
                                 and (side == "in" or (x["forwarding_status"] or 64) < 128))
                assert day["flow_bytes"] == pytest.approx(flow_bytes, rel=1e-9)
                assert day["coverage"] == pytest.approx(flow_bytes / (series[k0 + 288] - series[k0]), rel=1e-9)
                # frames carry 18 bytes a packet more than the flows' IP bytes: coverage a little
                # below 1 (the flows that end after midnight count whole in the day's flows)
                assert 0.9 < day["coverage"] < 1.02, (exp, idx, side, day["coverage"])
            fives = [u for u in util if (u["exporter"], u["if_index"], u["period"]) == (exp, idx, "5m")]
            assert len(fives) == 2 * 288 and all(u["speed_bps"] == 1e10 for u in fives)
    # flows spread over their hours as the counters are: no hour outside the tolerance, even on
    # a small day of heavy-tailed transfers crossing the hours
    st = coverage.coverage_status(cfg)
    assert st["date"] == str(DAY) and st["interfaces"] == 2 * sum(len(r["interfaces"]) for r in doc["routers"].values())
    assert st["warnings"] == []
