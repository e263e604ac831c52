"""Clauset-Shalizi-Newman (2009) power-law fit: MLE alpha, xmin by minimum KS distance
over EVERY distinct candidate value, exact, on (value, count) pairs.

KS definition (identical to the `powerlaw` package, so results can be compared): for
candidate xmin = u_j, D_j = max over distinct tail values u_k of
|S_emp(< u_k) - P_model(X < u_k)|, both conditioned on X >= u_j. The largest distinct
value is not a candidate.

Speed: continuous alphas for all candidates come from suffix sums in O(U). The KS
scan is exact but pruned: D_j >= max|diff| over any subset of tail points, so a cheap
bound on a quantile grid discards every candidate whose bound exceeds the best exact
D found so far; only the rest are evaluated over their whole tail.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import zeta as hz
from .sample import Sample, SampleError

DEFAULT_MIN_TAIL = 50


@dataclass
class PowerLawFit:
    discrete: bool
    xmin: float
    alpha: float
    sigma: float
    n_tail: int
    n: int
    D: float
    candidates: int = 0          # xmin values considered
    evaluated: int = 0           # candidates whose KS distance was computed over the whole tail
    insufficient: bool = False
    reason: str = ""
    sample: Sample | None = field(default=None, repr=False)

    @property
    def tail_share(self) -> float:
        return self.n_tail / self.n if self.n else float("nan")

    def tail(self) -> Sample:
        keep = self.sample.values >= self.xmin
        return Sample(self.sample.values[keep], self.sample.counts[keep])

    def body(self) -> Sample:
        keep = self.sample.values < self.xmin
        return Sample(self.sample.values[keep], self.sample.counts[keep])

    def model_ccdf(self, x) -> np.ndarray:
        """P(X >= x | X >= xmin) of the fitted power law."""
        x = np.asarray(x, dtype=np.float64)
        if self.discrete:
            return hz.ccdf_ratio(self.alpha, x, self.xmin)
        return np.exp((1.0 - self.alpha) * np.log(x / self.xmin))

    def loglikelihoods(self, x) -> np.ndarray:
        """Per-observation log likelihood of tail values x."""
        x = np.asarray(x, dtype=np.float64)
        if self.discrete:
            return -self.alpha * np.log(x) - hz.log_zeta(self.alpha, self.xmin)
        return np.log((self.alpha - 1) / self.xmin) - self.alpha * np.log(x / self.xmin)

    def ccdf_points(self, points: int = 40) -> tuple[list, list, list]:
        """Log-spaced tail values with the data's and the model's CCDF (for plotting)."""
        t = self.tail()
        if t.distinct == 0:
            return [], [], []
        above = np.cumsum(t.counts[::-1])[::-1] / t.counts.sum()   # P(X >= u_k)
        grid = np.geomspace(t.values[0], t.values[-1], points)
        idx = np.unique(np.clip(np.searchsorted(t.values, grid), 0, t.distinct - 1))
        x = t.values[idx]
        return x.tolist(), above[idx].tolist(), self.model_ccdf(x).tolist()

    def to_dict(self) -> dict:
        return {"discrete": self.discrete, "xmin": self.xmin, "alpha": self.alpha,
                "sigma": self.sigma, "n_tail": self.n_tail, "n": self.n, "D": self.D,
                "tail_share": self.tail_share, "candidates": self.candidates,
                "evaluated": self.evaluated, "insufficient": self.insufficient,
                "reason": self.reason}


def fit(data, discrete: bool = False, xmin: float | None = None,
        min_tail: int = DEFAULT_MIN_TAIL, max_alpha: float | None = None,
        stop_below: float | None = None, try_first: float | None = None) -> PowerLawFit:
    """Fit a power law to `data` (a Sample or an array of positive numbers).

    xmin=None scans every distinct value (CSN 2009); a number fixes it. `max_alpha`
    only exists to reproduce the `powerlaw` package v2, which silently treats
    alpha >= 3 as an invalid fit; leave it None for the faithful method.
    A result whose tail has fewer than `min_tail` observations is returned with
    insufficient=True and a reason, never as a plain number.

    `stop_below` (the bootstrap's: it only asks whether the best D is below the observed
    one) ends the scan at the first candidate whose D is below it, trying the candidate
    at `try_first` before any other: the result's D is then that candidate's, an upper
    bound of the best D and below `stop_below`; otherwise the scan is the full one.
    """
    s = data if isinstance(data, Sample) else Sample.from_values(data)
    if discrete and np.any(s.values != np.round(s.values)):
        bad = s.values[s.values != np.round(s.values)][0]
        raise SampleError(f"discrete fit needs integers, got {bad!r} (use a continuous fit or --scale)")
    scan = _Scan(s, discrete, max_alpha)
    if xmin is None:
        j = scan.best(stop_below, try_first)
    else:
        j = int(np.searchsorted(s.values, xmin))
        if j >= s.distinct - 1:
            raise SampleError(f"xmin={xmin!r}: fewer than two distinct values at or above it")
    res = scan.result(j)
    if res.n_tail < min_tail and not res.insufficient:
        res.insufficient = True
        res.reason = f"only {res.n_tail} observations in the tail (minimum {min_tail})"
    return res


class _Scan:
    """Candidate arrays for one sample: suffix counts, suffix log sums, alphas."""

    LEVEL0 = 24        # quantile grid of the first bound (for every candidate)
    LEVELS = (32, 128)  # finer grids for the candidates that survive the previous bound
    SEED = 8           # candidates evaluated exactly before pruning starts

    def __init__(self, s: Sample, discrete: bool, max_alpha: float | None):
        self.s, self.discrete = s, discrete
        u, c = s.values, s.counts
        self.U = u.size
        self.logu = np.log(u)
        self.N = np.cumsum(c[::-1])[::-1]                  # observations >= u_j
        self.P = int(self.N[0]) - self.N                  # observations <  u_j
        self.J = max(self.U - 1, 0)                       # candidates: all but the largest
        self.evaluated = 0
        if self.J == 0:
            self.alpha = np.empty(0)
            self.valid = np.empty(0, dtype=bool)
            return
        # sum over the tail of log(x / u_j) = sum_{i>j} N_i (log u_i - log u_{i-1}):
        # all terms positive, summed from the top, so small tails stay accurate.
        gaps = np.diff(self.logu) * self.N[1:]
        self.sumlog = np.cumsum(gaps[::-1])[::-1]         # length U-1, index j
        Nj = self.N[:-1].astype(np.float64)
        if discrete:
            self.alpha = hz.mle_alpha(u[:-1], Nj, self.sumlog / Nj + self.logu[:-1])
        else:
            self.alpha = 1.0 + Nj / self.sumlog
        self.valid = np.isfinite(self.alpha) & (self.alpha > 1.0)
        if max_alpha is not None:
            self.valid &= self.alpha < max_alpha

    # ---- model and KS pieces ---------------------------------------------------------
    def _cdf(self, j: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Model P(X < u_k | X >= u_j) for index arrays j, k (same shape)."""
        a = self.alpha[j]
        if self.discrete:
            u = self.s.values
            return 1.0 - hz.ccdf_ratio(a, u[k], u[j])   # j may be a column: one zeta per row
        return -np.expm1((1.0 - a) * (self.logu[k] - self.logu[j]))

    def _diff(self, j: np.ndarray, k: np.ndarray) -> np.ndarray:
        emp = (self.P[k] - self.P[j]) / self.N[j]
        return np.abs(emp - self._cdf(j, k))

    def exact_D(self, j: int) -> float:
        self.evaluated += 1
        k = np.arange(j, self.U)
        return float(np.max(self._diff(np.array([j]), k)))

    def _bound(self, js: np.ndarray, points: int, chunk: int = 8192) -> np.ndarray:
        """Lower bound of D_j: max |diff| over a quantile grid of each candidate's tail."""
        q = (np.arange(1, points + 1) - 0.5) / points
        out = np.empty(js.size)
        for lo in range(0, js.size, chunk):
            j = js[lo:lo + chunk]
            target = self.P[j][:, None] + q[None, :] * self.N[j][:, None]
            k = np.searchsorted(self.P, target, side="left")
            # the point where the empirical CDF crosses q, the one before it, the first
            # jump and the largest value: where the deviation usually peaks
            k = np.concatenate([k, k - 1, (j + 1)[:, None], np.full((j.size, 1), self.U - 1)], axis=1)
            k = np.clip(k, (j + 1)[:, None], self.U - 1)
            out[lo:lo + chunk] = self._diff(j[:, None], k).max(axis=1)
        return out

    def best(self, stop_below: float | None = None, try_first: float | None = None) -> int:
        if self.J == 0:
            raise SampleError("need at least two distinct values to choose xmin")
        cand = np.flatnonzero(self.valid)
        if cand.size == 0:
            return -1
        best_d, best_j = math.inf, -1

        def consider(j: int) -> bool:
            """Evaluate candidate j; True once the best D is below stop_below (decided)."""
            nonlocal best_d, best_j
            d = self.exact_D(j)
            # ties go to the smaller xmin, as argmin does in the reference package
            if d < best_d or (d == best_d and j < best_j):
                best_d, best_j = d, j
            return stop_below is not None and best_d < stop_below

        def decided() -> int:
            self.best_D = best_d
            return best_j

        if stop_below is not None and try_first is not None:
            # a bootstrap replicate is drawn from the fit above its xmin: its D there is
            # usually below the observed D already, which decides the replicate for p
            j = min(int(np.searchsorted(self.s.values, try_first)), self.J - 1)
            if self.valid[j] and consider(j):
                return decided()
        lb = self._bound(cand, self.LEVEL0 if not self.discrete else self.LEVEL0 // 3)
        order = np.argsort(lb, kind="stable")
        for i in order[: self.SEED]:
            if consider(int(cand[i])):
                return decided()
        keep = lb <= best_d
        cand, lb = cand[keep], lb[keep]
        for level in self.LEVELS:    # finer grids for the candidates still in the running
            if cand.size <= 4 * self.SEED:
                break
            lb = np.maximum(lb, self._bound(cand, level))
            keep = lb <= best_d
            cand, lb = cand[keep], lb[keep]
        for i in np.argsort(lb, kind="stable"):
            if lb[i] > best_d:
                break
            if int(cand[i]) != best_j and consider(int(cand[i])):
                break
        return decided()

    def result(self, j: int) -> PowerLawFit:
        s = self.s
        if j < 0:
            return PowerLawFit(self.discrete, math.nan, math.nan, math.nan, 0, s.n, math.nan,
                               self.J, self.evaluated, True, "no candidate xmin gives a valid alpha > 1",
                               s)
        a = float(self.alpha[j])
        n_tail = int(self.N[j])
        sigma = (float(hz.fisher_sigma(a, s.values[j], n_tail)) if self.discrete
                 else (a - 1) / math.sqrt(n_tail))
        d = self.exact_D(j)
        res = PowerLawFit(self.discrete, float(s.values[j]), a, sigma, n_tail, s.n, d,
                          self.J, self.evaluated, sample=s)
        if not self.valid[j]:
            res.insufficient, res.reason = True, f"alpha={a:.4g} is not a valid power-law exponent here"
        return res
