"""The one Spark session factory: local vs cluster, connector jars, lake paths.

Connector jars (Kafka source, Avro) are fetched by `make setup` with Maven into
.jars/spark and passed as spark.jars: spark.jars.packages would try an unreachable
spark-packages host (see STACK-NOTES).
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import sys
from pathlib import Path

from flowlake.base import config as _config
from flowlake.base import spark_cluster

log = logging.getLogger(__name__)
JARS_DIR = _config.REPO_ROOT / ".jars" / "spark"
LOG4J = Path(__file__).resolve().parent / "log4j2.properties"  # the driver's log: warnings, less start-up noise


def connector_jars() -> list[str]:
    jars = sorted(glob.glob(str(JARS_DIR / "*.jar")))
    if not jars:
        log.warning("no connector jars in %s: run `make setup` (Kafka/Avro sources unavailable)", JARS_DIR)
    return jars


SUBMITTED = "FLOWLAKE_IN_SPARK_SUBMIT"  # set in the driver spark-submit starts: do not submit again
SUBMIT_MAIN = Path(__file__).resolve().parents[1] / "spark_submit_main.py"  # the hub's entry, run by spark-submit


def resolve_master(master: str | None = None, cfg=None) -> str:
    """The master URL: the argument, else [spark] master; "cluster" is this home's
    standalone cluster (`flowlake cluster up`)."""
    cfg = cfg or _config.get()
    master = master or os.environ.get("FLOWLAKE_SPARK_MASTER") or cfg.spark.master
    if master == "cluster":
        return spark_cluster.master_url(cfg)
    return master


def is_cluster(master: str) -> bool:
    """True for a standalone cluster (spark://...): the application goes through spark-submit."""
    return master.startswith("spark://")


def spark_conf(app: str, master: str, cfg, extra: dict | None = None, java_options: str = "",
               delta: bool = False) -> dict[str, str]:
    """Every setting of a flowlake application, in one place for both ways of starting it:
    SparkSession.builder (local mode) and spark-submit --conf (a cluster). java_options:
    added to the driver's and executors' JVM options (the ingest's [spark] ingest_java_options).
    delta: also Delta Lake's extension, catalog and jars (flowlake/base/delta.py; off by
    default until the lake is a Delta table, issue 38)."""
    tmp = cfg.path("tmp", "spark")
    conf = {
        "spark.app.name": app,
        "spark.master": master,
        "spark.jars": ",".join(connector_jars()),
        "spark.driver.memory": cfg.spark.driver_memory,
        "spark.sql.shuffle.partitions": str(cfg.spark.shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.compression.codec": "zstd",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.sql.adaptive.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.local.dir": str(tmp),
        "spark.driver.extraJavaOptions": f"-Duser.timezone=UTC -Dlog4j2.configurationFile={LOG4J}",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }
    host = _loopback_host(master)
    if host:
        # Known before the JVM starts, unlike spark.driver.host: no "hostname resolves to a
        # loopback address" warning at every start; executors on a loopback cluster reach it.
        conf["spark.driver.bindAddress"] = host
        conf["spark.driver.host"] = host
    if is_cluster(master):
        c = cfg.cluster
        conf.update({
            "spark.pyspark.driver.python": conf["spark.pyspark.python"],
            "spark.executor.memory": c.executor_memory,
            # executors log warnings only, and their stderr rolls (a streaming ingest runs for months)
            "spark.executor.extraJavaOptions": f"-Duser.timezone=UTC -Dlog4j2.configurationFile={LOG4J}",
            "spark.executor.logs.rolling.strategy": "size",
            "spark.executor.logs.rolling.maxSize": str(10 << 20),
            "spark.executor.logs.rolling.maxRetainedFiles": "5",
        })
    if java_options:
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            conf[key] += " " + java_options
    if delta:
        from flowlake.base import delta as _delta  # noqa: PLC0415  (only sessions asked for Delta)

        settings = _delta.spark_conf()
        conf["spark.jars"] = ",".join(j for j in (conf["spark.jars"], settings.pop("delta.jars")) if j)
        conf.update(settings)
    conf.update(extra or {})
    return conf


def _loopback_host(master: str) -> str | None:
    if master.startswith("local"):
        return "127.0.0.1"
    host = master.removeprefix("spark://").rsplit(":", 1)[0]
    return host if host == "localhost" or host.startswith("127.") else None


def session(app: str = "flowlake", master: str | None = None, cfg=None, extra: dict | None = None,
            java_options: str = "", delta: bool = False):
    """Get or create the SparkSession. One per process: tests share one for the whole run.
    Inside spark-submit (a cluster) the JVM already runs with the same settings.
    delta: a session that reads and writes Delta tables (see spark_conf); the process's
    first session decides (Spark's extensions and jars are fixed when the JVM starts)."""
    from pyspark.sql import SparkSession  # noqa: PLC0415  (start-up: pyspark)

    cfg = cfg or _config.get()
    master = resolve_master(master, cfg)
    # PySpark picks the Python of its workers from PYSPARK_PYTHON when the context
    # starts (plain `python3` otherwise, which lacks numpy): the venv's interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    tmp = cfg.path("tmp", "spark")
    tmp.mkdir(parents=True, exist_ok=True)
    conf = spark_conf(app, master, cfg, extra, java_options, delta=delta)
    if "spark.driver.bindAddress" in conf:
        os.environ.setdefault("SPARK_LOCAL_IP", conf["spark.driver.bindAddress"])
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    # The driver JVM starts in our scratch folder: Spark 4.0 creates its session artifact
    # folders under ./artifacts of the JVM's working directory (SPARK-52396), which would
    # litter whatever folder the user ran flowlake from. Every path we give Spark is absolute.
    with contextlib.chdir(tmp):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def submit_argv(app: str, master: str, cfg, args: list[str], extra: dict | None = None,
                java_options: str = "") -> list[str]:
    """spark-submit running `flowlake ARGS...` as a client-mode application on `master`."""
    argv = [str(spark_cluster.spark_home() / "bin" / "spark-submit"), "--master", master, "--name", app]
    for key, value in spark_conf(app, master, cfg, extra, java_options).items():
        if key not in ("spark.master", "spark.app.name"):
            argv += ["--conf", f"{key}={value}"]
    return argv + [str(SUBMIT_MAIN), *args]


def submit_env(cfg, master: str) -> dict[str, str]:
    env = {"SPARK_HOME": str(spark_cluster.spark_home()), SUBMITTED: "1",
           "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
           "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
           # the driver runs in tmp/spark (SPARK-52396): a ./flowlake.toml must still be found
           "FLOWLAKE_HOME": str(cfg.home_dir)}
    if cfg.source is not None:
        env["FLOWLAKE_CONFIG"] = str(cfg.source)
    host = _loopback_host(master)
    if host:
        env["SPARK_LOCAL_IP"] = host
    return env


def submit_if_cluster(app: str, master: str | None = None, cfg=None, batch: bool = True,
                      cores_max: int = 0, java_options: str = "") -> None:
    """Called first by a command that needs Spark (`flowlake ingest`, `flowlake jobs run`):
    on a standalone cluster, replace this process by spark-submit running the same command
    line (its driver then takes the other branch); in local mode, return and go on.

    batch: a batch application writes an event log (kept: [cluster] event_logs); a
    streaming one does not (it would grow forever). cores_max: spark.cores.max (0: all)."""
    cfg = cfg or _config.get()
    master = resolve_master(master, cfg)
    if not is_cluster(master) or os.environ.get(SUBMITTED):
        return
    extra = {}
    if cores_max > 0:
        extra["spark.cores.max"] = str(cores_max)
    if batch and cfg.cluster.event_logs > 0:
        events = cfg.path("cluster", "events")
        events.mkdir(parents=True, exist_ok=True)
        spark_cluster.prune_event_logs(cfg)
        extra.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
                      "spark.eventLog.compress": "true", "spark.eventLog.compression.codec": "zstd"})
    argv = submit_argv(app, master, cfg, sys.argv[1:], extra, java_options)
    tmp = cfg.path("tmp", "spark")
    tmp.mkdir(parents=True, exist_ok=True)
    log.info("submitting to %s: %s", master, " ".join(argv))
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(tmp)
    os.execve(argv[0], argv, {**os.environ, **submit_env(cfg, master)})


def lake_path(*parts: str, cfg=None) -> str:
    cfg = cfg or _config.get()
    return str(Path(cfg.lake, *parts))
