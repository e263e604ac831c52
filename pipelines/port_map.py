"""Port/protocol -> service map used to label flows with an application.

The defaults are pipelines/port_map.csv; `reports.port_map` may name another CSV file of the
same format (`port,proto,service`) whose lines add to or override the defaults. Errors
name the file and line so an operator can fix a typo without reading code.
"""
from __future__ import annotations

from pathlib import Path

from flowlake.base.operator_files import OperatorFileError, csv_rows

DEFAULT_FILE = Path(__file__).with_name("port_map.csv")
PROTOS = {"tcp": (6,), "udp": (17,), "sctp": (132,), "any": (6, 17, 132)}
PORTED_PROTOS = (6, 17, 132)  # protocols whose ports mean something
MAX_ENTRIES = 200_000  # keeps the broadcast table small; a whole port range for 3 protos is 196,608


class PortMapError(OperatorFileError):
    """A port map file is malformed; the message names file and line."""


def parse(path: str | Path) -> dict[tuple[int, int], str]:
    """Read one port map CSV into {(proto, port): service}."""
    out: dict[tuple[int, int], str] = {}
    for lineno, row in csv_rows(path, "port map", PortMapError):
        cells = [c.strip() for c in row]
        if [c.lower() for c in cells] == ["port", "proto", "service"]:
            continue  # header
        where = f"{path}, line {lineno}"
        if len(cells) != 3:
            raise PortMapError(f"{where}: expected 3 fields port,proto,service, got {len(cells)}: {','.join(row)!r}")
        port_text, proto_text, service = cells
        lo, hi = _ports(port_text, where)
        protos = _protos(proto_text, where)
        if not service or any(ch in service for ch in "\"'\t"):
            raise PortMapError(f"{where}: field service: empty or contains quotes/tabs: {service!r}")
        for proto in protos:
            for port in range(lo, hi + 1):
                out[(proto, port)] = service
        if len(out) > MAX_ENTRIES:
            raise PortMapError(f"{where}: more than {MAX_ENTRIES} port/protocol entries; use smaller ranges")
    return out


def _ports(text: str, where: str) -> tuple[int, int]:
    lo_text, sep, hi_text = text.partition("-")
    try:
        lo = int(lo_text)
        hi = int(hi_text) if sep else lo
    except ValueError:
        raise PortMapError(f"{where}: field port: {text!r} is not a port (0-65535) or range lo-hi") from None
    if not (0 <= lo <= 65535 and 0 <= hi <= 65535):
        raise PortMapError(f"{where}: field port: {text!r} outside 0-65535")
    if hi < lo:
        raise PortMapError(f"{where}: field port: range {text!r} ends before it starts")
    return lo, hi


def _protos(text: str, where: str) -> tuple[int, ...]:
    low = text.lower()
    if low in PROTOS:
        return PROTOS[low]
    if low.isascii() and low.isdigit() and 0 <= int(low) <= 255:  # str.isdigit() also takes '²', int() does not
        return (int(low),)
    raise PortMapError(f"{where}: field proto: {text!r} is not tcp, udp, sctp, any or a protocol number 0-255")


def load(extra: str | Path | None = None) -> dict[tuple[int, int], str]:
    """The defaults, then the configured file (if any) on top."""
    mapping = parse(DEFAULT_FILE)
    if extra:
        mapping.update(parse(extra))
    return mapping


def from_config(cfg) -> dict[tuple[int, int], str]:
    path = cfg.reports.port_map
    if path and not Path(path).is_absolute():
        path = Path(cfg.base_dir) / path
    return load(path or None)
