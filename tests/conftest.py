"""Shared fixtures. Real components, started here and stopped at the end:
one Kafka broker and one Spark session per test run, on free ports, under a
temporary FLOWLAKE_HOME so a developer's running stack is never touched.
The service fixtures are lazy: only tests that request them start them.

Tiers: a test without an `integration`, `e2e`, `browser` or `root` marker is marked
`unit`, and a guard fails it if it starts a service (Spark, Kafka, nfcapd, ...): see
tests/_tier_guard/flowlake_tier_guard.py. `make check` runs `-m "unit and not slow"`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
# Tests live by stage (tests/base, collectors, pipelines, jobs, hub); the shared helpers
# (pcapgen, flow_rows, nfcapd_capture, services/, ...) sit in tests/ itself, and some test
# modules reuse another's fixtures (`from test_shipper import collect`): every folder is on
# the path, whatever order pytest collects them in.
for _folder in (TESTS, *(TESTS / stage for stage in ("base", "collectors", "pipelines", "jobs", "hub"))):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


from _tier_guard import flowlake_tier_guard as tier_guard  # noqa: E402
from flowlake.base.ports import free_port, private_env  # noqa: E402,F401

# ---- tiers -------------------------------------------------------------------------------

_GUARD: tier_guard.Guard | None = None
_CHILD_LOG_OFFSET = 0


def pytest_configure(config):
    global _GUARD
    if os.environ.get(tier_guard.ENV_ACTIVE) == "0":  # a guarded test's own inner pytest
        del os.environ[tier_guard.ENV_ACTIVE]      # (tests/hub/test_tiers.py): guard its children
    if not tier_guard.enabled():
        return
    log_dir = Path(os.environ.get("TMPDIR", "/tmp"))
    fd, name = tempfile.mkstemp(prefix="flowlake-tier-guard-", suffix=".log", dir=log_dir)
    os.close(fd)
    _GUARD = tier_guard.Guard(Path(name), on_violation=lambda msg: pytest.fail(msg, pytrace=False))
    _GUARD.install()


def pytest_unconfigure(config):
    if _GUARD is not None and _GUARD.child_log is not None:
        _GUARD.child_log.unlink(missing_ok=True)


@pytest.hookimpl(tryfirst=True)  # before xdist's loadgroup reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Unmarked tests are unit tests; e2e, browser and root tests are integration tests too
    (so `-m "not integration"` leaves them all out). Markers come from the module or the
    function, never from the folder: moving a file keeps its tier."""
    for item in items:
        names = {m.name for m in item.iter_markers()}
        if not names & set(tier_guard.SERVICE_MARKERS):
            item.add_marker(pytest.mark.unit)
        elif "integration" not in names:
            item.add_marker(pytest.mark.integration)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _parallel_groups(items)


# The parallel run (make test: pytest-xdist, --dist loadgroup) hands whole groups to its
# workers in collection order: a group is a module, except modules that share one service
# started once per process and read what the modules before them left there, in file order.
SHARED = {
    "superset": ("tests/hub/test_superset.py", "tests/hub/test_superset_browser.py",
                 "tests/hub/test_superset_delta.py", "tests/hub/test_superset_swap.py"),
}
# A group's weight: the seconds its modules took in a whole run (tests/durations.json,
# scripts/test_durations.py writes it from make test's JUnit report); a module not listed
# there (new) is estimated from its tests' markers (slow: over ~30 s alone). xdist runs
# with --no-loadscope-reorder (Makefile): its default hands out the groups with the most
# tests first, which put few-but-long modules (test_faults) last, as the run's tail.
_WEIGHT = {"slow": 30, "root": 10, "e2e": 10, "browser": 10, "integration": 3}
_DURATIONS = Path(__file__).with_name("durations.json")


