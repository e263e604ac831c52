"""Hand-made lake rows for Spark frames, in FLOWS_TABLE's column order.

Columns a test does not name (VLANs, enrichment, run_id, ...) take their explicit unknown
('' or 0), so the rows follow the schema as it grows instead of breaking on every new column."""
from __future__ import annotations

from flowlake.schemas import FLOWS_TABLE

_UNKNOWN = {"string": "", "timestamp_ms": None, "array_int": None, "array_long": [], "array_string": []}


def lake_row(**given) -> tuple:
    unknown = set(given) - {f.name for f in FLOWS_TABLE.fields}
    if unknown:
        raise KeyError(f"not FLOWS_TABLE columns: {sorted(unknown)}")
    return tuple(given.get(f.name, _UNKNOWN.get(f.type, 0)) for f in FLOWS_TABLE.fields)
