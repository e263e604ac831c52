"""The demo site's files and settings (flowlake/demo_site.py) against the traffic model:
every modelled router and interface named and classified, every modelled address in the
demo MMDBs and networks, and the settings accepted by the readers the stack uses."""
from __future__ import annotations

import datetime as dt
import ipaddress

import duckdb
import maxminddb
import numpy as np

from flowlake import demo_site
from flowlake.base import config as _config
from flowlake.collectors.traffic import lake_rows, model
from flowlake.pipelines.enrich import classify, interfaces, networks


def test_demo_site_names_and_classifies_every_modelled_interface(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWLAKE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FLOWLAKE_CONFIG", raising=False)
    base = _config.load(_config.DEFAULTS_FILE)
    assert demo_site.own_config(base) is None
    path = demo_site.prepare(base)
    cfg = _config.load(path)
    assert cfg.home_dir == base.home_dir and cfg.source == path

    rules = classify.parse_rules(cfg.enrich.interface_rules)
    static = interfaces.read_static(cfg)
    for r in model.default_routers():
        got = static[r.address]
        assert got["name"] == r.name
        for idx in (r.uplink_if, *r.lan_ifs):
            i = got["interfaces"][idx]
            boundary, connectivity, provider = classify.classify(rules, r.name, i["name"], i["description"])
            assert provider and connectivity, (r.address, idx, i)
            assert boundary == ("external" if idx == r.uplink_if else "internal")
            assert f"{r.address}/{idx}={i['speed_mbps'] * 1_000_000}" in cfg.active.interface_speeds
    assert cfg.alerts.watched_ports == [23] and cfg.rollups.forecast_min_days == 7
    assert cfg.pinger.regions.endswith("pinger_regions.csv")


def test_every_modelled_address_has_a_country_an_asn_and_a_network(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWLAKE_HOME", str(tmp_path / "home"))
    cfg = _config.load(demo_site.prepare(_config.load(_config.DEFAULTS_FILE)))
    p = model.ModelParams()
    f, _ = model.generate(p, 1_700_000_000_000, 3_600_000, 5000, seed=3)
    table = lake_rows.lake_table(f, p)
    nets = networks.Networks(networks.parse(demo_site.site_dir(cfg) / "networks.csv"))
    with maxminddb.open_database(cfg.enrich.geo_database) as geo, \
            maxminddb.open_database(cfg.enrich.asn_database) as asn:
        for side in ("src_addr", "dst_addr"):
            addrs = set(table.column(side).to_pylist())
            assert len(addrs) > 100
            for a in addrs:
                assert geo.get(a)["country"]["iso_code"], a
                assert asn.get(a)["autonomous_system_number"] > 0, a
                name = nets.lookup(a)[0]
                local = any(ipaddress.ip_address(a) in ipaddress.ip_network(n) for n in p.local_prefixes)
                assert name and (name != "internet") == (local or name in ("SLAC", "FNAL", "EMBL-EBI",
                                                                             "remote collaborator")), (a, name)
    assert np.unique([d for d, _ in demo_site.dns_domains()]).size == len(demo_site.dns_domains())


def test_history_is_rollups_of_the_modelled_days(tmp_path, monkeypatch):
    """`flowlake demo`'s week before the day: rollups of each day (the hour close's SQL over
    the model's flows), volume growing, every modelled router in them; no raw flows."""
    monkeypatch.setenv("FLOWLAKE_HOME", str(tmp_path / "home"))
    cfg = _config.load(_config.DEFAULTS_FILE)
    got = demo_site.write_history(cfg, dt.date(2026, 11, 20), 3, 1500, seed=2)
    assert got["flows"] == sum(int(1500 * (1 + 0.5 * d / 2)) for d in range(3)) and got["1d"] > 0
    assert sorted(p.name for p in (cfg.lake / "rollups" / "1d").iterdir()) == [
        "date=2026-11-20", "date=2026-11-21", "date=2026-11-22"]
    glob = str(cfg.lake / "rollups" / "1h" / "*" / "*.parquet")
    per_day = duckdb.sql(f"SELECT CAST(date AS VARCHAR) d, sum(flows) FROM read_parquet('{glob}', "
                         "hive_partitioning = true) GROUP BY 1 ORDER BY 1").fetchall()
    assert [int(n) for _, n in per_day] == [1500, 1875, 2250], per_day
    exporters = duckdb.sql(f"SELECT DISTINCT exporter FROM read_parquet('{glob}')").fetchall()
    assert {e for (e,) in exporters} == {r.address for r in model.default_routers()}
    assert not (cfg.lake / "flows").exists()
