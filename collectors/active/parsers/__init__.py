"""Parse one result file into normalised records, all or nothing.

`parse_file(path, fmt="auto")` reads the whole file and returns every record, or raises
ParseError naming file and line: a caller never sees half a file.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..result import ParseError
from . import iperf3, netlogger, ping, pscheduler, sweep_csv

FORMATS = ("auto", "iperf3", "ping", "fping", "pscheduler", "netlogger", "csv")


def detect(path, text: str) -> str:
    head = text.lstrip()[:4096]
    if head.startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ParseError(path, exc.lineno, f"looks like JSON but is not valid: {exc.msg}") from None
        first = doc[0] if isinstance(doc, list) and doc else doc
        if isinstance(first, dict) and "start" in first and "end" in first and "intervals" in first:
            return "iperf3"
        if isinstance(first, dict) and ({"result-merged", "start-time", "task", "test", "run"} & set(first)):
            return "pscheduler"
        if isinstance(first, dict) and "error" in first:
            return "iperf3"
        raise ParseError(path, 1, "JSON but neither iperf3 -J nor a pScheduler result")
    first_line = next((ln.strip() for ln in text.splitlines()
                       if ln.strip() and not ln.lstrip().startswith("#")), "")
    if first_line.startswith("PING ") or (first_line.startswith("[") and " PING " in first_line):
        return "ping"
    if " : [" in head or " : xmt/rcv" in head:
        return "fping"
    if first_line.upper().startswith(("DATE=", "TS=")) or " NL.EVNT=" in first_line:
        return "netlogger"
    if "," in first_line:
        return "csv"
    raise ParseError(path, 1, "cannot tell the format; pass --format "
                              "(iperf3, ping, fping, pscheduler, netlogger, csv)")


def parse_text(path, text: str, fmt: str = "auto") -> list[dict]:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if fmt == "auto":
        fmt = detect(path, text)
    try:
        return _dispatch(path, text, fmt)
    except ParseError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        # A field of the wrong type deep inside a JSON document: name the file and what broke.
        raise ParseError(path, None, f"unexpected value in {fmt} input: {type(exc).__name__}: {exc}") from None


def _dispatch(path, text: str, fmt: str) -> list[dict]:
    if fmt == "iperf3":
        return iperf3.parse(path, text)
    if fmt == "pscheduler":
        return pscheduler.parse(path, text)
    if fmt == "ping":
        return ping.parse_ping(path, text)
    if fmt == "fping":
        return ping.parse_fping(path, text)
    if fmt == "netlogger":
        return netlogger.parse(path, text)
    return sweep_csv.parse(path, text)


def parse_file(path, fmt: str = "auto") -> list[dict]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(path, None, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ParseError(path, None, f"cannot read: {exc.strerror}") from None
    if not text.strip():
        raise ParseError(path, 1, "empty file")
    return parse_text(str(path), text, fmt)
