"""Hurwitz zeta helpers for the discrete power law p(x) = x^-a / zeta(a, xmin).

scipy's zeta underflows to 0 once a*log(q) exceeds ~700 (e.g. a > 46 at q = 1e6), so
logs fall back to an Euler-Maclaurin expansion after shifting q far enough above a.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special

_TINY = 1e-250


def hurwitz_zeta(a, x) -> np.ndarray:
    """zeta(a, x) as scipy.special.zeta, 4x faster where x is large (the KS scans' hot path).

    For x >= max(100, 10 (a + 6)) the Euler-Maclaurin expansion through x^-(a+5) is exact
    to ~1e-14 relative; smaller x go to scipy.
    """
    a, x = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(x, dtype=np.float64))
    big = x >= np.maximum(100.0, 10.0 * (a + 6.0))
    if not big.any():
        return special.zeta(a, x)
    out = np.empty(x.shape)
    small = ~big
    if small.any():
        out[small] = special.zeta(a[small], x[small])
    ab, xb = a[big], x[big]
    with np.errstate(under="ignore"):
        out[big] = np.exp(-ab * np.log(xb)) * _em_series(ab, xb)
    return out


def _em_series(a, s):
    """zeta(a, s) * s^a by Euler-Maclaurin through s^-5: exact to ~1e-14 once s >> a."""
    inv = 1.0 / s
    inv2 = inv * inv
    p3 = a * (a + 1) * (a + 2)
    return (s / (a - 1) + 0.5 + a / 12 * inv - p3 / 720 * inv * inv2
            + p3 * (a + 3) * (a + 4) / 30240 * inv * inv2 * inv2)


def log_zeta(a, q) -> np.ndarray:
    """log zeta(a, q) for a > 1, q >= 1, finite even where zeta itself underflows."""
    a, q = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(q, dtype=np.float64))
    z = hurwitz_zeta(a, q)
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
    tail = np.exp(-a * np.log(s / q)) * _em_series(a, s)
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
    out = hurwitz_zeta(a, x) / np.where(den > 0, den, 1.0)
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


def log_cutoff_sum(a: float, lam: float, q: float) -> float:
    """log sum_{x = q, q+1, ...} x^-a e^(-lam x): the discrete power law with exponential
    cutoff's normalisation, i.e. log(e^(-lam q) Lerch Phi(e^-lam, a, q)), for a > 0, lam > 0.

    mpmath's lerchphi takes 3-20 ms a call, and a cutoff fit calls it a few hundred times
    per window. Here: terms relative to the first, summed directly while the cutoff makes
    them fall fast (lam >= 0.05: under 800 terms), otherwise the first terms until a/x is
    small and Euler-Maclaurin (through the fifth derivative, error ~1e-11) for the rest,
    with the one integral from mpmath's incomplete gamma. Checked against lerchphi.
    """
    import mpmath  # noqa: PLC0415  (start-up: mpmath)

    def first_terms(m: int) -> float:     # sum over x = q .. q+m-1, relative to the first
        k = np.arange(m, dtype=np.float64)
        return float(np.sum(np.exp(-a * np.log1p(k / q) - lam * k)))

    log_f0 = -a * np.log(q) - lam * q
    if lam >= 0.05:
        return float(log_f0 + np.log(first_terms(int(np.ceil(40.0 / lam)) + 1)))
    m = int(max(0.0, np.ceil(10.0 * a - q)))              # a/s <= 0.1 at s = q + m
    head = first_terms(m)
    s = q + m
    g_s = math.exp(-a * math.log(s / q) - lam * m)        # x^-a e^(-lam x) at s, over its value at q
    # derivatives of g at s as g * (complete Bell polynomials of h = (log g)' and h's derivatives)
    h1, h2, h3, h4, h5 = -a / s - lam, a / s**2, -2 * a / s**3, 6 * a / s**4, -24 * a / s**5
    y1 = h1
    y3 = h3 + 3 * h2 * h1 + h1**3
    y5 = h5 + 5 * h4 * h1 + 10 * h3 * h2 + 10 * h3 * h1**2 + 15 * h2**2 * h1 + 10 * h2 * h1**3 + h1**5
    em = g_s * (0.5 - y1 / 12 + y3 / 720 - y5 / 30240)
    # integral of x^-a e^(-lam x) over [s, inf) = lam^(a-1) Gamma(1-a, lam s), relative to the first term
    log_int = float((a - 1) * mpmath.log(lam) + mpmath.log(mpmath.gammainc(1 - a, lam * s))) - log_f0
    return float(log_f0 + np.log(head + em + math.exp(log_int)))
