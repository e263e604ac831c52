"""The Spark engine of `flowlake query` and `flowlake host`: for a lake that lives on a
Spark cluster. The same operations and rows as duck.DuckEngine, from the DataFrame
transforms of compiler.py, stats.py and host.py."""
from __future__ import annotations

import datetime as dt

from flowlake.base import spark as spark_factory
from flowlake.pipelines.lake_read import LakeReader

from .. import count_rule
from ..count_once import count_once
from . import to_column
from .lake import read_flows
from .spec import FLOW_COLUMNS, with_shares


class SparkEngine:
    name = "spark"

    def __init__(self, cfg, start: dt.datetime | None = None, end: dt.datetime | None = None,
                 master: str | None = None, progress=None, as_of=None, count_at: str = "all",
                 window_seconds: float = 60.0):
        # Spark draws its own stage progress bar on stderr
        extra = {"spark.ui.showConsoleProgress": "true"} if progress else None
        self.spark = spark_factory.session("flowlake-query", master=master, cfg=cfg, extra=extra)

        # the window's hours at one version (--as-of's, else the newest) / pinned until close()
        self.snapshot = LakeReader(cfg.lake, as_of=as_of)
        try:
            self.flows = read_flows(self.spark, cfg.lake, start, end, self.snapshot)
        except ValueError:  # --as-of the table cannot answer
            self.snapshot.close()
            raise
        self.version = self.snapshot.versions.get("flows")
        # the counting rule (issue 34): records, statistics and aggregates read the flows it
        # counts (jobs/count_once.py, the Spark form of the DuckDB engine's count_rule.duckdb_sql)
        self.count_at, self.window_seconds = count_rule.check_rule(count_at, "--count-at"), float(window_seconds)
        self.counted = count_once(self.flows, self.count_at, self.window_seconds)

    def _where(self, tree):
        return self.counted.where(to_column(tree))

    def records(self, tree, limit: int = 0):
        df = self._where(tree).orderBy("time_start", "source_file", "file_seq").select(*FLOW_COLUMNS)
        for r in (df.limit(limit).collect() if limit else df.toLocalIterator()):
            yield r.asDict()

    def tops(self, tree, specs, n: int = 10) -> dict:
        return {f"{key}/{order}": self.top(tree, key, order, n) for key, order in specs}

    def top(self, tree, key: str, order: str = "flows", n: int = 10) -> list[dict]:
        from .stats import top  # noqa: PLC0415  (start-up: pyspark)

        return [with_shares(r.asDict()) for r in top(self._where(tree), key, order, n).collect()]

    def aggregate(self, tree, keys: list[str], order: str = "flows", limit: int = 0) -> list[dict]:
        from .stats import aggregate  # noqa: PLC0415  (start-up: pyspark)

        df = aggregate(self._where(tree), keys, order)
        return [r.asDict() for r in (df.limit(limit) if limit else df).collect()]

    def host(self, address: str, n: int = 10, nat_rows: int = 50) -> dict:
        from .host import profile  # noqa: PLC0415  (start-up: pyspark)

        return profile(self.flows, address, n, nat_rows)

    def close(self) -> None:
        self.snapshot.close()  # the session is the process's (tests share one); it ends with the process
