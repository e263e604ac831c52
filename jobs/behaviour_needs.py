"""behaviour_needs: per behaviour class, the RTT-tested paths that carry that class's
flows, and whether each path's measured latency, jitter and loss (active results) meet
what the class needs.

Which flows a tested path carries (the rule): a path is the route to one RTT test target
(all of the day's RTT tests to it, whatever their source). A flow travels that path when
one of its ends is the target's address or lies in the target's network, the target's
address cut to [behaviour] needs_prefix_v4 bits (IPv4) or needs_prefix_v6 bits (IPv6): the
tested host stands for its site, whose hosts share the route beyond our border. With 32 /
128 only the target itself counts. A flow on two paths (its two ends in two tested
networks) counts for each; targets sharing one network share its flows. Targets given as
names, not addresses, cannot be matched to flow addresses: they are named in the job's
log. Rows: one per class and path with at least one flow of the class on it, with
class_flows (all the class's flows of the day) beside flows to show how much of the class
the path carries; tested paths carrying none of the day's flows write no row (their
measurements are in active_summary and pinger_matrix) and are named in the job's log.

Needs (one-way latency, jitter, loss), with their sources:
- latency: the tele-immersion data-type requirements of Leigh, Johnson & DeFanti (EVL,
  "Issues in the design of a flexible distributed architecture for supporting
  persistence and interoperability in collaborative virtual environments", SC'97;
  also Leigh's CAVERN thesis, evl.uic.edu/entry.php?id=1315): tracking < 10 ms,
  audio < 30 ms, simulation < 30 ms, video < 100 ms, database < 100 ms.
- jitter and loss of the interactive, jitter-sensitive classes: ITU-T Y.1541 QoS class 0
  (IPDV 50 ms, IPLR 1e-3). EVL's own trials found jitter hurt collaborative work more
  than latency (Park & Kenyon, evl.uic.edu/cavern/users/studies.html), so it is checked.
- bulk classes and `other`: throughput-bound or best effort, no latency/jitter need.
Measured per target (RTT tests of the day): one-way latency = median RTT / 2, jitter =
median of the tests' IPDV inter-quartile ranges, loss = lost / sent.
"""
from __future__ import annotations

import ipaddress
import logging

from flowlake.schemas.pinger import BEHAVIOUR_NEEDS

from . import common
from .active_summary import rtt_tests
from .behaviour_classes import CLASSES, USED, classify

log = logging.getLogger(__name__)
NAME = "behaviour_needs"
TABLES = (BEHAVIOUR_NEEDS,)
DEPENDS = ("behaviour_classes",)
LEIGH = "Leigh, Johnson, DeFanti SC'97 (EVL tele-immersion data types)"
Y1541 = "ITU-T Y.1541 class 0"
# class -> (latency ms, jitter ms, loss %, source)
NEEDS = {
    "avatar": (10.0, 50.0, 0.1, f"latency: {LEIGH}, tracking; jitter, loss: {Y1541}"),
    "audio": (30.0, 50.0, 0.1, f"latency: {LEIGH}, audio; jitter, loss: {Y1541}"),
    "video": (100.0, 50.0, 0.1, f"latency: {LEIGH}, video; jitter, loss: {Y1541}"),
    "realtime_state": (30.0, 50.0, 0.1, f"latency: {LEIGH}, simulation; jitter, loss: {Y1541}"),
    "state_update": (100.0, None, None, f"latency: {LEIGH}, database (reliable transport: no jitter/loss need)"),
    "small_bulk": (None, None, None, "throughput-bound: no latency/jitter need"),
    "large_bulk": (None, None, None, "throughput-bound: no latency/jitter need"),
    "streaming_bulk": (None, None, None, "throughput-bound (paced): no latency/jitter need"),
    "other": (None, None, None, "best effort: no need stated"),
}
MATCH_DDL = "addr string, target string, exact boolean"


def paths(active):
    """Per target: tests, latency_ms (median RTT / 2), jitter_ms, loss_pct of the day's RTT tests."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    return (rtt_tests(active).groupBy("target")
            .agg(F.count("*").cast("long").alias("tests"),
                 (F.percentile("rtt_median_ms", 0.5) / 2).alias("latency_ms"),
                 F.percentile("jitter_ms", 0.5).alias("jitter_ms"),
                 (100.0 * (F.sum("sent") - F.sum("received")) / F.sum("sent")).alias("loss_pct")))


def target_networks(targets, prefix_v4: int, prefix_v6: int) -> tuple[dict, list[str]]:
    """targets (strings) -> ({(version, network int): [(target, address)]}, targets that are
    not addresses). The network int is the address shifted right past the host bits."""
    for bits, most, key in ((prefix_v4, 32, "needs_prefix_v4"), (prefix_v6, 128, "needs_prefix_v6")):
        if not 0 <= int(bits) <= most:
            raise ValueError(f"[behaviour] {key} = {bits}: a prefix length 0..{most} expected")
    nets: dict = {}
    names = []
    for t in sorted(set(targets)):
        try:
            ip = ipaddress.ip_address(t.strip())
        except ValueError:
            names.append(t)
            continue
        most, bits = (32, prefix_v4) if ip.version == 4 else (128, prefix_v6)
        nets.setdefault((ip.version, int(ip) >> (most - int(bits))), []).append((t, ip))
    return nets, names


def address_matcher(nets: dict, prefix_v4: int, prefix_v6: int):
    """mapInArrow function: batches of `addr` -> (addr, target, exact) for every tested
    network the address lies in (exact: it is the target address itself)."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    shift = {4: 32 - int(prefix_v4), 6: 128 - int(prefix_v6)}
    schema = pa.schema([("addr", pa.string()), ("target", pa.string()), ("exact", pa.bool_())])

    def match(batches):
        for batch in batches:
            out = ([], [], [])
            for a in batch.column(0).to_pylist():
                try:
                    ip = ipaddress.ip_address(a)
                except (ValueError, TypeError):
                    continue  # not an address: matches nothing
                for target, addr in nets.get((ip.version, int(ip) >> shift[ip.version]), ()):
                    out[0].append(a)
                    out[1].append(target)
                    out[2].append(ip == addr)
            yield pa.RecordBatch.from_arrays([pa.array(c, t.type) for c, t in zip(out, schema)], schema=schema)

    return match


