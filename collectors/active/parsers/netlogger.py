"""NetLogger ULM lines: whitespace-separated KEY=value pairs, one event per line.

Classic ULM: `DATE=20020329210355.443568 HOST=10.1.1.10 PROG=nliperf NL.EVNT=... VAL=2`
(DATE is YYYYMMDDhhmmss[.frac], UTC). NetLogger 3 best-practice lines use `ts=` (ISO
8601) and `event=`; both are read. Numeric values become metrics, the rest parameters.
"""
from __future__ import annotations

import datetime as dt
import shlex

from ..result import ParseError, make, to_ms

_RESERVED = {"DATE", "TS", "HOST", "SRC", "DST", "NL.EVNT", "EVENT", "PROG"}


def _date(value: str, path, no) -> int:
    try:
        if "T" in value or "-" in value:
            return to_ms(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
        whole, _, frac = value.partition(".")
        t = dt.datetime.strptime(whole, "%Y%m%d%H%M%S").replace(tzinfo=dt.timezone.utc)
        return to_ms(t) + (int(round(float("0." + frac) * 1000)) if frac else 0)
    except ValueError:
        raise ParseError(path, no, f"bad NetLogger timestamp {value!r}") from None


def parse(path, text: str) -> list[dict]:
    out = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            tokens = shlex.split(line)
        except ValueError as exc:
            raise ParseError(path, no, f"unbalanced quotes: {exc}") from None
        fields = {}
        for tok in tokens:
            key, eq, value = tok.partition("=")
            if not eq or not key:
                raise ParseError(path, no, f"not a KEY=value pair: {tok!r}")
            fields[key] = value
        upper = {k.upper(): v for k, v in fields.items()}
        when = upper.get("DATE") or upper.get("TS")
        if when is None:
            raise ParseError(path, no, "NetLogger line without DATE= (or ts=)")
        t = _date(when, path, no)
        event = upper.get("NL.EVNT") or upper.get("EVENT")
        if not event:
            raise ParseError(path, no, "NetLogger line without NL.EVNT= (or event=)")
        params, metrics = {"event": event, "prog": upper.get("PROG", "")}, {}
        for k, v in fields.items():
            if k.upper() in _RESERVED:
                continue
            try:
                metrics[k.lower()] = float(v)
            except ValueError:
                params[k.lower()] = v
        source = upper.get("SRC") or upper.get("HOST", "")
        out.append(make("event", source, upper.get("DST", ""), t, t, params, metrics, "netlogger", path))
    if not out:
        raise ParseError(path, 1, "no NetLogger events in file")
    return out
