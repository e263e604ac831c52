"""schemas: the single definition of every record and table.

`flowlake schema avro|spark|markdown NAME` prints the generated views; the Go shipper's
Avro encoder is checked against `FLOW.avro_schema()` by the tests.
"""
from . import flow
import importlib
import pkgutil

from .core import Field, Record, TYPES  # noqa: F401
from .flow import FLOW, FLOWS_TABLE  # noqa: F401

# Single-object encoding (Avro spec): 0xC3 0x01, then the schema's CRC-64-AVRO
# fingerprint (little endian), then the binary record. The fingerprint lets the ingest
# reject a message written with another schema instead of decoding garbage.
SINGLE_OBJECT_MAGIC = b"\xc3\x01"


def registry() -> dict[str, Record]:
    """Every declared record/table by name (modules register theirs here)."""
    out = {r.name: r for r in (flow.FLOW, flow.FLOWS_TABLE)}
    for mod in _optional_modules():
        for value in vars(mod).values():
            if isinstance(value, Record):
                out[value.name] = value
    return out


def _optional_modules():
    for info in pkgutil.iter_modules(__path__):
        if info.name in ("core", "flow", "avro", "docs"):
            continue
        yield importlib.import_module(f"{__name__}.{info.name}")
