"""A Spark standalone cluster on this machine: one master and N workers, each its own
JVM started from the installed Spark (pyspark's wheel: bin/spark-class), under
$FLOWLAKE_HOME like every other component.

pyspark 4.0.0's wheel ships bin/spark-class and sbin/spark-daemon.sh but not
sbin/start-master.sh or start-worker.sh; those scripts only wrap
`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker` in spark-daemon.sh.
We run the same classes in the foreground under our own supervision (pid files in run/,
logs in log/), as for Kafka and nfcapd.

  $FLOWLAKE_HOME/cluster/cluster.json    the ports in use (chosen at `up`)
  $FLOWLAKE_HOME/cluster/work/worker-N/  each worker's application folders (executor logs)
  $FLOWLAKE_HOME/cluster/events/         event logs of batch applications (bench/jobs.py reads them)
  $FLOWLAKE_HOME/tmp/spark-worker-N/     executors' shuffle and spill files
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import urllib.request
from pathlib import Path

from flowlake.base import config as _config

from .ports import free_port
from .process import Managed, port_open, wait_until

log = logging.getLogger(__name__)
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
LOG4J = Path(__file__).resolve().parent / "spark_daemon_log4j2.properties"


def spark_home() -> Path:
    """The installed Spark: pyspark's own folder (it holds bin/ and jars/)."""
    from pyspark.find_spark_home import _find_spark_home  # noqa: PLC0415  (start-up: pyspark)

    return Path(os.environ.get("SPARK_HOME") or _find_spark_home())


def state_file(cfg) -> Path:
    return cfg.path("cluster", "cluster.json")


def read_state(cfg) -> dict:
    try:
        return json.loads(state_file(cfg).read_text())
    except (OSError, ValueError):
        return {}


def master_url(cfg=None) -> str:
    """spark://host:port of this home's cluster (the recorded port once `up` chose one)."""
    cfg = cfg or _config.get()
    port = read_state(cfg).get("port") or cfg.cluster.port
    return f"spark://{cfg.cluster.host}:{port}"


def master(cfg) -> Managed:
    return Managed("spark-master", cfg.path("run"), cfg.path("log"))


def worker(cfg, i: int) -> Managed:
    return Managed(f"spark-worker-{i}", cfg.path("run"), cfg.path("log"))


def _workers_started(cfg) -> list[int]:
    """Worker numbers with a pid file (running or not): what `down` and `status` look at."""
    run = cfg.path("run")
    nums = [int(p.stem.rsplit("-", 1)[1]) for p in run.glob("spark-worker-*.pid")] if run.exists() else []
    return sorted(set(nums) | set(range(1, len(read_state(cfg).get("workers", [])) + 1)))


def daemon_env(cfg) -> dict[str, str]:
    """Environment of the master and worker JVMs (spark-class reads these)."""
    conf_dir = cfg.path("cluster", "conf")  # empty on purpose: no stray spark-defaults/spark-env
    conf_dir.mkdir(parents=True, exist_ok=True)
    return {
        "SPARK_HOME": str(spark_home()),
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": cfg.cluster.host,
        "SPARK_DAEMON_MEMORY": cfg.cluster.daemon_memory,
        # control plane only (RPC, a little bookkeeping): the client compiler and a serial GC
        # start them on a fraction of the CPU the server defaults take
        "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Duser.timezone=UTC "
                                  f"-Dlog4j2.configurationFile={LOG4J}",
    }


def master_json(cfg, timeout: float = 3.0) -> dict:
    """The master's own status (its web UI's /json): workers, cores, memory, applications."""
    port = read_state(cfg).get("webui_port")
    if not port:
        return {}
    try:
        with urllib.request.urlopen(f"http://{cfg.cluster.host}:{port}/json/", timeout=timeout) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return {}


