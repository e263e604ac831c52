"""Shared fixtures. Real components, started here and stopped at the end:
one Kafka broker and one Spark session per test run, on free ports, under a
temporary FLOWLAKE_HOME so a developer's running stack is never touched."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


from flowlake.base.ports import free_port, private_env  # noqa: E402,F401


@pytest.fixture(scope="session")
def flowlake_home(tmp_path_factory) -> Path:
    """A private FLOWLAKE_HOME with private ports, exported to every child process."""
    home = tmp_path_factory.mktemp("flowlake-home")
    env = private_env(home)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    from flowlake.base import config

    config.reset()
    yield home
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    config.reset()


@pytest.fixture(scope="session")
def cfg(flowlake_home):
    from flowlake.base import config

    return config.get()


@pytest.fixture(scope="session")
def kafka(cfg):
    """A real single-node KRaft broker with the project's topics."""
    from flowlake.collectors import kafka as kafka_service

    kafka_service.start(cfg)
    yield cfg.kafka_bootstrap
    kafka_service.stop(cfg)


@pytest.fixture(scope="session")
def spark(cfg):
    """The one Spark session of the run (start-up costs 15-20 s on 2 cores)."""
    from flowlake.base import spark as spark_factory

    session = spark_factory.session("flowlake-tests", master="local[2]", cfg=cfg,
                                    extra={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


@pytest.fixture
def nfdump_bin():
    for tool in ("nfcapd", "nfdump"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: run `make setup`")
    return shutil.which("nfdump")


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a command, failing the test with its output when it fails."""
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {res.returncode}:\n{res.stdout}\n{res.stderr}")
    return res


# Figures a test reports for people, not as assertions (e.g. dashboard render times):
# printed, and repeated in the run's summary, where they show without -s.
FIGURES: list[str] = []


@pytest.fixture
def figure():
    def add(line: str) -> None:
        print("\n" + line)
        FIGURES.append(line)
    return add


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("figures (reported, not asserted)")
        for line in FIGURES:
            terminalreporter.write_line(line)
