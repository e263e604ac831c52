"""Kafka -> lake throughput of the streaming ingest (flows/s), beside the shipper that
filled Kafka and a plain consumer reading the same messages, all in one run.

    python bench/ingest.py [--flows 2000000] [--alternatives]

A real nfcapd file (softflowd -> nfcapd, joined by `nfdump -R`, as bench/ship.py builds
it) is shipped by the Go shipper (FlowBatch messages, shipper.message_format = arrow)
into a private broker; then a plain confluent-kafka consumer reads every message (no
decode: the floor any consumer pays), then `flowlake ingest --once` lands it in the lake
(after an untimed warm-up drain of the same file, --warmup: Spark start-up and JIT excluded).
The ingest's Python tasks fetch each micro-batch's offset range from the broker themselves;
the same messages are then landed again into fresh homes by that design and by the one
before it (Spark's Kafka source reading the messages and handing them to the tasks),
alternately, twice each, with the CPU of each process kind.
Then the same messages are landed again into fresh homes with enrichment off and on, alternately, twice each (issue 21: enrichment
may cost at most 10 % of the ingest's rate): "on" with an ASN and a geo database (MMDB, built
here, 4,600 networks), a networks file, an SNMP interface cache and interface rules.
--alternatives also times, on the same data:
  - the same FlowBatch decode with the rows handed back to Spark's Parquet writer;
  - format 1 (one Avro record per flow, the old wire format) shipped into a second topic
    and landed by Spark's from_avro row decode (pipelines/decode.py, the old ingest).
Prints figures, asserts nothing but the row counts.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flowlake.base.ports import free_port
from flowlake.pipelines.lake_read import lake_files

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests"))  # mmdb_files: the enrichment databases


def ship_file(cfg, path: Path, extra=()) -> tuple[float, float, float]:
    """(whole shipper process seconds, the file's transaction seconds, shipper CPU seconds)."""
    import resource

    from flowlake.collectors import ship

    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(ship.ship_argv(cfg, [path], extra=extra), capture_output=True, text=True,
                         env=ship.child_env(cfg))
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if res.returncode != 0:
        sys.exit(f"shipper failed:\n{res.stderr[-2000:]}")
    shipped = next(json.loads(line) for line in res.stdout.splitlines() if '"shipped"' in line)
    return wall, shipped["seconds"], cpu


def tree_cpu(skip: set[int]) -> dict[str, float]:
    """CPU seconds of this process and its descendants (Spark's JVM, Python workers, and the
    workers that have exited), leaving out the subtrees in `skip` (the Kafka broker), by kind: driver (this Python),
    jvm, workers (pyspark daemon and its forked workers)."""
    import psutil

    out = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    todo = [psutil.Process()]
    while todo:
        p = todo.pop()
        if p.pid in skip:
            continue
        try:
            t = p.cpu_times()
            kind = ("driver" if p.pid == os.getpid() else "jvm" if "java" in p.name()
                    else "workers")
            out[kind] += t.user + t.system
            if kind != "driver":  # Python workers that exited (reaped by the pyspark daemon) count too;
                out[kind] += t.children_user + t.children_system  # the driver's children: the shipper
            todo += p.children()
        except psutil.Error:
            pass
    return out


def plain_consumer(cfg, topic: str) -> tuple[float, int, int]:
    """Read every committed message of the topic: (seconds, messages, bytes)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from flowlake.collectors import kafka

    c = Consumer({**cfg.kafka_client_conf(), "group.id": "bench-plain", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.max.bytes": 52428800,
                  "max.partition.fetch.bytes": 10485760})
    try:
        ends = kafka.end_offsets(cfg, c, topic, "read_committed")
        t0 = time.perf_counter()
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends]
        c.assign(tps)
        n = size = 0
        while True:
            for m in c.consume(10000, timeout=0.5):
                if not m.error():
                    n += 1
                    size += len(m.value())
            if all(tp.offset >= ends[tp.partition] for tp in c.position(tps)):
                break
        return time.perf_counter() - t0, n, size
    finally:
        c.close()


def spark_writer_alternative(spark, cfg, out: Path) -> tuple[float, int]:
    """FlowBatch decode in mapInArrow, rows back to Spark, Spark's partitioned Parquet writer."""
    from flowlake.pipelines.decode import with_time_partitions
    from flowlake.pipelines.flow_messages import BATCH, FlowDecoder
    from flowlake.schemas import FLOW

    def decode(batches):
        import pyarrow as pa

        dec = FlowDecoder()
        # Spark's Arrow input takes microsecond timestamps only
        us = pa.schema([f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
                        for f in dec.schema])
        for rb in batches:
            values = rb.column("value")
            for i in range(rb.num_rows):
                kind, table = dec.decode(values[i].as_py())
                if kind == BATCH:
                    yield from table.cast(us).to_batches()

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "8")
    t0 = time.perf_counter()
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", cfg.kafka_bootstrap)
          .option("subscribe", cfg.kafka.flows_topic).option("kafka.isolation.level", "read_committed").load()
          .select("value").mapInArrow(decode, FLOW.spark_schema()))
    (with_time_partitions(df, "time_start").write.partitionBy("date", "hour")
     .option("compression", "zstd").parquet(str(out)))
    secs = time.perf_counter() - t0
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    rows = spark.read.parquet(str(out)).count()
    return secs, rows


