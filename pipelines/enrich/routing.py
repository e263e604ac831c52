"""The routing context of flows (Flow revision 4, issue 33), looked up at ingest.

For each Arrow table the ingest writes (a row group's messages), the distinct source and
destination addresses of each exporter's flows (one dictionary encoding of each column) go
to the BMP collector (collectors/routing) in one `lookup_packed` request over its Unix
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


def _strings(offsets: bytes, data: bytes) -> pa.Array:
    """A string column from Arrow's layout (int32 offsets, n+1, and the bytes)."""
    n = len(offsets) // 4 - 1
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def _lists(offsets: bytes, values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.frombuffer(offsets, "<i4")), values)


class Routes:
    """Routes as Arrow arrays: per distinct route its prefix and its attribute set's place
    (`attr_of`); per distinct attribute set the AS path, communities, next hop and origin AS.
    The unknown route and the unknown attribute set come last (places n and sets)."""

    def __init__(self, prefix: pa.Array, attr_of: np.ndarray, sets: dict[str, pa.Array]):
        self.n = len(prefix)
        self.sets = len(sets["origin"])
        self.attr_of = np.append(np.asarray(attr_of, np.int64), self.sets)
        self.prefix = pa.concat_arrays([prefix, _UNKNOWN["prefix"]])
        for k in ATTR_ARRAYS:
            setattr(self, k, pa.concat_arrays([sets[k], _UNKNOWN[k]]))

    @classmethod
    def packed(cls, ans: dict) -> tuple[Routes, np.ndarray]:
        """(routes, per address its route's place or -1) from a lookup_packed answer (api.go)."""
        def raw(key: str) -> bytes:
            return base64.b64decode(ans.get(key) or "")

        index = np.frombuffer(raw("index"), "<i4").astype(np.int64)
        prefix = _strings(raw("prefix_offsets"), raw("prefix_data"))
        attr_of = np.frombuffer(raw("attr"), "<i4")
        as_numbers = pa.array(np.frombuffer(raw("as_path"), "<u4").astype(np.int64))
        sets = {"as_path": _lists(raw("as_path_offsets"), as_numbers),
                "communities": _lists(raw("communities_offsets"),
                                      _strings(raw("community_offsets"), raw("community_data"))),
                "large": _lists(raw("large_offsets"), _strings(raw("large_string_offsets"), raw("large_data"))),
                "next_hop": _strings(raw("next_hop_offsets"), raw("next_hop_data")),
                "origin": pa.array(np.frombuffer(raw("origin"), "<u4").astype(np.int64))}
        if len(attr_of) != len(prefix) or any(len(v) != len(sets["origin"]) for v in sets.values()) or \
                (len(attr_of) and not 0 <= attr_of.min() <= attr_of.max() < len(sets["origin"])) or \
                (len(index) and not -1 <= index.min() <= index.max() < len(prefix)):
            raise ValueError(f"inconsistent answer: {len(prefix)} routes, {len(attr_of)} attribute places, "
                             f"{len(sets['origin'])} attribute sets")
        return cls(prefix, attr_of, sets), index


ATTR_ARRAYS = ("as_path", "communities", "large", "next_hop", "origin")
# the unknown route's entries (no route: empty lists, '' and AS 0)
_UNKNOWN = {"prefix": pa.array([""], pa.string()), "as_path": pa.array([[]], AS_PATH),
            "communities": pa.array([[]], TEXTS), "large": pa.array([[]], TEXTS),
            "next_hop": pa.array([""], pa.string()), "origin": pa.array([0], pa.int64())}


def _known(routes: Routes) -> dict[str, pa.Array]:
    """The routes' attribute arrays without the unknown entry."""
    return {k: getattr(routes, k)[:-1] for k in ATTR_ARRAYS}


def _string_buffers(arr: pa.Array) -> tuple[bytes, bytes]:
    """A string array without nulls as (int32 offsets from 0, n+1, the bytes): lookup_packed's form."""
    if arr.type != pa.string():
        arr = arr.cast(pa.string())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], "<i4", count=len(arr) + 1, offset=arr.offset * 4)
    first, last = int(offsets[0]), int(offsets[-1])
    data = bufs[2].slice(first, last - first).to_pybytes() if bufs[2] is not None else b""
    return (offsets - first).astype("<i4").tobytes(), data


