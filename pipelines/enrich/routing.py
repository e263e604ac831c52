"""The routing context of flows (Flow revision 4, issue 33), looked up at ingest.

For each Arrow table the ingest writes (a row group's messages), the distinct source and
destination addresses of each exporter's flows (one dictionary encoding of each column) go
to the BMP collector (collectors/routing) in one `lookup_columns` request over its Unix
socket: the collector answers each distinct route's prefix once, each distinct attribute set
once, and per address its route's place as packed integers (api.go). The answers are spread
over the rows with numpy indexing and Arrow `take`, so the cost per flow is the hash of its
two addresses plus the collector's share of the distinct addresses (bench/routing.py prints
the ingest's CPU per flow with routing on and off in the same run).

Time: the collector keeps the tables as they stand now; a flow gets the route in force
when its row group is ingested, normally seconds after the flow ended (the ingest's lag).
A flow ingested much later (a replay from Kafka) gets the routes of its ingest time.

Unknown is explicit: no route (or routing off, or the collector not answering) gives an
empty AS path and community lists, '' prefixes and origin AS 0; null stays for rows that
landed before revision 4. `bgp_next_hop` takes the route's next hop only where the flow
has none (null, '' or the all-zero address).
"""
from __future__ import annotations

import base64
import logging
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger("flowlake.ingest.routing")

COLUMNS = ("dst_as_path", "dst_communities", "dst_large_communities", "dst_prefix", "src_prefix")
PREFIX_COLUMNS = ("dst_prefix", "src_prefix")  # written as dictionary arrays (apply.DICT_NAMES)
AS_PATH = pa.list_(pa.int64())
TEXTS = pa.list_(pa.string())
NO_NEXT_HOP = ("", "0.0.0.0", "::")
RETRY_SECONDS = 5.0  # after the collector did not answer, tables go unrouted this long before trying again
# A worker keeps the collector's answers this long and asks only for addresses new to it: a
# flow's route may be this much older than its ingest (a withdraw reaches the lake this much
# later); the answers are dropped all at once, so the cache holds at most this long's addresses.
CACHE_SECONDS = 2.0


class Routes:
    """Routes as Arrow arrays: per distinct route its prefix and its attribute set's place
    (`attr_of`); per distinct attribute set the AS path, communities, next hop and origin AS.
    The unknown route and the unknown attribute set come last (places n and sets)."""

    def __init__(self, prefixes: list[str], attr_of: np.ndarray, attrs: list[dict]):
        self.n = len(prefixes)
        self.sets = len(attrs)
        self.attr_of = np.append(np.asarray(attr_of, np.int64), self.sets)
        self.as_path = pa.array([a["as_path"] for a in attrs] + [[]], AS_PATH)
        self.communities = pa.array([a["communities"] for a in attrs] + [[]], TEXTS)
        self.large = pa.array([a["large_communities"] for a in attrs] + [[]], TEXTS)
        self.next_hop = pa.array([a["next_hop"] for a in attrs] + [""], pa.string())
        self.origin = pa.array([int(a["origin_as"]) for a in attrs] + [0], pa.int64())
        self.prefix = pa.array([*prefixes, ""], pa.string())


ATTR_ARRAYS = ("as_path", "communities", "large", "next_hop", "origin")


class _Answers:
    """One exporter's answers kept for CACHE_SECONDS: per address its route's place (-1
    none) in arrays that grow by each new answer (the Routes without their unknown entry)."""

    def __init__(self):
        empty = Routes([], np.zeros(0, np.int64), [])
        self.known: dict[str, int] = {}
        self.prefix = empty.prefix[:0]
        self.attr_of = np.zeros(0, np.int64)
        self.arrays = {k: getattr(empty, k)[:0] for k in ATTR_ARRAYS}
        self.sets = 0
        self._view = None

    def add(self, routes: Routes) -> int:
        """Append a fresh answer's routes; their first place here."""
        base = len(self.prefix)
        self.prefix = pa.concat_arrays([self.prefix, routes.prefix[:-1]])
        self.attr_of = np.concatenate([self.attr_of, routes.attr_of[:-1] + self.sets])
        for k in ATTR_ARRAYS:
            self.arrays[k] = pa.concat_arrays([self.arrays[k], getattr(routes, k)[:-1]])
        self.sets += routes.sets
        self._view = None
        return base

    def view(self) -> Routes:
        if self._view is None:
            empty = Routes([], np.zeros(0, np.int64), [])
            r = Routes.__new__(Routes)
            r.n, r.sets = len(self.prefix), self.sets
            r.attr_of = np.append(self.attr_of, self.sets)
            r.prefix = pa.concat_arrays([self.prefix, empty.prefix])
            for k in ATTR_ARRAYS:
                setattr(r, k, pa.concat_arrays([self.arrays[k], getattr(empty, k)]))
            self._view = r
        return self._view