def class_paths(classified, nets: dict, prefix_v4: int, prefix_v6: int):
    """classified flows (class, src_addr, dst_addr, bytes) -> per class and tested target:
    flows, address_flows (an end is the target itself) and bytes, by the module's rule."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    pairs = (classified.groupBy("class", "src_addr", "dst_addr")
             .agg(F.count("*").cast("long").alias("n"), F.sum("bytes").cast("long").alias("b")))
    addrs = (pairs.select(F.col("src_addr").alias("addr")).union(pairs.select(F.col("dst_addr").alias("addr")))
             .distinct())
    matched = addrs.mapInArrow(address_matcher(nets, prefix_v4, prefix_v6), MATCH_DDL)
    hits = (pairs.join(matched, pairs.src_addr == matched.addr)
            .unionByName(pairs.join(matched, pairs.dst_addr == matched.addr))
            .groupBy("class", "src_addr", "dst_addr", "target")  # a pair with both ends on one path: once
            .agg(F.first("n").alias("n"), F.first("b").alias("b"), F.max("exact").alias("exact")))
    return (hits.groupBy("class", "target")
            .agg(F.sum("n").cast("long").alias("flows"),
                 F.sum(F.when(F.col("exact"), F.col("n")).otherwise(0)).cast("long").alias("address_flows"),
                 F.sum("b").cast("long").alias("bytes")))


def needs(class_flows, on_paths, measured):
    """class_flows (class, class_flows), on_paths (class_paths rows), measured (paths rows)
    -> BEHAVIOUR_NEEDS rows without date: one per class and path carrying its flows."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    spark = measured.sparkSession
    table = spark.createDataFrame([(c, *NEEDS[c]) for c in CLASSES],
                                  "class string, latency_need_ms double, jitter_need_ms double, "
                                  "loss_need_pct double, source string")
    df = (on_paths.join(measured, "target").join(table, "class")
          .join(class_flows, "class", "left").fillna(0, ["class_flows"]))
    checks = []
    for need, got, out in (("latency_need_ms", "latency_ms", "meets_latency"), ("jitter_need_ms", "jitter_ms", "meets_jitter"),
                           ("loss_need_pct", "loss_pct", "meets_loss")):
        df = df.withColumn(out, F.when(F.col(need).isNotNull() & F.col(got).isNotNull(), F.col(got) <= F.col(need)))
        checks.append((F.col(need), F.col(out)))
    stated = None
    for need, ok in checks:
        stated = need.isNotNull() if stated is None else stated | need.isNotNull()
    all_ok = None
    for need, ok in checks:  # an unmeasured need (null) leaves the verdict open
        term = F.when(need.isNull(), F.lit(True)).otherwise(ok)
        all_ok = term if all_ok is None else all_ok & term
    df = df.withColumn("meets", F.when(stated, all_ok))
    return df.select(*[f.name for f in BEHAVIOUR_NEEDS.fields if f.name not in ("date", "count_at")])


def run(ctx) -> None:
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    b = ctx.cfg.behaviour
    v4, v6 = int(b.needs_prefix_v4), int(b.needs_prefix_v6)
    common.count_at(ctx)  # the shared flows were counted by the site's rule too
    classified = ctx.shared.get("behaviour_flows")
    if classified is None:  # run alone: classify again
        classified = classify(common.site_flows(ctx).select(*USED), b)
    measured = paths(ctx.active()).cache()
    try:
        nets, names = target_networks([r.target for r in measured.select("target").collect()], v4, v6)
        if names:
            log.warning("behaviour_needs %s: %d tested target(s) are names, not addresses, and cannot be matched "
                        "to flows: %s", ctx.date, len(names), ", ".join(names))
        class_flows = classified.groupBy("class").agg(F.count("*").cast("long").alias("class_flows"))
        on_paths = class_paths(classified, nets, v4, v6).cache()
        try:
            carried = {r.target for r in on_paths.select("target").distinct().collect()}
            idle = sorted(t for group in nets.values() for t, _ in group if t not in carried)
            if idle:
                log.info("behaviour_needs %s: %d tested path(s) carried none of the day's flows: %s",
                         ctx.date, len(idle), ", ".join(idle))
            ctx.write(needs(class_flows, on_paths, measured), NAME)
        finally:
            on_paths.unpersist()
    finally:
        measured.unpersist()
