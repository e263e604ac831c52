"""The analysts' entry to the lake: `from flowlake.lake import duckdb_connect`.

A stable public name for pipelines/lake.py, which the lake's stage owns (the retrying
DuckDB connection that is safe from compaction swaps; Superset loads that file by path)."""
from flowlake.pipelines.lake import SWAP_RETRIED, SWAP_RETRIES, duckdb_connect, run_retrying  # noqa: F401