def avro_row_alternative(spark, cfg, out: Path) -> tuple[float, int]:
    """Format 1 through Spark's from_avro row decode (the ingest before FlowBatch)."""
    from flowlake.pipelines.decode import decode, good_rows, with_time_partitions
    from flowlake.schemas import FLOW, avro

    t0 = time.perf_counter()
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", cfg.kafka_bootstrap)
          .option("subscribe", "flows.avro").option("kafka.isolation.level", "read_committed").load())
    good = with_time_partitions(good_rows(decode(df, FLOW, avro.header(FLOW)), FLOW), "time_start")
    good.write.partitionBy("date", "hour").option("compression", "zstd").parquet(str(out))
    secs = time.perf_counter() - t0
    return secs, spark.read.parquet(str(out)).count()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flows", type=int, default=2_000_000)
    ap.add_argument("--warmup", choices=("full", "seed"), default="full",
                    help="untimed drain before the timed one: the bench's file (full, default: a JIT-warm "
                    "running ingest) or a 25k-flow file (seed: closer to a just-started ingest)")
    ap.add_argument("--skip-enrichment", action="store_true", help="leave out the enrichment off/on runs")
    ap.add_argument("--alternatives", action="store_true", help="also time the designs not chosen (see above)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flowlake-bench-ingest-"))
    os.environ.update({"FLOWLAKE_HOME": str(work / "home"), "FLOWLAKE_KAFKA_PORT": str(free_port()),
                       "FLOWLAKE_KAFKA_CONTROLLER_PORT": str(free_port())})
    import ship as ship_bench  # bench/ship.py: the same real nfcapd file

    from flowlake.base import config
    from flowlake.collectors import kafka, ship
    from flowlake.pipelines import ingest

    cfg = config.get()
    ship_bench.BINARY = ship.build_binary()
    try:
        print(f"building a >= {args.flows:,}-flow nfcapd file in {work} ...", flush=True)
        big, flows = ship_bench.big_file(work, args.flows, lz4=False)
        kafka.start(cfg)
        # warm-up, untimed: the first transaction on a fresh broker creates
        # __transaction_state; the first ingest starts Spark's JIT and the checkpoints,
        # so the timed drain below is the steady state of a running ingest.
        # --warmup full drains the bench's file once before the timed drain: a streaming
        # ingest runs for months, its JVM's JIT has long compiled the Kafka and Arrow paths
        # (a 25k-flow warm-up leaves the JVM compiling during the timed run).
        warm = cfg.path("nfcapd", "nfcapd.202501010000")
        warm.parent.mkdir(parents=True, exist_ok=True)
        if args.warmup == "full":
            os.link(big, warm)
        else:
            shutil.copy(next((work / "seed").iterdir()), warm)
        ship_file(cfg, warm)
        spark = ingest.session(cfg)  # the ingest's own JVM options ([spark] ingest_java_options)
        print(f"ingest JVM options: {cfg.spark.ingest_java_options or '(JVM defaults)'}", flush=True)
        ingest.run(cfg, once=True)
        warm_rows = ingest.counts(cfg)["flows"]["rows"]
        print(f"warm-up ({args.warmup}): {warm_rows:,} flows drained untimed", flush=True)
        warm_batches = len(list(cfg.path("state", "ingest", "flows").glob("*.done")))

        ship_s, txn_s, ship_cpu = ship_file(cfg, big)
        c0 = time.process_time()
        raw_s, n_msgs, n_bytes = plain_consumer(cfg, cfg.kafka.flows_topic)
        raw_cpu = time.process_time() - c0
        total = flows + warm_rows
        print(f"Kafka holds {n_msgs:,} FlowBatch messages, {n_bytes / 1e6:.0f} MB, "
              f"{total / n_msgs:,.0f} flows and {n_bytes / total:.0f} bytes per flow", flush=True)

        broker = {kafka.managed(cfg).pid()}
        load0 = os.getloadavg()[0]
        c0, t0 = tree_cpu(broker), time.perf_counter()
        ingest.run(cfg, once=True)
        ingest_s, c1 = time.perf_counter() - t0, tree_cpu(broker)
        cpu_by = {k: c1[k] - c0[k] for k in c1}
        ingest_cpu = sum(cpu_by.values())
        rows = ingest.counts(cfg)["flows"]["rows"]
        assert rows == total, f"lake has {rows} rows, expected {total}"
        markers = sorted(cfg.path("state", "ingest", "flows").glob("*.done"))
        timed = [json.loads(m.read_text()) for m in markers[warm_batches:]]
        batch_s = sum(m["seconds"] for m in timed)
        lake_bytes = sum(os.path.getsize(p) for p in lake_files(cfg.lake, "flows")[1])  # the current version's

        rate = lambda n, t: n / t  # noqa: E731
        print()
        mcpu = lambda c, n: f"{c / n * 1e6:8.2f}"  # noqa: E731
        print(f"{'stage (' + format(flows, ',') + ' flows)':52s} {'seconds':>8s} {'flows/s':>12s} {'CPU-s/M flows':>14s}")
        print(f"{'shipper: nfcapd file -> Kafka, whole process':52s} {ship_s:8.2f} {rate(flows, ship_s):12,.0f} "
              f"{mcpu(ship_cpu, flows):>14s}")
        print(f"{'shipper: the file transaction':52s} {txn_s:8.2f} {rate(flows, txn_s):12,.0f}")
        print(f"{'plain consumer (confluent-kafka, no decode)':52s} {raw_s:8.2f} {rate(total, raw_s):12,.0f} "
              f"{mcpu(raw_cpu, total):>14s}  ({n_msgs / raw_s:,.0f} msgs/s)")
        print(f"{'flowlake ingest --once (query start to finish)':52s} {ingest_s:8.2f} {rate(flows, ingest_s):12,.0f} "
              f"{mcpu(ingest_cpu, flows):>14s}")
        print(f"{'  of which its micro-batch (decode, Parquet, publish)':52s} {batch_s:8.2f} {rate(flows, batch_s):12,.0f}")
        tot = lambda k: sum(m.get(k, 0) for m in timed)  # noqa: E731
        print(f"  its {len(timed)} micro-batch(es), {sum(m['tasks'] for m in timed)} tasks on "
              f"{cfg.kafka.partitions} partitions: Spark job (Kafka read, Arrow hand-off, tasks) "
              f"{tot('collect_seconds'):.2f} s; in the tasks (summed over tasks) Python {tot('task_seconds'):.2f} s "
              f"wall, {tot('task_cpu'):.2f} CPU-s, of which Parquet write {tot('write_seconds'):.2f} s; "
              f"publish and the rest {batch_s - tot('collect_seconds'):.2f} s")
        print(f"  ingest CPU by process (CPU-s per M flows): Spark JVM {mcpu(cpu_by['jvm'], flows)}, "
              f"Python workers {mcpu(cpu_by['workers'], flows)}, driver {mcpu(cpu_by['driver'], flows)}")
        print(f"lake: {lake_bytes / total:.1f} bytes/flow (zstd Parquet)")
        print(f"ratio ingest/shipper: {ship_s / ingest_s:.2f} (goal >= 1); ingest/plain consumer: {raw_s / ingest_s:.2f}; "
              f"CPU per flow ingest/shipper: {ingest_cpu / ship_cpu:.2f}")
        print(f"target 300,000 flows/s Kafka to lake: {'met' if rate(flows, ingest_s) >= 300_000 else 'NOT met'}")
        print(f"load average (1 min) before the ingest {load0:.1f}, after it {os.getloadavg()[0]:.1f}; "
              f"{os.cpu_count()} cores", flush=True)
        fetch_designs(cfg, work, total, broker)
        if not args.skip_enrichment:
            enrichment_cost(cfg, work, total, broker)
        if args.alternatives:
            secs, n = spark_writer_alternative(spark, cfg, work / "alt-spark-writer")
            assert n == total, n
            print(f"{'alt: FlowBatch, rows to Spark Parquet writer':52s} {secs:8.2f} {rate(total, secs):12,.0f}",
                  flush=True)
            kafka_admin_topic(cfg, "flows.avro")
            t_v1_ship, _, _ = ship_file(cfg, big, extra=["--format", "avro", "--topic", "flows.avro", "--force"])
            secs, n = avro_row_alternative(spark, cfg, work / "alt-avro")
            assert n == flows, n
            print(f"{'alt: format 1 (Avro per flow), Spark from_avro':52s} {secs:8.2f} {rate(flows, secs):12,.0f}")
            print(f"{'alt: shipper writing format 1, whole process':52s} {t_v1_ship:8.2f} {rate(flows, t_v1_ship):12,.0f}")
            print(f"load average at the end: {os.getloadavg()[0]:.1f}")

    finally:
        kafka.stop(cfg)
        shutil.rmtree(work, ignore_errors=True)


