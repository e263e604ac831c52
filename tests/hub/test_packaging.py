"""The production topology and the two-command promise, checked without an engine."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SECRETS = {"SUPERSET_DB_PASSWORD": "x1", "SUPERSET_SECRET_KEY": "x2", "SUPERSET_ADMIN_PASSWORD": "x3"}


def compose(*args, env=None):
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose (Debian package) is not installed: run `make setup`")
    return subprocess.run([exe, "-f", str(REPO / "docker-compose.yml"), *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_compose_is_valid_and_has_the_topology():
    res = compose("config", "-q", env=SECRETS)
    assert res.returncode == 0, res.stderr
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    for name in ("kafka", "collector", "spark-master", "spark-worker-1", "spark-worker-2", "ingest", "superset",
                 "postgres", "query-server"):
        assert name in services, name
    assert services["query-server"]["command"] == ["flowlake", "query-server"]
    assert services["collector"]["build"]["dockerfile"] == "collectors/Dockerfile"
    assert (REPO / "collectors" / "Dockerfile").exists()
    assert "spark://spark-master:7077" in services["ingest"]["command"]
    # the cluster runs Spark's own Master/Worker through the spark-class the pyspark wheel has
    from flowlake.base.spark_cluster import MASTER_CLASS, WORKER_CLASS, spark_home

    assert (spark_home() / "bin" / services["spark-master"]["command"][0]).exists()
    assert services["spark-master"]["command"][1] == MASTER_CLASS
    for worker in ("spark-worker-1", "spark-worker-2"):
        cmd = services[worker]["command"]
        assert cmd[1] == WORKER_CLASS and cmd[-1] == "spark://spark-master:7077", cmd


def test_compose_has_no_default_credentials():
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    res = subprocess.run([shutil.which("docker-compose"), "-f", str(REPO / "docker-compose.yml"), "config", "-q"],
                         capture_output=True, text=True, env=env)
    assert res.returncode != 0
    assert "SUPERSET" in res.stderr


def test_readme_names_exactly_the_two_commands():
    readme = (REPO / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_schema_views_are_generated_from_one_declaration():
    from flowlake.schemas import FLOW

    avro_names = [f["name"] for f in FLOW.avro_schema()["fields"]]
    spark_names = [f.name for f in FLOW.spark_schema().fields]
    doc_rows = [line.split("`")[1] for line in FLOW.markdown().splitlines() if line.startswith("| `")]
    assert avro_names == spark_names == doc_rows == FLOW.names
    for name in ("time_start", "time_end", "exporter", "input_if", "output_if", "src_addr", "dst_addr",
                 "src_port", "dst_port", "proto", "tcp_flags", "tos", "packets", "bytes",
                 "sampling_rate", "src_as", "dst_as", "source_file"):
        assert name in FLOW.names


@pytest.mark.integration
def test_spark_schema_agrees_with_the_ddl_view(spark):
    from pyspark.sql.types import StructType

    from flowlake.schemas import registry

    for name, rec in registry().items():
        ddl = StructType.fromDDL(rec.spark_ddl().replace(" NOT NULL", ""))
        assert rec.spark_schema().simpleString() == ddl.simpleString(), name
        assert [f.nullable for f in rec.spark_schema().fields] == [f.nullable for f in rec.fields], name


def test_a_command_whose_module_is_missing_says_so(monkeypatch):
    """The CLI imports each command's module on use; one that cannot be imported is named
    with the reason, not a traceback."""
    from click.testing import CliRunner

    from flowlake import cli

    monkeypatch.setitem(cli.COMMANDS, "ghost", ("flowlake.no_such_module:ghost", "a missing command"))
    res = CliRunner().invoke(cli.main, ["ghost"])
    assert res.exit_code == 1, res.output
    assert "'ghost' is not available in this install: No module named 'flowlake.no_such_module'" in res.output


def test_images_build_their_go_programs_and_send_only_source():
    """Each image that runs a Go program builds it in a Go stage (the runtime images have
    no Go), and the build context leaves out the local stack: virtualenvs, jars, binaries."""
    for dockerfile, program in (("collectors/Dockerfile", "collectors/shipper"),
                                ("pipelines/Dockerfile", "jobs/toptalkers")):
        text = (REPO / dockerfile).read_text()
        assert "FROM golang:" in text and f"COPY {program}/*.go" in text, dockerfile
    ignored = (REPO / ".dockerignore").read_text().split()
    for path in (".venv/", ".venv-superset/", ".jars/", "var/", "**/bin/"):
        assert path in ignored, path


def test_a_shipped_go_binary_runs_without_go(tmp_path, monkeypatch):
    """Inside the jobs image: the kernel's binary is there, Go is not. The binary is used
    (even when its sources look newer); with no binary either, the error says what to do."""
    import click

    from flowlake.base import gobuild

    def no_go():
        raise click.ClickException("Go is not installed (need /usr/local/go/bin/go or `go` on PATH): run `make setup`")

    monkeypatch.setattr(gobuild, "go_binary", no_go)
    program = gobuild.GoProgram(tmp_path, "kernel")
    program.binary.parent.mkdir()
    program.binary.write_text("#!/bin/sh\n")
    (tmp_path / "main.go").write_text("package main\n")
    os.utime(program.binary, (1, 1))  # built long before its sources changed
    assert program.needs_build()
    assert program.build() == program.binary
    program.binary.unlink()
    with pytest.raises(click.ClickException, match="Go is not installed"):
        program.build()
