"""A real Spark standalone cluster (master + 2 workers, separate JVMs started by
`flowlake cluster up`) runs the streaming ingest and a daily job through spark-submit;
the lake and the report equal, row for row, what local mode (this run's Spark session)
writes from the same Kafka topic. Flows come from a real nfcapd file (softflowd), shipped
by the Go shipper; nfdump's own count of that file is the independent reference.

The cluster's ingest runs while local mode does the same work in this process: the
cluster's applications are separate JVMs (spark-submit's driver, one executor per worker)."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared helpers
import lake_sql  # noqa: E402
from conftest import run  # noqa: E402
from test_jobs import capture, day_traffic  # noqa: E402  (the nfdump cross-check's real nfcapd day)

REPO = Path(__file__).resolve().parents[2]
FLOWLAKE = str(REPO / ".venv" / "bin" / "flowlake")
DAY = dt.date.today() - dt.timedelta(days=2)  # recent: the shipper quarantines flows far from their arrival
JOB = "protocol_mix"


def home_env(home: Path) -> dict[str, str]:
    """A home of its own on the session's broker: private topics and ledger, a small
    cluster on free ports (two 1-core workers, 512 MB executors)."""
    return {**os.environ, "FLOWLAKE_HOME": str(home),
            "FLOWLAKE_KAFKA_FLOWS_TOPIC": "flows.test-cluster", "FLOWLAKE_KAFKA_ACTIVE_TOPIC": "active.test-cluster",
            "FLOWLAKE_KAFKA_LEDGER_TOPIC": "ledger.test-cluster",
            "FLOWLAKE_CLUSTER_PORT": "0", "FLOWLAKE_CLUSTER_WEBUI_PORT": "0", "FLOWLAKE_CLUSTER_WORKERS": "2",
            "FLOWLAKE_CLUSTER_WORKER_MEMORY": "512m", "FLOWLAKE_CLUSTER_EXECUTOR_MEMORY": "512m",
            "FLOWLAKE_CLUSTER_DAEMON_MEMORY": "192m", "FLOWLAKE_CLUSTER_INGEST_CORES": "0",
            "FLOWLAKE_SPARK_DRIVER_MEMORY": "768m", "FLOWLAKE_SPARK_SHUFFLE_PARTITIONS": "2"}


@pytest.fixture(scope="module")
def homes(kafka, tmp_path_factory):
    """(local cfg, cluster cfg, cluster env, nfcapd flow count); the cluster starts in the
    background while the flows are captured and shipped, and stops at the end."""
    from flowlake.base import config, spark_cluster
    from flowlake.collectors import kafka as kafka_service

    local_env = home_env(tmp_path_factory.mktemp("cluster-local-home"))
    cluster_env = home_env(tmp_path_factory.mktemp("cluster-home"))
    local_cfg, cluster_cfg = config.load(env=local_env), config.load(env=cluster_env)
    started: dict = {}

    def start():
        try:
            started["info"] = spark_cluster.up(cluster_cfg)
        except Exception as exc:  # reported by the test below
            started["error"] = exc

    starter = threading.Thread(target=start)
    starter.start()
    try:
        kafka_service.ensure_topics(local_cfg)
        nf = capture(tmp_path_factory.mktemp("cluster-nfcapd"), day_traffic(DAY, seed=5))
        info = run(["nfdump", "-I", "-r", str(nf)]).stdout
        flows = int(next(line.split(":")[1] for line in info.splitlines() if line.startswith("Flows:")))
        run([FLOWLAKE, "ship", str(nf)], env=cluster_env)
        starter.join()
        if "error" in started:
            raise started["error"]
        yield local_cfg, cluster_cfg, cluster_env, flows
    finally:
        starter.join()
        spark_cluster.down(cluster_cfg)
        for name in ["spark-master"] + [f"spark-worker-{i}" for i in (1, 2)]:
            assert not Managed_running(cluster_cfg, name), f"{name} still runs after `down`"


def Managed_running(cfg, name: str) -> bool:
    from flowlake.base.process import Managed

    return Managed(name, cfg.path("run"), cfg.path("log")).running()


def flowlake(*args: str, env: dict) -> subprocess.CompletedProcess:
    return run([FLOWLAKE, *args], env=env, timeout=600)


def lake_rows(lake: Path) -> list[tuple]:
    con = duckdb.connect()
    return con.execute(f"select * from {lake_sql.source(lake)} "
                       "order by all").fetchall()


def report_rows(lake: Path, table: str) -> list[tuple]:
    """The report's rows, sortable (nulls first), shares to 12 digits (engines add in other orders)."""
    rows = pq.read_table(lake / "reports" / table / f"date={DAY}").to_pylist()
    assert rows, f"{table} for {DAY} is empty"
    cols = sorted(rows[0])
    return sorted(tuple((r[c] is not None, round(r[c], 12) if isinstance(r[c], float) else r[c]) for c in cols)
                  for r in rows)


