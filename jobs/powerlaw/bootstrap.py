"""Goodness-of-fit p-value by CSN 2009 section 4.1's semi-parametric bootstrap.

Each replicate draws n values: with probability n_tail/n from the fitted power law
above xmin, otherwise uniformly from the observed values below xmin; then refits
everything including xmin, and records its KS distance. p is the share of replicates
whose D is at least the observed one. Replicates work on (value, count) pairs too:
the body is one multinomial draw over the distinct values below xmin.

p needs only which side of the observed D a replicate falls on, so a replicate's xmin
scan stops at the first candidate below it, trying the fitted xmin first: on a day of
border flows, where p is 0, that one candidate decides nearly every replicate (the demo
day's largest window: 31 s -> 1 s). `decide=False` scans every replicate whole, for its
exact D; p is the same either way.

With a Spark session the replicates run as tasks (parallelize over seeds); without
one they run locally. Seeds come from one SeedSequence, so results are reproducible
and identical either way.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import zeta as hz
from .fit import PowerLawFit, fit
from .sample import Sample


@dataclass
class BootstrapResult:
    p: float
    replicates: int
    D: list     # per replicate: its D; deciding, for one below the observed D, an upper bound

    def to_dict(self) -> dict:
        return {"p": self.p, "replicates": self.replicates}


def draw_power_law(rng: np.random.Generator, size: int, alpha: float, xmin: float,
                   discrete: bool) -> np.ndarray:
    """Exact inverse-CDF draws from the fitted power law (discrete: Hurwitz zeta law)."""
    r = rng.random(size)
    x = xmin * (1.0 - r) ** (-1.0 / (alpha - 1.0))       # continuous inverse CDF
    if not discrete:
        return x
    # Discrete: X = the largest integer k with S(k) = zeta(a,k)/zeta(a,xmin) >= 1-r.
    # Far tail: solve zeta(a, y) = (1-r) zeta(a, xmin) for real y by Newton in log y
    # (log zeta is nearly linear there), then floor and step until the bracket holds.
    tgt = 1.0 - r
    # Most draws land near xmin: a table of S(k) for the first values answers them
    # with one searchsorted; Newton handles the far tail.
    table_k = xmin + np.arange(4096, dtype=np.float64)
    table_s = hz.ccdf_ratio(alpha, table_k, xmin)            # decreasing, S(xmin) = 1
    pos = np.searchsorted(-table_s, -tgt, side="right") - 1   # last k with S(k) >= tgt
    k = table_k[np.clip(pos, 0, table_k.size - 1)]
    far = np.flatnonzero(pos >= table_k.size - 1)
    if far.size:
        k[far] = _draw_far(alpha, xmin, tgt[far])
    return k


def _draw_far(alpha: float, xmin: float, tgt: np.ndarray) -> np.ndarray:
    from scipy import special  # noqa: PLC0415  (start-up: scipy)

    target = np.log(tgt) + float(hz.log_zeta(alpha, xmin))
    u = np.log(np.maximum((xmin - 0.5) * tgt ** (-1.0 / (alpha - 1.0)) + 0.5, xmin))
    u = np.minimum(u, np.log(1e15))
    act = np.arange(tgt.size)
    for _ in range(10):
        y = np.exp(u[act])
        g = hz.log_zeta(alpha, y) - target[act]
        dg = -alpha * special.zeta(alpha + 1, y) / special.zeta(alpha, y) * y
        step = np.where(np.isfinite(dg) & (dg < 0), g / np.where(dg < 0, dg, -1.0), 0.0)
        u[act] = np.clip(u[act] - step, np.log(xmin), np.log(1e15))
        act = act[np.abs(step) > 1e-10]
        if act.size == 0:
            break
    k = np.maximum(np.floor(np.exp(u) + 1e-9), xmin)
    act = np.arange(tgt.size)
    for _ in range(64):
        kk = k[act]
        down = (hz.ccdf_ratio(alpha, kk, xmin) < tgt[act]) & (kk > xmin)
        up = ~down & (hz.ccdf_ratio(alpha, kk + 1, xmin) >= tgt[act])
        k[act] = kk - down + up
        act = act[down | up]
        if act.size == 0:
            break
    return k


def replicate_D(fitted: dict, body_values: np.ndarray, body_counts: np.ndarray, seed,
                stop_below: float | None = None) -> float:
    """One bootstrap replicate's KS distance (module-level: pickled to Spark workers);
    with `stop_below`, once below it, the first such D the scan finds."""
    rng = np.random.default_rng(seed)
    n, n_tail = fitted["n"], fitted["n_tail"]
    k_tail = int(rng.binomial(n, n_tail / n)) if n_tail < n else n
    parts_v, parts_c = [], []
    if k_tail:
        parts_v.append(draw_power_law(rng, k_tail, fitted["alpha"], fitted["xmin"], fitted["discrete"]))
        parts_c.append(np.ones(k_tail, dtype=np.int64))
    if n - k_tail and body_counts.size:
        parts_v.append(body_values)
        parts_c.append(rng.multinomial(n - k_tail, body_counts / body_counts.sum()))
    s = Sample.from_pairs(np.concatenate(parts_v), np.concatenate(parts_c))
    if s.distinct < 2:
        return float("inf")
    res = fit(s, discrete=fitted["discrete"], min_tail=0, max_alpha=fitted.get("max_alpha"),
              stop_below=stop_below, try_first=fitted["xmin"])
    return float(res.D) if np.isfinite(res.D) else float("inf")


def python_workers_ready(spark):
    """The SparkContext (flowlake.base.spark.session already points workers at the venv's Python)."""
    return spark.sparkContext


def bootstrap_p(res: PowerLawFit, replicates: int = 1000, seed: int = 0, spark=None,
                progress=None, max_alpha: float | None = None, decide: bool = True) -> BootstrapResult:
    """p-value of the fit `res` from `replicates` semi-parametric bootstrap samples."""
    if res.insufficient or not np.isfinite(res.D):
        return BootstrapResult(float("nan"), 0, [])
    body = res.body()
    fitted = {"n": res.n, "n_tail": res.n_tail, "alpha": res.alpha, "xmin": res.xmin,
              "discrete": res.discrete, "max_alpha": max_alpha}
    seeds = np.random.SeedSequence(seed).spawn(replicates)
    bv, bc = body.values, body.counts
    stop = float(res.D) if decide else None
    if spark is not None:
        sc = python_workers_ready(spark)
        slices = max(1, min(replicates, sc.defaultParallelism * 4))
        ds = (sc.parallelize(list(enumerate(seeds)), slices)
              .map(lambda item: (item[0], replicate_D(fitted, bv, bc, item[1], stop)))
              .collect())
        D = [d for _, d in sorted(ds)]
    else:
        D = []
        for s in seeds:
            D.append(replicate_D(fitted, bv, bc, s, stop))
            if progress:
                progress()
    p = float(np.mean(np.asarray(D) >= res.D)) if D else float("nan")
    return BootstrapResult(p, len(D), D)