def up(cfg=None, workers: int | None = None) -> dict:
    """Start the master and the workers that are not running; return when every worker
    has registered with the master. Idempotent, like `flowlake up`."""
    cfg = cfg or _config.get()
    c = cfg.cluster
    n = c.workers if workers is None else workers
    if n < 1:
        raise RuntimeError(f"[cluster] workers = {n}: a cluster needs at least one worker")
    spark_class = spark_home() / "bin" / "spark-class"
    if not spark_class.exists():
        raise RuntimeError(f"{spark_class} not found: is pyspark installed (`make setup`)?")
    state = read_state(cfg)
    m = master(cfg)
    if not m.running():
        for i in _workers_started(cfg):  # workers of a dead master would knock at its old port
            worker(cfg, i).stop(timeout=30)
        state = {"port": c.port or free_port(), "webui_port": c.webui_port or free_port(), "workers": []}
        for what, port in (("port", state["port"]), ("webui_port", state["webui_port"])):
            if port_open(c.host, port):
                raise RuntimeError(f"cannot start the Spark master: {c.host}:{port} is in use; "
                                   f"set [cluster] {what} (FLOWLAKE_CLUSTER_{what.upper()}) to a free port or 0")
        state_file(cfg).parent.mkdir(parents=True, exist_ok=True)
        state_file(cfg).write_text(json.dumps(state, indent=2))
        m.start([str(spark_class), MASTER_CLASS, "--host", c.host, "--port", str(state["port"]),
                 "--webui-port", str(state["webui_port"])], env=daemon_env(cfg), cwd=str(cfg.path("cluster")))
        wait_until(lambda: master_json(cfg).get("status") == "ALIVE", 120, "the Spark master to be alive",
                   interval=0.5, proc=m)
    url = f"spark://{c.host}:{state['port']}"
    ports = state.setdefault("workers", [])
    for i in range(1, n + 1):
        w = worker(cfg, i)
        if w.running():
            continue
        while len(ports) < i:
            ports.append({})
        ports[i - 1] = {"port": free_port(), "webui_port": free_port()}
        work = cfg.path("cluster", "work", f"worker-{i}")
        local = cfg.path("tmp", f"spark-worker-{i}")
        work.mkdir(parents=True, exist_ok=True)
        local.mkdir(parents=True, exist_ok=True)
        env = {**daemon_env(cfg), "SPARK_LOCAL_DIRS": str(local),
               # finished applications' folders (executor stdout/stderr) are removed after a while
               "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval=3600 "
                                    f"-Dspark.worker.cleanup.appDataTtl={int(c.app_data_days * 86400)}"}
        w.start([str(spark_class), WORKER_CLASS, "--host", c.host, "--port", str(ports[i - 1]["port"]),
                 "--webui-port", str(ports[i - 1]["webui_port"]), "--cores", str(c.worker_cores),
                 "--memory", c.worker_memory, "--work-dir", str(work), url], env=env, cwd=str(work))
    for i in _workers_started(cfg):  # scale down to n
        if i > n:
            worker(cfg, i).stop(timeout=30)
    del ports[n:]
    state_file(cfg).write_text(json.dumps(state, indent=2))
    pids = [worker(cfg, i).pid() for i in range(1, n + 1)]

    def registered() -> bool:
        for i in range(1, n + 1):
            if not worker(cfg, i).running():
                raise RuntimeError(f"spark-worker-{i} exited; log {worker(cfg, i).logfile}:\n"
                                   + _tail(worker(cfg, i).logfile))
        return alive_workers(cfg) == n

    wait_until(registered, 120, f"{n} Spark worker(s) to register with the master", interval=0.5, proc=m)
    return {"master": url, "webui": f"http://{c.host}:{state['webui_port']}", "master_pid": m.pid(),
            "worker_pids": pids}


def alive_workers(cfg) -> int:
    return sum(1 for w in master_json(cfg).get("workers", []) if w.get("state") == "ALIVE")


