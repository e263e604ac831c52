"""One config file with environment overrides; malformed input is named."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from flowlake.base import config


def test_defaults_and_env_overrides(tmp_path):
    cfg = config.load(env={"FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_COLLECTOR_PORT": "2999",
                           "FLOWLAKE_KAFKA_PORT": "19092", "FLOWLAKE_SITE_LOCAL_PREFIXES": "10.0.0.0/8, 2001:db8::/32"})
    assert cfg.home_dir == tmp_path
    assert cfg.collector.port == 2999 and cfg.kafka.port == 19092
    assert cfg.kafka_bootstrap == "127.0.0.1:19092"
    assert cfg.site.local_prefixes == ["10.0.0.0/8", "2001:db8::/32"]
    default = config.load(env={})
    assert default.collector.port == 2055 and default.kafka.port == 9092 and default.superset.port == 8088
    assert default.collector.bind == "127.0.0.1"  # loopback unless configured


def test_user_file_overrides_defaults(tmp_path):
    f = tmp_path / "flowlake.toml"
    f.write_text('home = "data"\n[collector]\nport = 4739\n')
    cfg = config.load(f, env={})
    assert cfg.collector.port == 4739
    assert cfg.home_dir == tmp_path / "data"  # relative to the file
    assert cfg.kafka.port == 9092


@pytest.mark.parametrize("text, needle", [
    ("[collector\nport = 1", "not valid TOML"),
    ("[collector]\nport = 'abc'\n", "expected int"),
    ("[collector]\nprot = 1\n", "unknown key 'prot'"),
    ("[nosuch]\nx = 1\n", "unknown key 'nosuch'"),
])
def test_malformed_file_names_the_file_and_problem(tmp_path, text, needle):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(config.ConfigError) as exc:
        config.load(f, env={})
    assert str(f) in str(exc.value) and needle in str(exc.value)


def test_bad_env_value_names_the_variable():
    with pytest.raises(config.ConfigError, match="FLOWLAKE_KAFKA_PORT"):
        config.load(env={"FLOWLAKE_KAFKA_PORT": "90x2"})


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_fuzzed_config_files_fail_cleanly(tmp_path_factory, text):
    f = tmp_path_factory.mktemp("fuzz") / "f.toml"
    f.write_bytes(text.encode("utf-8", "replace"))
    try:
        config.load(f, env={})
    except config.ConfigError as exc:
        assert str(f) in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["FLOWLAKE_KAFKA_PORT", "FLOWLAKE_SPARK_TRIGGER_SECONDS", "FLOWLAKE_COLLECTOR_BIND",
                        "FLOWLAKE_SITE_LOCAL_PREFIXES"]), st.text(max_size=30))
def test_fuzzed_env_values_fail_cleanly(name, value):
    try:
        config.load(env={name: value})
    except config.ConfigError as exc:
        assert name in str(exc)
