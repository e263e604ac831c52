"""The house's shape (issue 31): stages in one direction, checked by import-linter, and
one component contract with one registry that `up`, `down`, `status` and `/metrics` use."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from flowlake import components
from flowlake.base.component import Component

REPO = Path(__file__).resolve().parents[2]
LINT = [sys.executable, str(REPO / "scripts" / "lint_imports.py")]


def test_import_contracts_are_kept():
    res = subprocess.run(LINT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert "2 kept, 0 broken" in res.stdout


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    """The check can fail: the same tree plus one base module importing a job."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("collectors", "pipelines", "jobs", "schemas"):
        (root / name).symlink_to(REPO / name)
    shutil.copy(REPO / ".importlinter", root / ".importlinter")
    (root / "flowlake").mkdir()
    for entry in (REPO / "flowlake").iterdir():
        if entry.name not in ("base", "__pycache__"):
            (root / "flowlake" / entry.name).symlink_to(entry)
    (root / "flowlake" / "base").mkdir()
    for entry in (REPO / "flowlake" / "base").glob("*.py"):
        (root / "flowlake" / "base" / entry.name).symlink_to(entry)
    (root / "flowlake" / "base" / "upward.py").write_text("from flowlake.jobs import common  # noqa\n")
    res = subprocess.run([*LINT, "--root", str(root)], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "flowlake.base is not allowed to import flowlake.jobs" in res.stdout
    assert "flowlake.base.upward -> flowlake.jobs.common" in res.stdout


def test_every_component_is_registered_once_and_follows_the_contract():
    classes = [components._load(t) for t in components.REGISTRY]
    names = [c.name for c in classes]
    assert len(names) == len(set(names)) and all(names)
    assert all(issubclass(c, Component) and c.start is not Component.start for c in classes)
    # the start order the stack depends on: Kafka before its consumer and producers, the tap
    # before nfcapd (no sampler announcement missed), metrics last (it reads the others)
    assert names.index("kafka") < names.index("ingest") < names.index("shipper") < names.index("nfcapd")
    assert names.index("sampling-tap") < names.index("nfcapd")
    assert names[-1] == "metrics"
    for wanted in ("nfcapd", "sampling-tap", "shipper", "kafka", "ingest", "compactor", "retention",
                   "alerts", "snmp", "query-server", "superset"):
        assert wanted in names


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FLOWLAKE_HOME": str(home), "FLOWLAKE_KAFKA_PORT": "1"}  # nothing listens there
    return subprocess.run([sys.executable, "-m", "flowlake.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_status_and_metrics_list_the_registry_on_a_stopped_stack(tmp_path):
    st = _cli(tmp_path, "status", "--json")
    assert st.returncode == 0, st.stderr
    assert list(json.loads(st.stdout)["components"]) == components.names()

    res = _cli(tmp_path, "metrics")
    assert res.returncode == 0, res.stderr
    families = {f.name: f for f in text_string_to_metric_families(res.stdout)}
    up = {s.labels["component"]: s.value for s in families["flowlake_component_up"].samples}
    assert up == {name: 0.0 for name in components.names()}
    stages = {s.labels["stage"]: s.value for s in families["flowlake_stage_flows"].samples}
    assert stages == {"nfcapd_received": 0, "sfcapd_received": 0, "shipped": 0, "kafka_offsets": 0, "lake": 0,
                      "quarantined_messages": 0}


def test_component_settings_are_typed_and_checked():
    import dataclasses

    import pytest

    from flowlake.base.component import typed_settings
    from flowlake.base.config import Section
    from flowlake.collectors.nfcapd import CollectorSettings

    good = Section("collector", {"bind": "127.0.0.1", "port": 2055, "rotate_seconds": 10,
                                 "socket_buffer": 1 << 23, "spool_warn_bytes": 1 << 30, "spool_compression": "lz4",
                                 "extra": "ignored"})
    s = typed_settings(CollectorSettings, good, "collector")
    assert (s.port, s.bind) == (2055, "127.0.0.1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.port = 1  # type: ignore[misc]
    bad = Section("collector", {**good.as_dict(), "port": "2055"})
    with pytest.raises(TypeError, match=r"config \[collector\] port = '2055': expected int"):
        typed_settings(CollectorSettings, bad, "collector")
    with pytest.raises(TypeError, match="expected int"):
        typed_settings(CollectorSettings, Section("collector", {**good.as_dict(), "port": True}), "collector")


def test_every_component_has_typed_settings_read_from_the_defaults(tmp_path, monkeypatch):
    from flowlake.base import config

    monkeypatch.setenv("FLOWLAKE_HOME", str(tmp_path))
    config.reset()
    try:
        cfg = config.get()
        comps = components.all_components(cfg)
        assert [c.name for c in comps if c.settings_type is None] == []  # every component is typed
        for comp in comps:
            s = comp.settings
            assert type(s) is comp.settings_type
            assert comp.enabled() in (True, False)
    finally:
        config.reset()