@pytest.mark.integration
def test_ingest_and_job_on_cluster_equal_local_mode(homes, spark):
    from flowlake.base import spark_cluster
    from flowlake.jobs import runner
    from flowlake.pipelines import ingest

    local_cfg, cluster_cfg, env, flows = homes
    st = json.loads(flowlake("cluster", "status", "--json", env=env).stdout)
    assert st["alive_workers"] == 2 and st["cores"] == 2, st
    assert all(p["state"] == "running" for p in st["processes"].values()), st["processes"]
    master_url = st["master"]
    assert master_url.startswith("spark://127.0.0.1:")

    # The cluster: both commands go through spark-submit (master "cluster" = this home's).
    cluster_ingest = subprocess.Popen([FLOWLAKE, "-v", "ingest", "--once", "--master", "cluster"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Meanwhile local mode: in this process, on the test session (local[2]).
    ingest.run(local_cfg, once=True)
    outcomes = runner.run_jobs(spark, local_cfg, DAY, runner.order(runner.discover(), [JOB]))
    assert [o.status for o in outcomes] == ["ok"], outcomes
    out, err = cluster_ingest.communicate(timeout=600)
    assert cluster_ingest.returncode == 0, f"cluster ingest exited {cluster_ingest.returncode}:\n{out}\n{err}"
    assert f"submitting to {master_url}" in err
    res = flowlake("jobs", "run", "--date", DAY.isoformat(), "--job", JOB, "--master", "cluster", "--no-warm", env=env)
    assert JOB in res.stdout and "ok" in res.stdout, res.stdout

    local, remote = lake_rows(local_cfg.lake), lake_rows(cluster_cfg.lake)
    assert len(local) == flows, f"local lake holds {len(local)} flows, nfdump counts {flows} in the nfcapd file"
    assert remote == local
    assert ingest.counts(cluster_cfg)["flows"] == {"rows": flows, "quarantined": 0}
    assert report_rows(cluster_cfg.lake, JOB) == report_rows(local_cfg.lake, JOB)

    # Both applications ran on the cluster, their executors on both workers.
    info = spark_cluster.master_json(cluster_cfg)
    apps = {a["name"]: a for a in info["completedapps"]}
    assert set(apps) == {"flowlake-ingest", f"flowlake-jobs-{DAY}"}, apps
    assert all(a["state"] == "FINISHED" and a["cores"] == 2 for a in apps.values()), apps
    for i in (1, 2):
        ran = {p.name for p in cluster_cfg.path("cluster", "work", f"worker-{i}").iterdir()}
        assert {a["id"] for a in apps.values()} <= ran, f"worker-{i} ran executors of {ran}"
    # The batch applications left event logs (the bench reads them); the bound holds.
    assert len(spark_cluster.event_logs(cluster_cfg)) == 2
    status = json.loads(flowlake("status", "--json", env=env).stdout)
    assert status["cluster"]["completed_apps"] == 2 and status["cluster"]["disk"]["event_logs"] == 2


# ---- without a cluster: how an application is submitted, the bounds, bad settings ----------------
def test_submit_carries_the_session_settings(tmp_path):
    from flowlake.base import config
    from flowlake.base import spark as spark_factory

    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_CLUSTER_PORT": "7177",
                           "FLOWLAKE_CLUSTER_EXECUTOR_MEMORY": "3g"})
    assert spark_factory.resolve_master("cluster", cfg) == "spark://127.0.0.1:7177"
    state = tmp_path / "cluster" / "cluster.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"port": 40123, "webui_port": 40124}))  # `up` chose a free port
    master = spark_factory.resolve_master("cluster", cfg)
    assert master == "spark://127.0.0.1:40123" and spark_factory.is_cluster(master)
    assert not spark_factory.is_cluster(spark_factory.resolve_master("local[2]", cfg))

    argv = spark_factory.submit_argv("flowlake-jobs-x", master, cfg, ["jobs", "run", "--date", "2026-11-20"])
    assert Path(argv[0]).name == "spark-submit" and Path(argv[0]).exists()
    assert argv[argv.index("--master") + 1] == master and argv[-4:] == ["jobs", "run", "--date", "2026-11-20"]
    assert argv[-5] == str(spark_factory.SUBMIT_MAIN) and spark_factory.SUBMIT_MAIN.exists()
    confs = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf")
    local = spark_factory.spark_conf("x", "local[2]", cfg)
    for key in ("spark.jars", "spark.sql.session.timeZone", "spark.sql.shuffle.partitions", "spark.driver.memory"):
        assert confs[key] == local[key], key  # one set of settings, both ways of starting
    assert confs["spark.executor.memory"] == "3g" and "spark.executor.memory" not in local
    assert confs["spark.driver.host"] == "127.0.0.1"  # executors on a loopback cluster reach the driver
    assert confs["spark.executor.logs.rolling.strategy"] == "size"  # a streaming ingest's executor logs roll
    remote = spark_factory.spark_conf("x", "spark://10.1.2.3:7077", cfg)
    assert "spark.driver.host" not in remote  # a real cluster reaches the driver by its host name


def test_event_logs_keep_the_newest(tmp_path):
    from flowlake.base import config, spark_cluster

    cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_CLUSTER_EVENT_LOGS": "3"})
    events = tmp_path / "cluster" / "events"
    for i in range(6):
        d = events / f"eventlog_v2_app-{i}"
        d.mkdir(parents=True)
        (d / f"events_1_app-{i}.zstd").write_bytes(b"x")
        os.utime(d, (1000 + i, 1000 + i))
    (events / "eventlog_v2_app-0" / "appstatus_app-0.inprogress").write_bytes(b"")  # still running: kept
    spark_cluster.prune_event_logs(cfg)
    assert sorted(p.name for p in spark_cluster.event_logs(cfg)) == [
        "eventlog_v2_app-0", "eventlog_v2_app-4", "eventlog_v2_app-5"]


def test_cluster_up_names_a_busy_port(tmp_path):
    import socket

    from flowlake.base import config, spark_cluster

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = config.load(env={**os.environ, "FLOWLAKE_HOME": str(tmp_path), "FLOWLAKE_CLUSTER_PORT": str(port)})
        with pytest.raises(RuntimeError) as err:
            spark_cluster.up(cfg)
    assert f"127.0.0.1:{port} is in use" in str(err.value) and "FLOWLAKE_CLUSTER_PORT" in str(err.value)
    assert spark_cluster.status(cfg) == {}  # nothing was started
