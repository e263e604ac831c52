"""[active] interface_speeds: the operator's interface speeds ('exporter/ifindex=bps',
'*' wildcards), read by the stream's volume detector and by the bulk-transfer and
capacity reports alike."""
from __future__ import annotations


def parse_speeds(entries) -> list[tuple[str, str, float]]:
    out = []
    for e in entries:
        try:
            key, bps = str(e).split("=")
            exporter, ifindex = key.split("/")
            out.append((exporter.strip(), ifindex.strip(), float(bps)))
        except ValueError:
            raise ValueError(f"[active] interface_speeds entry {e!r}: expected 'exporter/ifindex=bps'") from None
    return out


def speed_of(speeds, default_bps: float, exporter: str, if_index: int) -> float:
    """[active] interface_speeds, first match wins ('*' wildcards), as the dashboards."""
    for exp_, idx, bps in speeds:
        if exp_ in ("*", exporter) and idx in ("*", str(if_index)):
            return bps
    return default_bps
