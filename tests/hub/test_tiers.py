"""The unit tier's guard (tests/_tier_guard): what it calls a service, and that a unit test
starting one fails with a message naming it, in the test process and in a Python child."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _tier_guard.flowlake_tier_guard import classify

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("argv", "want"), [
    (["/usr/lib/jvm/java-17/bin/java", "-cp", "libs/*", "kafka.Kafka", "server.properties"], "Kafka broker"),
    (["java", "-cp", "x", "org.apache.spark.deploy.SparkSubmit"], "Spark"),
    ([".venv/lib/python3.11/site-packages/pyspark/bin/spark-submit", "pyspark-shell"], "Spark"),
    (["/usr/bin/nfcapd", "-p", "9995", "-w", "/tmp/x"], "nfcapd"),
    (["snmpd", "-f"], "snmpd"),
    (["dnsmasq", "--port", "5353"], "dnsmasq"),
    (["ip", "netns", "add", "lab0"], "mark it root"),
    (["ip", "-n", "lab0", "link", "show"], "mark it root"),
    (["mount", "-t", "tmpfs", "tmpfs", "/mnt"], "mark it root"),
    (["/bin/sh", "-c", "cd /tmp && exec nfcapd -p 1"], "nfcapd"),
    (["go", "build", "."], "Go build"),
    (["nfdump", "-r", "file", "-o", "pipe"], None),   # a tool over a file, not a service
    (["ip", "netns", "list"], None),                  # reading, as `flowlake status` does
    (["ip", "-j", "link", "show"], None),
    (["openssl", "req", "-x509"], None),
    (["docker-compose", "-f", "docker-compose.yml", "config", "-q"], None),
    ([sys.executable, "-m", "flowlake.cli", "status"], None),  # guarded inside, not refused
])
def test_classify(argv, want):
    got = classify(argv)
    assert (got is None) if want is None else (got is not None and want in got), got


def test_a_unit_test_that_starts_a_service_fails_naming_it(tmp_path):
    """A throw-away suite under this conftest: its unmarked tests that start nfcapd, a JVM in a
    Python child, an SMTP server or ask for the spark fixture fail; a marked one may; a pure one passes."""
    (tmp_path / "test_inner.py").write_text(textwrap.dedent('''
        import subprocess, sys
        import pytest

        def test_starts_nfcapd():
            subprocess.run(["nfcapd", "-V"], capture_output=True)

        def test_child_starts_a_jvm():
            subprocess.run([sys.executable, "-c", "import subprocess; subprocess.run(['java', '-version'])"],
                           capture_output=True)

        def test_requests_spark(spark):
            pass

        def test_starts_smtp():
            from aiosmtpd.controller import Controller
            Controller(object(), hostname="127.0.0.1", port=1).start()

        @pytest.mark.integration
        def test_marked_may_run_a_tool_the_unit_tier_may_not():
            subprocess.run(["nfcapd", "-h"], capture_output=True)

        def test_pure():
            assert 1 + 1 == 2
    '''))
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "FLOWLAKE_TIER_GUARD_ACTIVE": "0"}
    env.pop("FLOWLAKE_TIER_GUARD", None)
    res = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "-p", "conftest",
                          "-p", "no:cacheprovider", "-q", "-rA", "--tb=short", str(tmp_path / "test_inner.py")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    out = res.stdout + res.stderr
    lines = {ln.split(" ")[1].split("::")[-1]: ln for ln in out.splitlines()
             if ln.startswith(("PASSED ", "FAILED ", "ERROR "))}
    assert lines["test_pure"].startswith("PASSED"), out
    assert lines["test_marked_may_run_a_tool_the_unit_tier_may_not"].startswith("PASSED"), out
    for name, what in [("test_starts_nfcapd", "started nfcapd"), ("test_child_starts_a_jvm", "a JVM"),
                       ("test_requests_spark", "requests the `spark` fixture"),
                       ("test_starts_smtp", "an SMTP server")]:
        assert lines[name].startswith(("FAILED", "ERROR")), out
        assert "unit tier test" in out and what in out, (name, out)
    assert out.count("mark it integration") >= 4, out