def down(cfg=None) -> list[str]:
    """Stop the workers, then the master. Applications still running lose their executors."""
    cfg = cfg or _config.get()
    stopped = []
    for i in _workers_started(cfg):
        if worker(cfg, i).stop(timeout=30):
            stopped.append(f"spark-worker-{i}")
    if master(cfg).stop(timeout=30):
        stopped.append("spark-master")
    return stopped


def status(cfg=None) -> dict:
    """Processes (state, pid, port) and what the master reports; {} when never started."""
    cfg = cfg or _config.get()
    nums = _workers_started(cfg)
    m = master(cfg)
    if not nums and not m.pidfile.exists():
        return {}
    state = read_state(cfg)

    def proc(managed: Managed, port) -> dict:
        pid = managed.pid()
        return {"state": "running" if pid else ("dead" if managed.pidfile.exists() else "stopped"),
                "pid": pid, "port": port, "log": str(managed.logfile)}

    ports = state.get("workers", [])
    procs = {"spark-master": proc(m, state.get("port"))}
    for i in nums:
        procs[f"spark-worker-{i}"] = proc(worker(cfg, i), (ports[i - 1] if i <= len(ports) else {}).get("port"))
    info = master_json(cfg) if procs["spark-master"]["state"] == "running" else {}
    apps = lambda key: [{"id": a.get("id"), "name": a.get("name"), "cores": a.get("cores"), "state": a.get("state"),
                         "duration_ms": a.get("duration")} for a in info.get(key, [])]
    return {
        "master": f"spark://{cfg.cluster.host}:{state.get('port')}" if state.get("port") else None,
        "webui": f"http://{cfg.cluster.host}:{state['webui_port']}" if state.get("webui_port") else None,
        "processes": procs,
        "alive_workers": sum(1 for w in info.get("workers", []) if w.get("state") == "ALIVE"),
        "cores": info.get("cores"), "cores_used": info.get("coresused"),
        "memory_mb": info.get("memory"), "memory_used_mb": info.get("memoryused"),
        "active_apps": apps("activeapps"), "completed_apps": len(info.get("completedapps", [])),
        "disk": disk_usage(cfg),
    }


def disk_usage(cfg) -> dict:
    """What the cluster keeps on disk, each bounded: worker folders (cleaned after
    [cluster] app_data_days), event logs (last [cluster] event_logs applications)."""
    def size(p: Path) -> int:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0

    events = cfg.path("cluster", "events")
    return {"work_bytes": size(cfg.path("cluster", "work")), "event_logs": len(event_logs(cfg)),
            "event_log_bytes": size(events), "event_logs_keep": cfg.cluster.event_logs}


def event_logs(cfg) -> list[Path]:
    """Event logs, oldest first: one folder per application (Spark 4 writes rolling
    logs: eventlog_v2_<app>/events_N_<app>.zstd, appstatus_<app>.inprogress while it runs)."""
    events = cfg.path("cluster", "events")
    return sorted(events.iterdir(), key=lambda p: p.stat().st_mtime) if events.exists() else []


def running(log: Path) -> bool:
    names = [p.name for p in log.iterdir()] if log.is_dir() else [log.name]
    return any(n.endswith(".inprogress") for n in names)


def prune_event_logs(cfg) -> None:
    """Keep the newest [cluster] event_logs - 1, making room for the application about to start."""
    keep = max(cfg.cluster.event_logs - 1, 0)
    done = [p for p in event_logs(cfg) if not running(p)]
    for p in done[:max(len(done) - keep, 0)]:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def read_event_log(log: Path) -> list[dict]:
    """The events (one JSON object a line) of one application's log, in order."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    files = sorted(log.glob("events_*"), key=lambda p: int(p.name.split("_")[1])) if log.is_dir() else [log]
    out = []
    for f in files:
        codec = "zstd" if ".zstd" in f.name else None  # flowlake's logs: zstd (spark.eventLog.compression.codec)
        with pa.input_stream(str(f), compression=codec) as stream:
            out += [json.loads(line) for line in stream.read().decode().splitlines() if line.strip()]
    return out


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
