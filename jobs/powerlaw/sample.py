"""A sample as sorted (distinct value, count) pairs: the form every fit works on.

Flow sizes repeat a lot (1e7 flows hold ~2e5 distinct byte counts), so sorting and
counting once makes every later step O(U) or O(U * tail) instead of O(n).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class SampleError(ValueError):
    """The data cannot be fitted (empty, non-positive, non-finite); the message says why."""


@dataclass(frozen=True)
class Sample:
    values: np.ndarray   # float64, strictly increasing, all > 0
    counts: np.ndarray   # int64, all >= 1

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    @property
    def distinct(self) -> int:
        return int(self.values.size)

    def expand(self) -> np.ndarray:
        """Every observation, sorted (for cross-checks against packages taking raw data)."""
        return np.repeat(self.values, self.counts)

    @classmethod
    def from_values(cls, data, what: str = "data") -> Sample:
        x = np.asarray(data, dtype=np.float64).ravel()
        _check(x, what)
        values, counts = np.unique(x, return_counts=True)
        return cls(values, counts.astype(np.int64))

    @classmethod
    def from_pairs(cls, values, counts, what: str = "data") -> Sample:
        """From (value, count) pairs in any order, duplicates allowed (e.g. a Spark groupBy)."""
        v = np.asarray(values, dtype=np.float64).ravel()
        c = np.asarray(counts, dtype=np.int64).ravel()
        if v.shape != c.shape:
            raise SampleError(f"{what}: {v.size} values but {c.size} counts")
        keep = c > 0
        if np.any(c < 0):
            raise SampleError(f"{what}: negative count {int(c[c < 0][0])}")
        v, c = v[keep], c[keep]
        _check(v, what)
        order = np.argsort(v, kind="stable")
        v, c = v[order], c[order]
        uniq, start = np.unique(v, return_index=True)
        return cls(uniq, np.add.reduceat(c, start).astype(np.int64) if v.size else c)


def _check(x: np.ndarray, what: str) -> None:
    if x.size == 0:
        raise SampleError(f"{what}: no values to fit")
    bad = ~np.isfinite(x)
    if bad.any():
        raise SampleError(f"{what}: value #{int(np.argmax(bad)) + 1} is {x[bad][0]!r}, not a finite number")
    if (x <= 0).any():
        i = int(np.argmax(x <= 0))
        raise SampleError(f"{what}: value #{i + 1} is {x[i]!r}; a power law needs positive values")
