"""nfdump filter syntax over the flow lake: parse once, compile per engine (Spark columns
in compiler.py, DuckDB SQL in sql.py), stats, host profiles.

    from flowlake.jobs.query import parse, to_column
    df.where(to_column(parse("proto tcp and dst port < 1024")))
"""


def __getattr__(name):
    # parse/FilterError load the grammar (lark) only when asked for: `flowlake host` and
    # `--help` never parse a filter
    if name in ("parse", "FilterError"):
        from . import parser  # noqa: PLC0415  (start-up: lark)

        return getattr(parser, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_column(node):
    """Compile a parsed filter to a Spark Column (imported lazily: Spark is heavy)."""
    from .compiler import to_column as _to_column  # noqa: PLC0415  (start-up: pyspark)

    return _to_column(node)
