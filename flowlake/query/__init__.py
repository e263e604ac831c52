"""nfdump filter syntax over the flow lake: parse, compile to Spark columns, stats, host profiles.

    from flowlake.query import parse, to_column
    df.where(to_column(parse("proto tcp and dst port < 1024")))
"""
from .parser import FilterError, parse  # noqa: F401


def to_column(node):
    """Compile a parsed filter to a Spark Column (imported lazily: Spark is heavy)."""
    from .compiler import to_column as _to_column

    return _to_column(node)