def land_fresh(cfg, broker: set[int], total: int, **options) -> dict[str, float]:
    """Land the topic into `cfg`'s (fresh) home: wall seconds and CPU seconds by process kind."""
    from flowlake.pipelines import ingest

    c0, t0 = tree_cpu(broker), time.perf_counter()
    ingest.run(cfg, once=True, **options)
    wall, c1 = time.perf_counter() - t0, tree_cpu(broker)
    rows = ingest.counts(cfg)["flows"]["rows"]
    assert rows == total, f"{options}: lake has {rows} rows, expected {total}"
    return {"wall": wall, **{k: c1[k] - c0[k] for k in c1}}


def fetch_designs(cfg, work: Path, total: int, broker: set[int]) -> None:
    """The same messages landed into fresh homes by the Python tasks fetching their offset
    ranges themselves (the ingest) and by Spark's Kafka source handing the messages over (the
    design before), alternately, twice each, in this JVM (same JIT settings for both)."""
    import statistics

    from flowlake.base import config

    runs: dict[str, list[dict]] = {"tasks": [], "spark": []}
    for i, fetch in enumerate(["tasks", "spark"] * 2):
        home = work / f"home-fetch-{fetch}-{i}"
        c = config.load(env={**os.environ, "FLOWLAKE_HOME": str(home)})
        runs[fetch].append(land_fresh(c, broker, total, fetch=fetch))
        shutil.rmtree(home / "lake", ignore_errors=True)
    print()
    print(f"{'fetch design (' + format(total, ',') + ' flows, median of 2)':60s} {'seconds':>8s} {'flows/s':>10s} "
          f"{'CPU-s/M':>8s} {'JVM':>6s} {'Python':>7s}")
    med = {}
    for fetch, label in (("tasks", "Python tasks fetch their offset ranges (the ingest)"),
                         ("spark", "Spark's Kafka source hands messages to the tasks")):
        m = {k: statistics.median(r[k] for r in runs[fetch]) for k in runs[fetch][0]}
        med[fetch] = m
        cpu = m["jvm"] + m["workers"] + m["driver"]
        print(f"{label:60s} {m['wall']:8.2f} {total / m['wall']:10,.0f} {cpu / total * 1e6:8.2f} "
              f"{m['jvm'] / total * 1e6:6.2f} {m['workers'] / total * 1e6:7.2f}")
    cpu = {f: med[f]["jvm"] + med[f]["workers"] + med[f]["driver"] for f in med}
    print(f"tasks/spark: wall {med['spark']['wall'] / med['tasks']['wall']:.2f}x faster, CPU per flow "
          f"{cpu['tasks'] / cpu['spark']:.2f}x; load average {os.getloadavg()[0]:.1f}", flush=True)


