"""The demo's sFlow agents (flowlake/demo_sflow.py, issue 37's Collection gap): sent to the
stack's real sfcapd and sFlow tap, as `flowlake demo` starts them, they fill what the
Collection dashboard's sFlow charts read (lake/sflow_agent_health: both agents, their
datagrams, samples per second, sampling rates) and land as sfcapd flow records of both
agents; their discarded packet samples become the tap's drop records (status "sFlow drop
samples", shipped from the spool's sflow-drops/); the sender's wait() returns once the tap's
rows of the sending are in the lake."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from rich.console import Console

from flowlake import components, demo_sflow
from flowlake.base import config
from flowlake.base.ports import private_env
from flowlake.collectors import sfcapd

pytestmark = pytest.mark.integration


def test_demo_sflow_agents_fill_the_collection_charts(tmp_path, monkeypatch):
    env = {**private_env(tmp_path / "home"), "FLOWLAKE_COLLECTOR_SFLOW_FLUSH_SECONDS": "3"}
    cfg = config.load(env=env)
    monkeypatch.setattr(demo_sflow, "SECONDS", 6.0)
    monkeypatch.setattr(demo_sflow, "FLOWS", 800)
    tap, comp = components.get(cfg, "sflow-tap"), components.get(cfg, "sfcapd")
    tap.start()
    comp.start()
    try:
        sender = demo_sflow.Sender(cfg, Console(file=open(tmp_path / "out.txt", "w"))).start()  # noqa: SIM115
        assert sender.thread is not None, (tmp_path / "out.txt").read_text()
        sender.wait(timeout=120)
    finally:
        comp.stop()
        tap.stop()
    rows = [r for f in sorted((cfg.lake / "sflow_agent_health").glob("date=*/*.parquet"))
            for r in pq.read_table(f).to_pylist()]
    agents = {a: rate for a, _sub, rate in demo_sflow.AGENTS}
    assert {r["agent"] for r in rows} == set(agents), rows
    for agent, rate in agents.items():
        mine = [r for r in rows if r["agent"] == agent]
        assert sum(r["datagrams"] for r in mine) == sender.sent[agent]["datagrams"] > 0, (mine, sender.sent)
        assert sum(r["flow_samples"] for r in mine) == sender.sent[agent]["flow_samples"] > 0
        assert sum(r["lost"] for r in mine) == 0 and {r["sampling_rates"] for r in mine if r["flow_samples"]} == {
            str(rate)}
        assert any(r["samples_per_s"] > 0 for r in mine)
    state = sfcapd.tap_status(cfg)["agents"]
    assert {k.split("/")[0] for k in state} == set(agents), state
    for key, a in state.items():  # every discarded packet sample sent became a drop record
        sent = sender.sent[key.split("/")[0]]
        assert a["discard_samples"] == a["drop_records"] == sent["discard_samples"] > 0, (key, a, sent)
        assert not a.get("bad"), a
    assert sfcapd.drops_usage(cfg)["records"] == sum(s["discard_samples"] for s in sender.sent.values())
    out = (tmp_path / "out.txt").read_text()
    assert all(f"sFlow agent {a}:" in out for a in agents), out
