"""path_models: latency = a*size + l per path from latency-vs-message-size tests, the
best path per size range, and the two-path split that equalises delivery times.

Input: active records with metric `latency_ms` and a size parameter
(`message_size_bytes`, `size_bytes` or `message_size`); path = parameter `path`,
else "source>destination". Fit: ordinary least squares from the sums (closed form).
Split of S bytes over paths A and B: x on A, S-x on B with a_A*x + l_A = a_B*(S-x) + l_B,
so x = (a_B*S + l_B - l_A) / (a_A + a_B), clipped to [0, S] (then one path takes it all).
"""
from __future__ import annotations

import itertools

from flowlake.collectors.lab.metrics import split  # noqa: F401  (the lab's runner splits by the same rule)
from flowlake.schemas.active_reports import PATH_BEST, PATH_MODELS, PATH_SPLIT

NAME = "path_models"
TABLES = (PATH_MODELS, PATH_BEST, PATH_SPLIT)
SIZE_KEYS = ("message_size_bytes", "size_bytes", "message_size")


def points(active):
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    p, m = F.col("parameters"), F.col("metrics")
    size = F.coalesce(*[p.getItem(k) for k in SIZE_KEYS]).cast("double")
    path = F.coalesce(p.getItem("path"), F.concat_ws(">", "source", "destination"))
    return (active.select(path.alias("path"), size.alias("x"), m.getItem("latency_ms").alias("y"))
            .where(F.col("x").isNotNull() & F.col("y").isNotNull()))


def fit(active):
    """active -> PATH_MODELS rows (without date); paths with < 2 distinct sizes are left out."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark)

    g = points(active).groupBy("path").agg(
        F.count("*").alias("points"), F.sum("x").alias("sx"), F.sum("y").alias("sy"),
        F.sum(F.col("x") * F.col("x")).alias("sxx"), F.sum(F.col("x") * F.col("y")).alias("sxy"),
        F.sum(F.col("y") * F.col("y")).alias("syy"), F.min("x").alias("size_min"), F.max("x").alias("size_max"))
    n = F.col("points").cast("double")
    den = n * F.col("sxx") - F.col("sx") * F.col("sx")
    g = g.where((F.col("size_max") > F.col("size_min")) & (den != 0))
    a = (n * F.col("sxy") - F.col("sx") * F.col("sy")) / den
    g = g.withColumn("a_ms_per_byte", a).withColumn("l_ms", (F.col("sy") - a * F.col("sx")) / n)
    # R^2 from the sums: SSres = syy - a*sxy - l*sy; SStot = syy - sy^2/n
    sstot = F.col("syy") - F.col("sy") * F.col("sy") / n
    ssres = F.col("syy") - F.col("a_ms_per_byte") * F.col("sxy") - F.col("l_ms") * F.col("sy")
    g = (g.withColumn("r2", F.when(sstot > 0, 1 - ssres / sstot))
         .withColumn("bandwidth_bps", F.when(F.col("a_ms_per_byte") > 0, 8.0 / (F.col("a_ms_per_byte") / 1000.0))))
    return g.select(*[f.name for f in PATH_MODELS.fields if f.name != "date"])


def best_ranges(models: list[tuple[str, float, float]]) -> list[tuple[float, float | None, str]]:
    """[(path, a, l)] -> [(size_from, size_to|None, best)] over sizes >= 0 (lower envelope)."""
    if not models:
        return []
    cuts = {0.0}
    for (_, a1, l1), (_, a2, l2) in itertools.combinations(models, 2):
        if a1 != a2:
            s = (l2 - l1) / (a1 - a2)
            if s > 0:
                cuts.add(s)
    cuts = sorted(cuts)

    def best_at(s):
        return min(models, key=lambda m: (m[1] * s + m[2], m[0]))[0]

    out = []
    for i, lo in enumerate(cuts):
        hi = cuts[i + 1] if i + 1 < len(cuts) else None
        probe = (lo + hi) / 2 if hi is not None else lo + max(1.0, lo)
        name = best_at(probe)
        if out and out[-1][2] == name:
            out[-1] = (out[-1][0], hi, name)
        else:
            out.append((lo, hi, name))
    return out




def run(ctx) -> None:
    spark = ctx.spark
    models_df = fit(ctx.active()).cache()
    ctx.results[NAME] = ctx.write(models_df, NAME)
    models = [(r.path, r.a_ms_per_byte, r.l_ms) for r in models_df.collect()]
    best = best_ranges(models)
    ctx.results["path_best"] = ctx.write(spark.createDataFrame(
        best, PATH_BEST.spark_ddl().split(", `date`")[0].replace(" NOT NULL", "")), "path_best")
    rows = []
    for (pa, aa, la), (pb, ab, lb) in itertools.combinations(sorted(models), 2):
        for size in ctx.cfg.active.split_message_bytes:
            size = float(size)
            xa, xb, t = split(aa, la, ab, lb, size)
            single = min(aa * size + la, ab * size + lb)
            rows.append((pa, pb, size, xa, xb, t, single, 1 - t / single if single > 0 else 0.0))
    ctx.results["path_split"] = ctx.write(spark.createDataFrame(
        rows, PATH_SPLIT.spark_ddl().split(", `date`")[0].replace(" NOT NULL", "")), "path_split")
    models_df.unpersist()
