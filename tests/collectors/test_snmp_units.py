"""SNMP poller, pure parts: counter deltas (wraps, agent restarts), which exporters are
polled with which credentials, the files the enricher reads, counters surviving a restart."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from flowlake.base import config
from flowlake.collectors.snmp import deltas, settings, store


def sample(ms, uptime, counters):
    return {"time_ms": ms, "sys_uptime_cs": uptime, "counters": counters}


def test_first_poll_has_no_deltas_then_plain_differences():
    first = sample(0, 1000, {3: {"in_octets": 100, "in_errors": 1}})
    assert deltas.rows(None, first)[0]["in_octets"] is None
    second = sample(60_000, 7000, {3: {"in_octets": 1100, "in_errors": 4}})
    row = deltas.rows(first, second)[0]
    assert (row["in_octets"], row["in_errors"], row["interval_s"], row["reset"]) == (1000, 3, 60.0, False)


def test_counter_wraps_are_undone_per_width():
    prev = sample(0, 1000, {1: {"in_octets": 2 ** 64 - 10, "in_errors": 2 ** 32 - 5}})
    cur = sample(60_000, 7000, {1: {"in_octets": 20, "in_errors": 5}})
    row = deltas.rows(prev, cur)[0]
    assert row["in_octets"] == 30 and row["in_errors"] == 10
    assert row["in_octets_counter"] == 20


def test_agent_restart_nulls_the_deltas_and_flags_the_row():
    prev = sample(0, 500_000, {1: {"in_octets": 10 ** 9}})
    cur = sample(60_000, 3000, {1: {"in_octets": 5000}})
    row = deltas.rows(prev, cur)[0]
    assert row["reset"] is True and row["in_octets"] is None and row["interval_s"] is None


def test_sysuptime_wrapping_after_497_days_is_not_a_restart():
    prev = sample(0, 2 ** 32 - 1000, {1: {"in_octets": 10}})
    cur = sample(60_000, 5000, {1: {"in_octets": 20}})  # 60 s later the ticks wrapped
    assert deltas.rows(prev, cur)[0]["reset"] is False


def test_a_new_interface_has_no_delta_until_its_second_poll():
    prev = sample(0, 100, {1: {"in_octets": 10}})
    cur = sample(60_000, 6100, {1: {"in_octets": 20}, 9: {"in_octets": 7}})
    rows = {r["if_index"]: r for r in deltas.rows(prev, cur)}
    assert rows[1]["in_octets"] == 10 and rows[9]["in_octets"] is None and rows[9]["interval_s"] is None


@given(st.integers(0, 2 ** 64 - 1), st.integers(0, 2 ** 40))
def test_delta_is_the_distance_travelled_modulo_the_width(start, moved):
    end = (start + moved) % 2 ** 64
    assert deltas.delta("in_octets", start, end) == moved
    assert deltas.unsigned64(deltas.signed64(end)) == end


def cfg_from(tmp_path, text, env=None):
    path = tmp_path / "flowlake.toml"
    path.write_text(f'home = "{tmp_path / "home"}"\n' + text)
    return config.load(path, env=env or {})


def test_exporters_with_snmp_and_their_overrides(tmp_path):
    cfg = cfg_from(tmp_path, """