class Lookup:
    """One worker process's connection to the collector (kept between tables), and the
    per-table lookup. `socket_path` '' = routing off: every row unknown."""

    def __init__(self, socket_path: str, timeout: float = 10.0):
        self.socket_path = socket_path
        self.timeout = timeout
        self.client = None
        self.down_until = 0.0
        self.errors = 0
        self.requests = 0
        self.answers: dict[str, _Answers] = {}
        self.epoch = 0.0

    def _client(self):
        from pathlib import Path  # noqa: PLC0415  (only with routing on)

        from flowlake.collectors.routing import service  # noqa: PLC0415  (start-up: only with routing on)

        if self.client is None:
            self.client = service.Client(path=Path(self.socket_path), timeout=self.timeout)
        return self.client

    def batch(self, exporter: str, addrs: list[str]) -> tuple[Routes, np.ndarray]:
        """(routes, per address its route's place or -1) from the exporter's table: the answers
        of the last CACHE_SECONDS, the collector asked for the addresses new to them."""
        now = time.monotonic()
        if now - self.epoch >= CACHE_SECONDS:
            self.answers, self.epoch = {}, now
        cache = self.answers.setdefault(exporter, _Answers())
        get = cache.known.get
        ids = np.fromiter((get(a, -2) for a in addrs), np.int64, len(addrs))
        miss = np.flatnonzero(ids == -2)
        if len(miss):
            ask = [addrs[i] for i in miss] if len(miss) < len(addrs) else addrs
            routes, index = self.ask(exporter, ask)
            if routes is None:  # not answered: unknown, not kept
                ids[miss] = -1
            else:
                base = cache.add(routes)
                got = np.where(index >= 0, index + base, -1)
                ids[miss] = got
                cache.known.update(zip(ask, got.tolist(), strict=True))
        return cache.view(), ids

    def ask(self, exporter: str, addrs: list[str]) -> tuple[Routes | None, np.ndarray]:
        """The collector's answer for these addresses (None: routing off or not answering)."""
        from flowlake.collectors.routing.service import RoutingUnavailable  # noqa: PLC0415  (start-up)

        def none():
            return None, np.full(len(addrs), -1, np.int64)

        if not self.socket_path or not addrs or time.monotonic() < self.down_until:
            return none()
        try:
            ans = self._client().request({"op": "lookup_columns", "exporter": exporter, "addrs": addrs})
            index = np.frombuffer(base64.b64decode(ans["index"]), "<i4").astype(np.int64)
            attr_of = np.frombuffer(base64.b64decode(ans["attr"]), "<i4")
            if len(index) != len(addrs) or len(attr_of) != len(ans["prefixes"]):
                raise ValueError(f"answer of {len(index)} places for {len(addrs)} addresses")
        except (RoutingUnavailable, ValueError, KeyError, OSError) as exc:
            self.errors += 1
            self.close()
            self.down_until = time.monotonic() + RETRY_SECONDS
            log.warning("routing lookups off for %.0fs (flows land with the routing columns unknown): %s",
                        RETRY_SECONDS, exc)
            return none()
        self.requests += 1
        return Routes(ans["prefixes"], attr_of, ans["attrs"]), index

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except OSError:
                pass
            self.client = None


def _combined(col) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _places(dictionary_array: pa.DictionaryArray, index: np.ndarray) -> np.ndarray:
    """Per row, the route place of its address (index: per dictionary entry, then -1 for null)."""
    codes = dictionary_array.indices.fill_null(len(index) - 1).to_numpy(zero_copy_only=False)
    return index[codes]


def _merge(parts: list[tuple[Routes, np.ndarray]]) -> tuple[Routes, list[np.ndarray]]:
    """One Routes of several exporters' answers; each answer's places shifted to it."""
    if len(parts) == 1:
        return parts[0][0], [parts[0][1]]
    prefixes: list[str] = []
    attr_of: list[np.ndarray] = []
    attrs: list[dict] = []
    shifted = []
    for routes, index in parts:
        shifted.append(np.where(index >= 0, index + len(prefixes), -1))
        prefixes += routes.prefix.to_pylist()[:-1]
        attr_of.append(routes.attr_of[:-1] + len(attrs))
        attrs += [{"as_path": p, "communities": c, "large_communities": lc, "next_hop": nh, "origin_as": o}
                  for p, c, lc, nh, o in zip(routes.as_path.to_pylist()[:-1], routes.communities.to_pylist()[:-1],
                                             routes.large.to_pylist()[:-1], routes.next_hop.to_pylist()[:-1],
                                             routes.origin.to_pylist()[:-1], strict=True)]
    return Routes(prefixes, np.concatenate(attr_of), attrs), shifted