class _Answers:
    """One exporter's answers kept for CACHE_SECONDS: the addresses asked (an Arrow string
    array: a table's addresses are matched against it in one hash) and per address its
    route's place (-1 none) in arrays that grow by each new answer."""

    def __init__(self):
        self.keys = pa.array([], pa.string())
        self.places = np.zeros(0, np.int64)
        self.prefix = _UNKNOWN["prefix"][:0]
        self.attr_of = np.zeros(0, np.int64)
        self.arrays = {k: _UNKNOWN[k][:0] for k in ATTR_ARRAYS}
        self._view = None

    def add(self, asked: pa.Array, routes: Routes, index: np.ndarray) -> np.ndarray:
        """Keep a fresh answer; the asked addresses' places here."""
        base = len(self.prefix)
        sets = len(self.arrays["origin"])
        got = np.where(index >= 0, index + base, -1)
        self.keys = pa.concat_arrays([self.keys, asked])
        self.places = np.concatenate([self.places, got])
        self.prefix = pa.concat_arrays([self.prefix, routes.prefix[:-1]])
        self.attr_of = np.concatenate([self.attr_of, routes.attr_of[:-1] + sets])
        for k, arr in _known(routes).items():
            self.arrays[k] = pa.concat_arrays([self.arrays[k], arr])
        self._view = None
        return got

    def view(self) -> Routes:
        if self._view is None:
            self._view = Routes(self.prefix, self.attr_of, self.arrays)
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

    def batch(self, exporter: str, addrs: pa.Array) -> tuple[Routes, np.ndarray]:
        """(routes, per address its route's place or -1) from the exporter's table for these
        distinct addresses (a string array without nulls): the answers of the last
        CACHE_SECONDS, the collector asked for the addresses new to them."""
        now = time.monotonic()
        if now - self.epoch >= CACHE_SECONDS:
            self.answers, self.epoch = {}, now
        cache = self.answers.setdefault(exporter, _Answers())
        if addrs.type != pa.string():
            addrs = addrs.cast(pa.string())
        if len(cache.keys):
            pos = pc.index_in(addrs, value_set=cache.keys)
            hit = pc.is_valid(pos).to_numpy(zero_copy_only=False)
            ids = np.full(len(addrs), -1, np.int64)
            ids[hit] = cache.places[pos.drop_null().to_numpy()]
            miss = np.flatnonzero(~hit)
        else:
            ids = np.full(len(addrs), -1, np.int64)
            miss = np.arange(len(addrs))
        if len(miss):
            ask = addrs if len(miss) == len(addrs) else addrs.take(pa.array(miss))
            routes, index = self.ask(exporter, ask)
            if routes is not None:  # not answered: unknown, not kept
                ids[miss] = cache.add(ask, routes, index)
        return cache.view(), ids

    def ask(self, exporter: str, addrs: pa.Array) -> tuple[Routes | None, np.ndarray]:
        """The collector's answer for these addresses (None: routing off or not answering)."""
        from flowlake.collectors.routing.service import RoutingUnavailable  # noqa: PLC0415  (start-up)

        def none():
            return None, np.full(len(addrs), -1, np.int64)

        if not self.socket_path or not len(addrs) or time.monotonic() < self.down_until:
            return none()
        try:
            offsets, data = _string_buffers(addrs)
            ans = self._client().request({"op": "lookup_packed", "exporter": exporter,
                                          "offsets": base64.b64encode(offsets).decode(),
                                          "data": base64.b64encode(data).decode()})
            routes, index = Routes.packed(ans)
            if len(index) != len(addrs):
                raise ValueError(f"answer of {len(index)} places for {len(addrs)} addresses")
        except (RoutingUnavailable, ValueError, KeyError, OSError) as exc:
            self.errors += 1
            self.close()
            self.down_until = time.monotonic() + RETRY_SECONDS
            log.warning("routing lookups off for %.0fs (flows land with the routing columns unknown): %s",
                        RETRY_SECONDS, exc)
            return none()
        self.requests += 1
        return routes, index

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
    shifted, attr_of = [], []
    routes_before = sets_before = 0
    for routes, index in parts:
        shifted.append(np.where(index >= 0, index + routes_before, -1))
        attr_of.append(routes.attr_of[:-1] + sets_before)
        routes_before += routes.n
        sets_before += routes.sets
    prefix = pa.concat_arrays([r.prefix[:-1] for r, _ in parts])
    sets = {k: pa.concat_arrays([getattr(r, k)[:-1] for r, _ in parts]) for k in ATTR_ARRAYS}
    return Routes(prefix, np.concatenate(attr_of), sets), shifted


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
        routes, index = lookup.batch(exporter or "", pa.concat_arrays([dd.dictionary, sd.dictionary]))
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
    prefix = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), _UNKNOWN["prefix"])
    return {"dst_as_path": _UNKNOWN["as_path"].take(zeros), "dst_communities": _UNKNOWN["communities"].take(zeros),
            "dst_large_communities": _UNKNOWN["large"].take(zeros), "dst_prefix": prefix, "src_prefix": prefix,
            "src_as_routing": _UNKNOWN["origin"].take(zeros), "dst_as_routing": _UNKNOWN["origin"].take(zeros)}


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
