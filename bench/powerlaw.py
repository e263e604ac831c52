"""Benchmark: flowlake.jobs.powerlaw's exact xmin scan against the `powerlaw` package.

Integer flow sizes (lognormal body + Pareto tail, ~2e5 distinct values at 1e7) are
fitted at 1e4, 1e5, 1e6 and 1e7 values; the 1e7 case is written to a text file and
timed from reading the file on. The package's exhaustive scan (xmin=None, every
candidate) runs only up to --package-max values; every ratio printed comes from runs
made here, in this process, on the same data. Nothing is extrapolated.

    .venv/bin/python bench/powerlaw.py                   # package up to 3e4 values
    .venv/bin/python bench/powerlaw.py --package-max 100000   # also 1e5 (several minutes)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

# this file is bench/powerlaw.py: keep its folder off sys.path so `import powerlaw`
# finds the package, not this script
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import numpy as np  # noqa: E402

from flowlake.jobs.powerlaw import Sample, fit  # noqa: E402
from flowlake.jobs.powerlaw.textfile import read_numbers  # noqa: E402


def flow_sizes(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    nt = n // 5
    body = rng.lognormal(6.5, 2.3, n - nt)
    tail = 3000.0 * (1 - rng.random(nt)) ** (-1 / 1.3)         # alpha = 2.3 above 3000 bytes
    return np.floor(np.minimum(np.concatenate([body, tail]), 1e12)) + 40


def package_scan(x: np.ndarray, discrete: bool):
    import powerlaw

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        f = powerlaw.Fit(x, discrete=discrete, xmin=None, estimate_discrete=False, verbose=0)
        return time.perf_counter() - t, float(f.xmin), float(f.alpha)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,30000,100000,1000000,10000000")
    ap.add_argument("--package-max", type=int, default=30000,
                    help="run the powerlaw package's scan only up to this many values")
    ap.add_argument("--package-discrete-max", type=int, default=10000,
                    help="the package's discrete scan (numerical zeta fit per candidate) is far slower")
    args = ap.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    print(f"{'n':>9} {'distinct':>8} {'mode':>10} {'ours s':>8} {'xmin':>9} {'alpha':>8} "
          f"{'package s':>10} {'pkg xmin':>9} {'pkg alpha':>9} {'same':>5} {'speed-up':>9}")
    for n in sizes:
        x = flow_sizes(n)
        for discrete in (False, True):
            mode = "discrete" if discrete else "continuous"
            if n >= 10_000_000:
                # file written once, then timed from reading it back
                with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
                    path = fh.name
                np.savetxt(path, x, fmt="%d")
                t = time.perf_counter()
                data = read_numbers(path)
                t_read = time.perf_counter() - t
                s = Sample.from_values(data)
                res = fit(s, discrete=discrete, max_alpha=None)
                ours = time.perf_counter() - t
                os.unlink(path)
                note = f"  (file read {t_read:.2f} s included)"
            else:
                t = time.perf_counter()
                res = fit(Sample.from_values(x), discrete=discrete)
                ours = time.perf_counter() - t
                note = ""
            limit = args.package_discrete_max if discrete else args.package_max
            if n <= limit:
                # the package treats alpha >= 3 as invalid; compare under the same rule
                cmp_res = fit(Sample.from_values(x), discrete=discrete, max_alpha=3.0)
                pt, pxmin, palpha = package_scan(x, discrete)
                same = cmp_res.xmin == pxmin and abs(cmp_res.alpha - palpha) < (1e-6 if not discrete else 5e-4)
                pkg = f"{pt:>10.2f} {pxmin:>9.0f} {palpha:>9.4f} {str(same):>5} {pt / ours:>8.0f}x"
            else:
                pkg = f"{'not run':>10} {'':>9} {'':>9} {'':>5} {'':>9}"
            print(f"{n:>9} {Sample.from_values(x).distinct:>8} {mode:>10} {ours:>8.3f} "
                  f"{res.xmin:>9.0f} {res.alpha:>8.4f} {pkg}{note}", flush=True)


if __name__ == "__main__":
    main()
