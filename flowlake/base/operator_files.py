"""An operator's CSV files (the enrichment's networks file, the reports' port map): read
as UTF-8 (a leading BOM, as spreadsheets write it, is dropped) and split into the records
that say something, each with its line number, so every error names the file and line.
"""
from __future__ import annotations

import csv
from pathlib import Path


class OperatorFileError(ValueError):
    """An operator's file is unreadable or malformed; the message names file and line."""


def csv_rows(path: str | Path, what: str, error: type[ValueError] = OperatorFileError,
             name: str | None = None) -> list[tuple[int, list[str]]]:
    """[(line number, fields)] of the file's records, blank lines and `#` comments left
    out. `what` names the file in errors ("port map"), `error` is the caller's exception
    class and `name` the operator's file when `path` is a copy of it."""
    shown = name or str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise error(f"{shown}: cannot read the {what}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = exc.object.count(b"\n", 0, exc.start) + 1  # exc.object: the bytes after a BOM
        at = exc.start + len(data) - len(exc.object)
        raise error(f"{shown}:{line}: not UTF-8 text ({exc.reason} at byte {at})") from None
    reader = csv.reader(text.splitlines())
    out = []
    try:
        for row in reader:
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            out.append((reader.line_num, row))
    except csv.Error as exc:
        raise error(f"{shown}:{reader.line_num}: not CSV: {exc}") from None
    return out
