"""The statistics a query can ask for (`-s KEY/ORDER`, `-A KEYS`): names, their lake
columns and the parsing of the options. Pure Python, shared by both engines (stats.py on
Spark, duck.py on DuckDB), so the DuckDB path never imports Spark.
"""
from __future__ import annotations

# nfdump statistic name -> lake column(s); two columns mean "either" (a flow counts for both)
STAT_KEYS = {
    "srcip": ("src_addr",), "dstip": ("dst_addr",), "ip": ("src_addr", "dst_addr"),
    "srcport": ("src_port",), "dstport": ("dst_port",), "port": ("src_port", "dst_port"),
    "proto": ("proto",), "srcas": ("src_as",), "dstas": ("dst_as",), "as": ("src_as", "dst_as"),
    "inif": ("input_if",), "outif": ("output_if",), "if": ("input_if", "output_if"),
    "router": ("exporter",), "exporter": ("exporter",), "tos": ("tos",), "srctos": ("tos",),
}
ORDERS = ("flows", "packets", "bytes", "pps", "bps", "bpp")
# `-A` / record keys
AGG_KEYS = {"srcip": "src_addr", "dstip": "dst_addr", "srcport": "src_port", "dstport": "dst_port",
            "proto": "proto", "srcas": "src_as", "dstas": "dst_as", "inif": "input_if", "outif": "output_if",
            "router": "exporter", "exporter": "exporter", "tos": "tos"}
RECORD_KEYS = ("srcip", "dstip", "srcport", "dstport", "proto")


class StatError(ValueError):
    pass


def parse_stat(spec: str) -> tuple[str, str]:
    """'srcip/bytes' -> ('srcip', 'bytes'); order defaults to flows as in nfdump."""
    key, _, order = spec.strip().lower().partition("/")
    order = order or "flows"
    if key not in STAT_KEYS and key != "record":
        raise StatError(f"unknown statistic '{key}' (one of: record, {', '.join(sorted(STAT_KEYS))})")
    if order not in ORDERS:
        raise StatError(f"unknown order '{order}' in '{spec}' (one of: {', '.join(ORDERS)})")
    return key, order


def parse_aggregate(spec: str) -> list[str]:
    keys = [k.strip().lower() for k in spec.split(",") if k.strip()]
    bad = [k for k in keys if k not in AGG_KEYS]
    if bad or not keys:
        raise StatError(f"unknown aggregation key '{bad[0] if bad else spec}' (one of: {', '.join(sorted(AGG_KEYS))})")
    return keys


# Columns of a top-N row (`-s`) and the measures of an aggregate row (`-A`), for every engine.
TOP_COLUMNS = ("rank", "val", "flows", "flows_pct", "packets", "packets_pct", "bytes", "bytes_pct",
               "first_seen", "last_seen", "duration_s", "pps", "bps", "bpp")
MEASURES = ("flows", "packets", "bytes", "first_seen", "last_seen", "duration_s", "pps", "bps", "bpp")
FLOW_COLUMNS = ("time_start", "time_end", "exporter", "input_if", "output_if", "src_addr", "dst_addr",
                "src_port", "dst_port", "proto", "tcp_flags", "tos", "packets", "bytes", "sampling_rate",
                "src_as", "dst_as", "source_file", "file_seq")


def pct(part, total) -> float:
    """part as a percentage of total, one decimal, rounded half up in exact integer
    arithmetic. Computed here on the result rows for every engine: a double's round()
    differs between Spark and DuckDB at ties, this does not."""
    if not total:
        return 0.0
    return ((2000 * int(part) + int(total)) // (2 * int(total))) / 10


def with_shares(row: dict) -> dict:
    """A ranked top-N row with totals t_flows/t_packets/t_bytes -> the TOP_COLUMNS row."""
    for m in ("flows", "packets", "bytes"):
        row[f"{m}_pct"] = pct(row[m], row[f"t_{m}"])
    return {c: row[c] for c in TOP_COLUMNS}
