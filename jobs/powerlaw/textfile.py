"""Read one column of numbers from a text file (blank lines and # comments allowed).

The fast path is pandas' C parser (1e7 lines in about a second). When it rejects the
file, or finds a non-positive or non-finite value, a line-by-line pass finds the first
offending line so the error can name it: the slow path only runs on bad input.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np


class InputError(ValueError):
    """Bad input file; the message names the file and line."""


def read_numbers(path: str | Path, scale: float = 1.0) -> np.ndarray:
    path = Path(path)
    x = _read_arrow(path)
    if x is not None:
        if x.size and np.all(np.isfinite(x)) and not np.any(x <= 0):
            return x * scale if scale != 1.0 else x
        _diagnose(path)
    try:
        import pandas as pd  # noqa: PLC0415  (start-up: pandas)

        frame = pd.read_csv(path, header=None, names=["v"], comment="#", skip_blank_lines=True,
                            dtype=np.float64, engine="c", skipinitialspace=True)
        x = frame["v"].to_numpy()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a text file") from None
    except Exception:  # noqa: BLE001 - any parser failure: find the line ourselves
        x = None
    if x is None or x.size == 0 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        _diagnose(path)           # raises with the file and line
    return x * scale if scale != 1.0 else x


def _read_arrow(path: Path):
    """pyarrow's multi-threaded CSV reader: fastest, but knows no # comments (then None)."""
    try:
        import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)
        from pyarrow import csv  # noqa: PLC0415  (start-up: pyarrow)

        table = csv.read_csv(path, read_options=csv.ReadOptions(column_names=["v"]),
                             parse_options=csv.ParseOptions(delimiter="\t"),
                             convert_options=csv.ConvertOptions(column_types={"v": pa.float64()}))
        col = table.column("v")
        if col.null_count:
            return None
        return col.to_numpy()
    except Exception:  # noqa: BLE001 - comments, odd text, missing file: the slower paths decide
        return None


def _diagnose(path: Path) -> None:
    seen = 0
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            try:
                v = float(text)
            except ValueError:
                raise InputError(f"{path}, line {lineno}: {text[:40]!r} is not a number") from None
            if not math.isfinite(v):
                raise InputError(f"{path}, line {lineno}: {text!r} is not a finite number")
            if v <= 0:
                raise InputError(f"{path}, line {lineno}: {text!r} is not positive "
                                 "(a power law is defined for x > 0)")
            seen += 1
    if seen == 0:
        raise InputError(f"{path}: no numbers found (only blank lines or # comments)")
    raise InputError(f"{path}: could not be parsed as one column of numbers")
