"""Superset's chart-data cache for flowlake: a FileSystemCache whose entries expire when
the report jobs rewrite a report table (runs inside Superset; superset_config.py loads
this file as module `flowlake_lake_cache` and names the class in DATA_CACHE_CONFIG).

Report tables change once a day, when `flowlake jobs run` replaces a date partition by
renaming it into lake/reports/<table>/ (jobs/context.py), which updates that folder's
mtime. The newest such mtime is the lake's generation; an entry is kept with the
generation it was computed from and is a miss once the generation moved on. So the
cache can keep results for a day without ever showing a report older than the lake.

The generation an entry is computed from is the one seen when Superset looked it up and
missed, just before running the query: if the jobs rewrite a table while that query
runs, the entry is stored under the old generation and recomputed on the next visit.
"""
from __future__ import annotations

import os
import threading
import time

from flask_caching.backends.filesystemcache import FileSystemCache

CHECK_EVERY_S = 1.0


class LakeAwareCache(FileSystemCache):
    def __init__(self, cache_dir, lake_dir: str = "", **kwargs):
        super().__init__(cache_dir, **kwargs)
        self.reports = os.path.join(lake_dir, "reports") if lake_dir else ""
        self._lock = threading.Lock()
        self._checked = float("-inf")
        self._generation = 0.0
        self._seen_at_miss: dict[str, float] = {}

    @classmethod
    def factory(cls, app, config, args, kwargs):
        kwargs["lake_dir"] = config.get("CACHE_LAKE_DIR", "")
        return super().factory(app, config, args, kwargs)

    def generation(self) -> float:
        """Newest mtime of lake/reports and its table folders (looked at once a second)."""
        now = time.monotonic()
        with self._lock:
            if now - self._checked < CHECK_EVERY_S:
                return self._generation
        newest = 0.0
        if self.reports:
            try:
                newest = os.stat(self.reports).st_mtime
                with os.scandir(self.reports) as it:
                    for entry in it:
                        if entry.is_dir(follow_symlinks=False):
                            newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
            except FileNotFoundError:
                pass
        with self._lock:
            self._checked, self._generation = now, newest
        return newest

    # cachelib keeps its own item count under a management key: that one passes through.
    def set(self, key, value, timeout=None, mgmt_element=False):
        if not mgmt_element:
            with self._lock:
                seen = self._seen_at_miss.pop(key, None)
            value = (self.generation() if seen is None else seen, value)
        return super().set(key, value, timeout, mgmt_element=mgmt_element)

    def get(self, key):
        entry = super().get(key)
        if key == getattr(self, "_fs_count_file", None):
            return entry
        current = self.generation()
        if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == current:
            return entry[1]
        with self._lock:
            if len(self._seen_at_miss) > 10000:  # lookups never followed by a store
                self._seen_at_miss.clear()
            self._seen_at_miss[key] = current
        return None

    def has(self, key) -> bool:
        return self.get(key) is not None