def route_ids(lookup: Lookup, exporters: pa.DictionaryArray, src: pa.Array, dst: pa.Array) -> tuple:
    """(Routes, src row -> route, dst row -> route): one request per exporter with the
    distinct addresses of its flows (each column dictionary-encoded once); the unknown
    route is Routes.n."""
    src, dst = _combined(src), _combined(dst)
    n = len(src)
    names = exporters.dictionary.to_pylist()
    parts, rows_of = [], []
    for k, exporter in enumerate(names):
        if len(names) == 1:
            rows = None
            s, d = src, dst
        else:
            rows = np.flatnonzero(exporters.indices.to_numpy(zero_copy_only=False) == k)
            s, d = src.take(rows), dst.take(rows)
        sd, dd = pc.dictionary_encode(s), pc.dictionary_encode(d)
        routes, index = lookup.batch(exporter or "", dd.dictionary.to_pylist() + sd.dictionary.to_pylist())
        parts.append((routes, index))
        rows_of.append((rows, sd, dd, len(dd.dictionary)))
    table, indexes = _merge(parts)
    src_ids = np.full(n, -1, np.int64)
    dst_ids = np.full(n, -1, np.int64)
    for (rows, sd, dd, nd), index in zip(rows_of, indexes, strict=True):
        d_index = np.append(index[:nd], -1)  # a null address: unknown
        s_index = np.append(index[nd:], -1)
        if rows is None:
            src_ids, dst_ids = _places(sd, s_index), _places(dd, d_index)
        else:
            src_ids[rows], dst_ids[rows] = _places(sd, s_index), _places(dd, d_index)
    src_ids[src_ids < 0] = table.n
    dst_ids[dst_ids < 0] = table.n
    return table, src_ids, dst_ids


def routing_columns(lookup: Lookup, cols: dict, exporters: pa.DictionaryArray) -> dict[str, pa.Array]:
    """The revision-4 columns, `bgp_next_hop` completed, and the routing source of the AS
    numbers (`src_as_routing`, `dst_as_routing`: the routes' origin AS, 0 = none)."""
    table, src_ids, dst_ids = route_ids(lookup, exporters, cols["src_addr"], cols["dst_addr"])
    dst_sets = pa.array(table.attr_of[dst_ids])
    src_sets = pa.array(table.attr_of[src_ids])
    out = {
        "dst_as_path": table.as_path.take(dst_sets),
        "dst_communities": table.communities.take(dst_sets),
        "dst_large_communities": table.large.take(dst_sets),
        "dst_prefix": pa.DictionaryArray.from_arrays(pa.array(dst_ids.astype(np.int32)), table.prefix),
        "src_prefix": pa.DictionaryArray.from_arrays(pa.array(src_ids.astype(np.int32)), table.prefix),
        "src_as_routing": table.origin.take(src_sets),
        "dst_as_routing": table.origin.take(dst_sets),
    }
    own = cols.get("bgp_next_hop")
    if own is not None:
        own = _combined(own)
        missing = pc.or_kleene(pc.is_null(own), pc.is_in(own, value_set=pa.array(NO_NEXT_HOP))).fill_null(True)
        routed = table.next_hop.take(dst_sets)
        # the flow's own next hop wins; where it has none, the route's ('' = no route: null kept)
        fill = pc.and_(missing, pc.not_equal(routed, ""))
        out["bgp_next_hop"] = pc.if_else(fill, routed, own)
    return out


def unknown_columns(n: int) -> dict[str, pa.Array]:
    """The revision-4 columns of n flows without a route (routing off)."""
    zeros = pa.array(np.zeros(n, np.int64))
    empty = Routes([], np.zeros(0, np.int64), [])
    prefix = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), empty.prefix)
    return {"dst_as_path": empty.as_path.take(zeros), "dst_communities": empty.communities.take(zeros),
            "dst_large_communities": empty.large.take(zeros), "dst_prefix": prefix, "src_prefix": prefix,
            "src_as_routing": empty.origin.take(zeros), "dst_as_routing": empty.origin.take(zeros)}


def pick_as(order: tuple[str, ...], candidates: dict[str, pa.Array]) -> pa.Array:
    """src_as/dst_as: the first non-zero of the sources in `order` ([routing] as_sources)."""
    arrays = [candidates[k] for k in order]
    out = arrays[-1]
    for arr in reversed(arrays[:-1]):
        out = pc.if_else(pc.equal(arr, 0).fill_null(True), out, arr)
    return out


_current: list = []  # [(socket path, Lookup)]: this worker process's connection


def lookup_for(socket_path: str) -> Lookup:
    if _current and _current[0][0] == socket_path:
        return _current[0][1]
    for _, old in _current:
        old.close()
    _current.clear()
    lk = Lookup(socket_path)
    _current.append((socket_path, lk))
    return lk