def _parallel_groups(items) -> None:
    module_group = {m: g for g, modules in SHARED.items() for m in modules}
    measured = json.loads(_DURATIONS.read_text()) if _DURATIONS.is_file() else {}
    weight: dict[str, float] = {}
    first: dict[str, int] = {}
    counted: set[str] = set()
    groups = []
    for i, item in enumerate(items):
        module = item.nodeid.split("::", 1)[0]
        group = module_group.get(module, module)
        groups.append(group)
        if module in measured:
            estimate = 0.0 if module in counted else measured[module]  # a module's figure, once
            counted.add(module)
        else:
            names = {m.name for m in item.iter_markers()}
            estimate = max((_WEIGHT.get(n, 0) for n in names), default=0.1)
        weight[group] = weight.get(group, 0.0) + estimate
        first.setdefault(group, i)
        item.add_marker(pytest.mark.xdist_group(group))
    # the same order in every worker (xdist checks that the collections agree); a shared
    # group's modules keep their file order
    order = sorted(range(len(items)), key=lambda i: (-weight[groups[i]], first[groups[i]], i))
    items[:] = [items[i] for i in order]


def _is_unit(item) -> bool:
    return item.get_closest_marker("unit") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("root") is not None and os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces, tc, mounts): run it as root, as CI does, "
                    "or leave it out with -m 'not root'", pytrace=False)
    if _GUARD is None or not _is_unit(item):
        return
    wanted = sorted(set(item.fixturenames) & set(tier_guard.SERVICE_FIXTURES))
    if wanted:
        pytest.fail(tier_guard.message(tier_guard.SERVICE_FIXTURES[wanted[0]],
                                       f" (it requests the `{wanted[0]}` fixture)"), pytrace=False)


def _guarded(item):
    """Around a unit test's set-up and call: the guard watches what it starts."""
    global _CHILD_LOG_OFFSET
    if _GUARD is None or not _is_unit(item):
        yield
        return
    outer = not _GUARD.active
    if outer:
        _, _CHILD_LOG_OFFSET = _GUARD.child_violations(_CHILD_LOG_OFFSET)  # earlier leftovers
        _GUARD.active = True
    try:
        yield
    finally:
        if outer:
            _GUARD.active = False
    if not outer:
        return
    found, _CHILD_LOG_OFFSET = _GUARD.child_violations(_CHILD_LOG_OFFSET)
    if found:
        item.stash[_CHILD_FOUND] = item.stash.get(_CHILD_FOUND, []) + found


_CHILD_FOUND = pytest.StashKey[list]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _guarded(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    # Fixtures are set up for the unit test that asks for them first: watch them too.
    node = getattr(request, "_pyfuncitem", None)
    if node is None:
        yield
        return
    yield from _guarded(node)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    found = item.stash.get(_CHILD_FOUND, None)
    if found and call.when in ("setup", "call") and not report.failed:
        item.stash[_CHILD_FOUND] = []
        report.outcome = "failed"
        report.longrepr = "\n".join(dict.fromkeys(found))


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

    # 2g: one JVM serves every module of the run (the stacks' ingest keeps private_env's 1g)
    session = spark_factory.session("flowlake-tests", master="local[2]", cfg=cfg,
                                    extra={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"})
    yield session
    session.stop()


@pytest.fixture(autouse=True, scope="module")
def _spark_cache_per_module():
    """A module's cached DataFrames go with the module: the run's one Spark JVM otherwise
    carries every earlier module's cache (an OutOfMemoryError in a later module's job)."""
    yield
    if "pyspark" in sys.modules:  # never start Spark for this
        from pyspark.sql import SparkSession  # noqa: PLC0415  (start-up: pyspark, only when loaded)

        active = SparkSession.getActiveSession()
        if active is not None:
            active.catalog.clearCache()


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
def figure(request):
    def add(line: str) -> None:
        print("\n" + line)
        # through the test's report: a parallel run's workers send it to the controller
        request.node.user_properties.append(("figure", line))
    return add


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        FIGURES.extend(v for k, v in report.user_properties if k == "figure")


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("figures (reported, not asserted)")
        for line in FIGURES:
            terminalreporter.write_line(line)