def enrichment_files(work: Path) -> Path:
    """flowlake.toml of the enrichment-on runs, with its files: every address of the bench's
    traffic (pcapgen: 10.0/16, 192.0.2/24, 2001:db8::/32) finds an AS, a country and a network."""
    import mmdb_files  # tests/mmdb_files.py

    d = work / "enrich"
    d.mkdir()
    nets = {f"10.{i // 256}.{i % 256}.0/24": (64500 + i % 300, "org", "DE", "Berlin") for i in range(4096)}
    nets.update({f"192.0.2.{i * 16}/28": (64900 + i, "doc", "US", "Menlo Park") for i in range(16)})
    nets.update({f"2001:db8:{i:x}::/48": (65000 + i % 50, "six", "CH", "Geneva") for i in range(512)})
    mmdb_files.write(d / "asn.mmdb", "GeoLite2-ASN", nets)
    mmdb_files.write(d / "geo.mmdb", "GeoLite2-City", nets)
    lines = ["prefix,name,role,site,region,tenant", "10.0.0.0/8,campus,internal,slac,us-west,doe",
             "192.0.2.0/24,dmz,servers,slac,us-west,doe", "2001:db8::/32,campus6,internal,slac,us-west,doe"]
    lines += [f"10.{i}.0.0/16,bldg{i},lab,b{i},us-west,t{i % 7}" for i in range(200)]
    lines += [f"2001:db8:{i:x}::/48,lab6-{i},lab,b{i},us-west,t{i % 7}" for i in range(200)]
    (d / "nets.csv").write_text("\n".join(lines) + "\n")
    (d / "flowlake.toml").write_text(f"""
[[enrich.interface_rules]]
description = '(?i)^(?P<connectivity>transit|ix):? (?P<provider>\\S+)'
boundary = "external"
[[enrich.interface_rules]]
boundary = "internal"
[enrich]
asn_database = "{d / 'asn.mmdb'}"
geo_database = "{d / 'geo.mmdb'}"
networks = "{d / 'nets.csv'}"
""")
    return d / "flowlake.toml"


