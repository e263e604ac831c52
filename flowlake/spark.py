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

from . import config as _config

log = logging.getLogger(__name__)
JARS_DIR = _config.REPO_ROOT / ".jars" / "spark"
LOG4J = Path(__file__).resolve().parent / "log4j2.properties"  # the driver's log: warnings, less start-up noise


def connector_jars() -> list[str]:
    jars = sorted(glob.glob(str(JARS_DIR / "*.jar")))
    if not jars:
        log.warning("no connector jars in %s: run `make setup` (Kafka/Avro sources unavailable)", JARS_DIR)
    return jars


def session(app: str = "flowlake", master: str | None = None, cfg=None, extra: dict | None = None):
    """Get or create the SparkSession. One per process: tests share one for the whole run."""
    from pyspark.sql import SparkSession

    cfg = cfg or _config.get()
    master = master or os.environ.get("FLOWLAKE_SPARK_MASTER") or cfg.spark.master
    # PySpark picks the Python of its workers from PYSPARK_PYTHON when the context
    # starts (plain `python3` otherwise, which lacks numpy): the venv's interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    tmp = cfg.path("tmp", "spark")
    tmp.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.appName(app)
        .master(master)
        .config("spark.jars", ",".join(connector_jars()))
        .config("spark.driver.memory", cfg.spark.driver_memory)
        .config("spark.sql.shuffle.partitions", str(cfg.spark.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.compression.codec", "zstd")
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", str(tmp))
        .config("spark.driver.extraJavaOptions", f"-Duser.timezone=UTC -Dlog4j2.configurationFile={LOG4J}")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    )
    if master.startswith("local"):
        # Known before the JVM starts, unlike spark.driver.host: no "hostname resolves to a
        # loopback address" warning at every start.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    # The driver JVM starts in our scratch folder: Spark 4.0 creates its session artifact
    # folders under ./artifacts of the JVM's working directory (SPARK-52396), which would
    # litter whatever folder the user ran flowlake from. Every path we give Spark is absolute.
    with contextlib.chdir(tmp):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def lake_path(*parts: str, cfg=None) -> str:
    cfg = cfg or _config.get()
    return str(Path(cfg.lake, *parts))