[snmp]
community = "site-ro"
[exporters."*"]
snmp_timeout_seconds = 5.0
[exporters."192.0.2.1"]
snmp = true
[exporters."192.0.2.2"]
snmp_agent = "198.51.100.2"
snmp_port = 1161
snmp_community = "other"
[exporters."192.0.2.3"]
snmp_version = "3"
snmp_user = "poller"
snmp_auth_protocol = "sha256"
snmp_auth_password = "12345678"
snmp_priv_password = "abcdefgh"
[exporters."192.0.2.4"]
sampling = 100
[exporters."192.0.2.5"]
snmp = false
snmp_community = "never-used"
""")
    agents = settings.agents(cfg)
    assert sorted(agents) == ["192.0.2.1", "192.0.2.2", "192.0.2.3"]
    a1, a2, a3 = (agents[f"192.0.2.{i}"] for i in (1, 2, 3))
    assert (a1.address, a1.port, a1.community, a1.version, a1.timeout_seconds) == ("192.0.2.1", 161, "site-ro", "2c", 5.0)
    assert (a2.address, a2.port, a2.community) == ("198.51.100.2", 1161, "other")
    assert (a3.version, a3.user, a3.auth_protocol, a3.priv_protocol) == ("3", "poller", "SHA256", "AES")
    assert settings.enabled(cfg)
    env = cfg_from(tmp_path, '[exporters."192.0.2.1"]\nsnmp = true\n', env={"FLOWLAKE_SNMP_COMMUNITY": "from-env",
                                                                             "FLOWLAKE_SNMP_PORT": "2161"})
    assert (settings.agents(env)["192.0.2.1"].community, settings.agents(env)["192.0.2.1"].port) == ("from-env", 2161)
    assert not settings.enabled(cfg_from(tmp_path, '[exporters."192.0.2.4"]\nsampling = 100\n'))


def test_poll_seen_polls_exporters_that_sent_flows(tmp_path):
    cfg = cfg_from(tmp_path, '[snmp]\npoll_seen = true\n[exporters."192.0.2.8"]\nsnmp = false\n')
    state = cfg.path("state", "exporter_health.json")
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"exporters": [{"exporter": "192.0.2.7"}, {"exporter": "192.0.2.8"},
                                               {"exporter": "2001:db8::1"}]}))
    assert sorted(settings.agents(cfg)) == ["192.0.2.7", "2001:db8::1"]


@pytest.mark.parametrize("table, message", [
    ('snmp_version = "1"', 'snmp_version = \'1\': expected "2c" or "3"'),
    ('snmp_version = "3"', "snmp_user is empty"),
    ('snmp_version = "3"\nsnmp_user = "u"\nsnmp_auth_password = "short"\nsnmp_priv_password = "12345678"',
     "snmp_auth_password: at least 8 characters"),
    ('snmp_version = "3"\nsnmp_user = "u"\nsnmp_priv_protocol = "rot13"', "snmp_priv_protocol = 'rot13'"),
    ('snmp_comunity = "typo"', "snmp_comunity: unknown"),
    ("snmp_port = 0", "snmp_port = 0: expected a UDP port"),
    ('snmp = "yes"', "expected true or false"),
])
def test_bad_settings_are_refused_naming_the_key(tmp_path, table, message):
    cfg = cfg_from(tmp_path, f'[exporters."192.0.2.9"]\n{table}\n')
    with pytest.raises(config.ConfigError) as err:
        settings.agents(cfg)
    assert message in str(err.value) and "192.0.2.9" in str(err.value)


def test_interfaces_json_has_the_enrichers_shape(tmp_path):
    cfg = cfg_from(tmp_path, "")
    doc = store.interfaces_doc({"192.0.2.1": {"sys_name": "border-1", "polled_ms": 1_764_000_000_123, "error": "",
                                              "interfaces": {2: {"name": "eth0", "description": "Transit: A",
                                                                 "speed_mbps": 10000, "oper_status": 1}}}})
    assert doc == {"version": 1, "exporters": {"192.0.2.1": {
        "sys_name": "border-1", "polled": "2025-11-24T16:00:00.123Z", "error": "",
        "interfaces": {"2": {"name": "eth0", "description": "Transit: A", "speed_mbps": 10000, "oper_status": 1}}}}}
    store.write_json(store.interfaces_file(cfg), doc)
    assert [p.name for p in store.snmp_dir(cfg).iterdir()] == ["interfaces.json"]  # the temporary file is gone
    assert store.load_interfaces(cfg)["192.0.2.1"]["polled_ms"] == 1_764_000_000_123
    assert store.safe_name("2001:db8::1") == "2001_db8__1"


def test_counters_continue_from_the_lake_after_a_restart(tmp_path):
    """The newest counter file is the poller's memory: raw values (also above 2^63) come back."""
    cfg = cfg_from(tmp_path, "")
    first = sample(1_764_000_000_000, 100, {7: {"in_octets": 2 ** 64 - 3, "in_errors": 9}})
    store.write_counters(cfg, "2001:db8::1", first["time_ms"], deltas.rows(None, first))
    later = sample(1_764_000_060_000, 6100, {7: {"in_octets": 2 ** 64 - 1}})
    store.write_counters(cfg, "2001:db8::1", later["time_ms"], deltas.rows(first, later))
    back = store.last_samples(cfg, ["2001:db8::1", "192.0.2.1"])
    assert list(back) == ["2001:db8::1"]
    assert back["2001:db8::1"]["time_ms"] == later["time_ms"]
    assert back["2001:db8::1"]["counters"][7]["in_octets"] == 2 ** 64 - 1
    nxt = sample(1_764_000_120_000, 12100, {7: {"in_octets": 4}})
    assert deltas.rows(back["2001:db8::1"], nxt)[0]["in_octets"] == 5
    files = list((cfg.lake / "interface_counters").rglob("*"))
    assert not [f for f in files if f.name.startswith(".")], "no temporary file left behind"


