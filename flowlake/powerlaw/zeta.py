"""Hurwitz zeta helpers for the discrete power law p(x) = x^-a / zeta(a, xmin).

scipy's zeta underflows to 0 once a*log(q) exceeds ~700 (e.g. a > 46 at q = 1e6), so
logs fall back to an Euler-Maclaurin expansion after shifting q far enough above a.
"""
from __future__ import annotations

import numpy as np
from scipy import special

_TINY = 1e-250


def log_zeta(a, q) -> np.ndarray:
    """log zeta(a, q) for a > 1, q >= 1, finite even where zeta itself underflows."""
    a, q = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(q, dtype=np.float64))
    z = special.zeta(a, q)
    with np.errstate(divide="ignore"):
        out = np.log(z)
    bad = ~(z > _TINY) | ~np.isfinite(out)
    if bad.any():
        out = np.array(out, dtype=np.float64, copy=True)
        for i in np.flatnonzero(bad.ravel()):
            out.flat[i] = _log_zeta_scalar(float(a.flat[i]), float(q.flat[i]))
    return out


def _log_zeta_scalar(a: float, q: float) -> float:
    # zeta(a,q) = sum_{k<m} (q+k)^-a + zeta(a, q+m); scale by q^a to stay in range.
    m = int(max(0.0, np.ceil(2 * a + 10 - q)))
    k = np.arange(m, dtype=np.float64)
    head = np.sum(np.exp(-a * np.log1p(k / q))) if m else 0.0
    s = q + m
    # Euler-Maclaurin tail at s (s >= 2a + 10, so the series converges fast), times q^a.
    em = (s / (a - 1) + 0.5 + a / (12 * s) - a * (a + 1) * (a + 2) / (720 * s ** 3)
          + a * (a + 1) * (a + 2) * (a + 3) * (a + 4) / (30240 * s ** 5))
    tail = np.exp(-a * np.log(s / q)) * em
    return float(-a * np.log(q) + np.log(head + tail))


def ccdf_ratio(a, x, xmin) -> np.ndarray:
    """P(X >= x) = zeta(a, x) / zeta(a, xmin) for the discrete power law above xmin.

    `a` and `xmin` may have fewer elements than `x` (e.g. one per row): the denominator
    is computed at their own shape and broadcast, not once per element of x.
    """
    a = np.asarray(a, dtype=np.float64)
    xmin = np.asarray(xmin, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    den = special.zeta(a, xmin)
    out = special.zeta(np.broadcast_to(a, np.broadcast_shapes(a.shape, x.shape)), x) / np.where(den > 0, den, 1.0)
    low = ~(den > _TINY)
    if low.any():
        shape = np.broadcast_shapes(a.shape, x.shape, xmin.shape)
        aa, xx, mm = (np.broadcast_to(v, shape) for v in (a, x, xmin))
        lowb = np.broadcast_to(low, shape)
        out = np.array(np.broadcast_to(out, shape), copy=True)
        out[lowb] = np.exp(log_zeta(aa[lowb], xx[lowb]) - log_zeta(aa[lowb], mm[lowb]))
    return out


def mle_alpha(xmin, n, mean_log, tol: float = 1e-10, max_iter: int = 100) -> np.ndarray:
    """Exact discrete MLE: argmin_a log zeta(a, xmin) + a * mean_log, vectorised over candidates.

    The objective is convex in a (log of a sum of exponentials in a), so a safeguarded
    Newton iteration with a shrinking bracket converges to the unique minimum; derivatives
    are central differences of log zeta (root error ~1e-9, far below any sigma).
    """
    xmin = np.asarray(xmin, dtype=np.float64)
    m = np.asarray(mean_log, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    # Start from CSN's eq. 3.7 approximation (xmin - 1/2), usually within 1e-2 of the root.
    sum_log = n * (m - np.log(np.maximum(xmin - 0.5, 0.5)))
    a = 1.0 + n / np.where(sum_log > 0, sum_log, np.inf)
    a = np.clip(np.nan_to_num(a, nan=2.0), 1.0 + 1e-6, 200.0)
    lo = np.full_like(a, 1.0)
    hi = np.full_like(a, 200.0)  # beyond this the tail is all at xmin: degenerate
    active = np.arange(a.size)
    for _ in range(max_iter):
        if active.size == 0:
            break
        aa, q, mm = a[active], xmin[active], m[active]
        h = np.minimum(1e-5, (aa - 1.0) / 4)
        lm, l0, lp = log_zeta(aa - h, q), log_zeta(aa, q), log_zeta(aa + h, q)
        g = (lp - lm) / (2 * h) + mm          # derivative of the objective
        curv = (lp - 2 * l0 + lm) / (h * h)
        lo[active] = np.where(g < 0, aa, lo[active])
        hi[active] = np.where(g > 0, aa, hi[active])
        step = np.where(curv > 0, g / np.where(curv > 0, curv, 1.0), np.nan)
        new = aa - step
        l_, h_ = lo[active], hi[active]
        outside = ~np.isfinite(new) | (new <= l_) | (new >= h_)
        bisect = 0.5 * (l_ + h_)
        new = np.where(outside, bisect, new)
        a[active] = new
        done = (np.abs(new - aa) < tol * np.maximum(1.0, aa)) | (h_ - l_ < tol)
        active = active[~done]
    return a


def fisher_sigma(alpha, xmin, n) -> np.ndarray:
    """CSN eq. 3.6 style standard error for the discrete MLE: 1/sqrt(n * d2/da2 log zeta)."""
    alpha = np.asarray(alpha, dtype=np.float64)
    h = np.minimum(1e-3, (alpha - 1.0) / 4)
    lm, l0, lp = log_zeta(alpha - h, xmin), log_zeta(alpha, xmin), log_zeta(alpha + h, xmin)
    curv = (lp - 2 * l0 + lm) / (h * h)
    return 1.0 / np.sqrt(np.asarray(n, dtype=np.float64) * curv)