def enrichment_cost(cfg, work: Path, total: int, broker: set[int]) -> None:
    """Land the topic's messages again into fresh homes, enrichment off / on alternately,
    three times each; wall seconds and CPU seconds (this process tree, the broker left out).
    On a shared machine the wall clock follows the neighbours' load; the CPU a flow costs
    is what bounds the rate on dedicated cores, so the verdict is on the median CPU."""
    import statistics

    from flowlake.base import config

    toml = enrichment_files(work)
    times: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}
    kinds: dict[str, list[dict]] = {}  # CPU by process kind, per run
    for i, mode in enumerate(["off", "on"] * 3):
        home = work / f"home-{mode}-{i}"
        env = {**os.environ, "FLOWLAKE_HOME": str(home), "FLOWLAKE_ENRICH_ENABLED": str(mode == "on").lower()}
        c = config.load(toml, env=env)
        snmp = home / "state" / "snmp" / "interfaces.json"  # what the poller would have written
        snmp.parent.mkdir(parents=True)
        snmp.write_text(json.dumps({"version": 1, "exporters": {"127.0.0.1": {
            "sys_name": "bench-1", "polled": "2026-01-01T00:00:00Z", "error": "", "interfaces": {
                str(n): {"name": f"et-{n}", "description": "Transit: Cogent" if n % 2 else "core",
                         "speed_mbps": 10000, "oper_status": 1} for n in range(0, 64)}}}}))
        r = land_fresh(c, broker, total)
        times[mode].append(r["wall"])
        cpus[mode].append(r["jvm"] + r["workers"] + r["driver"])
        kinds.setdefault(mode, []).append(r)
        if mode == "on":
            import duckdb

            listed = ", ".join("'" + f + "'" for f in lake_files(home / "lake", "flows")[1])
            unknown = duckdb.connect().execute(
                f"select avg((src_as = 0)::int), avg((src_country = '')::int), avg((src_net_name = '')::int) "
                f"from read_parquet([{listed}])").fetchone()
            assert max(unknown) < 0.01, f"enrichment on: unknown shares {unknown} (the files must cover the traffic)"
        shutil.rmtree(home / "lake", ignore_errors=True)
    med = {m: (statistics.median(times[m]), statistics.median(cpus[m])) for m in times}
    print()
    print(f"{'enrichment (' + format(total, ',') + ' flows, median of 3)':60s} {'seconds':>8s} {'flows/s':>10s} "
          f"{'CPU-s/M flows':>14s}")
    for mode, label in (("off", "ingest --once, enrichment off"),
                        ("on", "ingest --once, enrichment on (ASN+City MMDB, networks, SNMP, rules)")):
        wall, cpu = med[mode]
        print(f"{label:60s} {wall:8.2f} {total / wall:10,.0f} {cpu / total * 1e6:14.2f}   runs: "
              + ", ".join(f"{t:.2f}s/{c:.2f}cpu" for t, c in zip(times[mode], cpus[mode])))
        by = {k: statistics.median(r[k] for r in kinds[mode]) / total * 1e6 for k in ("jvm", "workers", "driver")}
        print(f"{'':60s} CPU-s/M by process (medians): JVM {by['jvm']:.2f}, Python workers {by['workers']:.2f}, "
              f"driver {by['driver']:.2f}")
    cpu_ratio = med["off"][1] / med["on"][1]
    print(f"ratio on/off, wall flows/s: {med['off'][0] / med['on'][0]:.3f}; per CPU-second: {cpu_ratio:.3f} "
          f"(goal >= 0.90, enrichment costs at most 10 %: {'met' if cpu_ratio >= 0.90 else 'NOT met'}); "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)


def kafka_admin_topic(cfg, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(cfg.kafka_client_conf())
    admin.create_topics([NewTopic(topic, cfg.kafka.partitions, 1)])[topic].result(30)


if __name__ == "__main__":
    sys.exit(main())