def test_counters_are_bounded_by_their_retention_key(tmp_path):
    import datetime as dt

    from flowlake.pipelines.retention import tiers

    cfg = cfg_from(tmp_path, "[retention]\ninterface_counters_days = 10\n")
    today = dt.date(2026, 11, 25)
    for age in (3, 10, 11, 40):
        d = cfg.lake / "interface_counters" / f"date={today - dt.timedelta(days=age)}"
        d.mkdir(parents=True)
        (d / "192.0.2.1-1.parquet").write_bytes(b"x" * 100)
    tier = next(t for t in tiers.lake_tiers(cfg, today) if t.name == "interface_counters")
    assert tier.limit == "10 days" and len(tier.units) == 4
    assert sorted(u.path.name for u in tier.expire) == ["date=2026-10-16", "date=2026-11-14"]


def test_flowlake_config_hides_communities_and_passwords_at_any_depth(tmp_path):
    import os
    import subprocess
    import sys

    toml = tmp_path / "flowlake.toml"
    toml.write_text('[snmp]\ncommunity = "c0mmunity-x"\n[exporters."192.0.2.3"]\nsnmp_version = "3"\nsnmp_user = "poller"\n'
                    'snmp_auth_password = "auth-pw-123"\nsnmp_priv_password = "priv-pw-456"\nsnmp_community = "other-c"\n')
    res = subprocess.run([sys.executable, "-m", "flowlake.cli", "config"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "FLOWLAKE_CONFIG": str(toml), "FLOWLAKE_HOME": str(tmp_path / "home")})
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)
    assert shown["snmp"]["community"] == shown["exporters"]["192.0.2.3"]["snmp_auth_password"] == "(set, not shown)"
    assert shown["exporters"]["192.0.2.3"]["snmp_user"] == "poller"
    for secret in ("c0mmunity-x", "auth-pw-123", "priv-pw-456", "other-c"):
        assert secret not in res.stdout
    agent = settings.agents(config.load(toml, env={}))["192.0.2.3"]
    assert "other-c" not in agent.describe() and "auth-pw" not in agent.describe()


def test_old_days_merge_into_one_file_and_recent_ones_stay(tmp_path):
    import datetime as dt

    import pyarrow.parquet as pq

    cfg = cfg_from(tmp_path, "")
    today = dt.date(2026, 11, 25)
    for day_offset in (3, 1, 0):
        t0 = int(dt.datetime.combine(today - dt.timedelta(days=day_offset), dt.time(12),
                                     dt.timezone.utc).timestamp() * 1000)
        prev = None
        for k in range(3):
            for exporter in ("192.0.2.1", "2001:db8::1"):
                cur = sample(t0 + 60_000 * k, 100 + 6000 * k, {1: {"in_octets": 1000 * k}, 2: {"in_octets": 7 * k}})
                store.write_counters(cfg, exporter, cur["time_ms"], deltas.rows(prev, cur))
            prev = cur
    root = cfg.lake / "interface_counters"
    before = pq.read_table(root / "date=2026-11-22").to_pylist()
    assert store.compact_old_days(cfg, today) == ["2026-11-22"]
    assert [p.name for p in (root / "date=2026-11-22").iterdir()] == ["merged.parquet"]
    after = pq.read_table(root / "date=2026-11-22").to_pylist()
    key = lambda r: (r["exporter"], r["if_index"], r["time"])  # noqa: E731
    assert sorted(after, key=key) == sorted(before, key=key) and len(after) == 12
    assert len(list((root / "date=2026-11-24").glob("*.parquet"))) == 6  # yesterday: the poller's memory
    assert len(list((root / "date=2026-11-25").glob("*.parquet"))) == 6
    assert store.compact_old_days(cfg, today) == []  # nothing left to merge
    assert not [p for p in root.rglob("*") if ".staging" in str(p) and p.is_file()]
