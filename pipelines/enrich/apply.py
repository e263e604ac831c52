"""The enrichment columns (schemas/enrich.py) computed over an Arrow table of flows.

Vectorised where rows are many and lookups where values are few: each address column and
each (exporter, interface) key column is matched in Arrow against the keys of the last
tables (answers.Recent), only keys new to them are looked up in Python, once each (and kept
in a bounded per-process cache), and the answers are spread over the rows as dictionary
arrays whose dictionaries hold each distinct value once (answers.Answers). A Spark task's Python worker builds one
`Enricher` per plan (sources.py) and keeps it while the plan's key stays the same.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flowlake.schemas import FLOW, Record, messages
from flowlake.schemas.enrich import ENRICHMENT_FIELDS, ENRICHMENT_NAMES

from . import classify, interfaces, mmdb, networks, routing
from .answers import Answers, Recent

_IF = ("name", "description", "speed", "boundary", "connectivity", "provider")
_ADDR = ("country", "city", *(f"net_{a}" for a in networks.ATTRS))


@dataclass(frozen=True)
class Plan:
    """What a task needs to enrich, picklable: validated snapshot files (never changed in
    place), the interface directory and the rules as written. `key` changes when any does."""
    key: str
    asn_path: str = ""
    geo_path: str = ""
    networks_path: str = ""
    rules: tuple = ()
    directory: dict = field(default_factory=dict)
    refresh_dir: str = ""
    cache_entries: int = 200_000
    # routing context (routing.py): the collector's socket ('' = routing off) and
    # [routing] as_sources, the order in which src_as/dst_as take flow, routing, geoip
    routing_socket: str = ""
    as_sources: tuple = ("flow", "routing", "geoip")


DICT = pa.dictionary(pa.int32(), pa.string())
# string columns the ingest hands over as dictionary arrays: the enrichment's, and the
# routing context's prefixes (each distinct route's prefix once: no per-row copy)
DICT_NAMES = frozenset(ENRICHMENT_NAMES) | frozenset(routing.PREFIX_COLUMNS)


def lake_schema() -> pa.Schema:
    """Columns of a lake flows file: the wire record's, then the enrichment's. Its strings
    are handed to the Parquet writer as dictionary arrays (Parquet stores them as strings
    with a dictionary page; DuckDB and Spark read strings): the writer then takes the
    dictionary as it is instead of hashing every row's value (bench/ingest.py)."""
    plain = messages.arrow_schema(Record("FlowsFile", "flowlake.pipelines.lake", "lake file", FLOW.fields + ENRICHMENT_FIELDS))
    return pa.schema([f.with_type(DICT) if f.name in DICT_NAMES and pa.types.is_string(f.type) else f
                      for f in plain])


class Enricher:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.asn = mmdb.Lookup(plan.asn_path, plan.cache_entries) if plan.asn_path else None
        self.geo = mmdb.Lookup(plan.geo_path, plan.cache_entries) if plan.geo_path else None
        self.networks = networks.Networks(networks.parse(plan.networks_path)) if plan.networks_path else None
        self.rules = classify.parse_rules(list(plan.rules))
        self.directory = plan.directory
        self.refresh = interfaces.RefreshRequests(plan.refresh_dir) if plan.refresh_dir else None
        # address -> id of its answer (asn, country, city, net name, role, site, region, tenant)
        self.addresses: dict[str, int] = {}
        self.address_answers = Answers([pa.int64()] + [pa.string()] * len(_ADDR))
        # (exporter, ifIndex) -> id of (name, description, speed, boundary, connectivity, provider)
        self.ifs: dict[tuple[str, int], int] = {}
        self.if_answers = Answers([pa.int64() if k == "speed" else pa.string() for k in _IF])
        # the last tables' keys, matched in Arrow: src and dst addresses, in and out interfaces
        self.recent = {k: Recent() for k in ("src", "dst", "in", "out")}
        self.exporter_numbers: dict[str, int] = {}  # exporter -> its number in interface keys
        self.exporters: list[str] = []
        self._exporter_names: tuple = (None, None)  # (a table's exporters, their names' dictionary)
        self.limit = max(1000, int(plan.cache_entries))
        self.routing = routing.lookup_for(plan.routing_socket) if plan.routing_socket else None

    def close(self) -> None:
        for db in (self.asn, self.geo):
            if db is not None:
                db.close()

    # ---- one distinct value ------------------------------------------------------------
    def address(self, addr: str) -> tuple:
        """(asn, country, city, net name, role, site, region, tenant) of one address."""
        return self.address_answers.rows[self.address_id(addr)]

    def address_id(self, addr: str) -> int:
        hit = self.addresses.get(addr)
        if hit is not None:
            return hit
        parsed = networks.address_int(addr)
        asn = mmdb.asn_of(self.asn.get(addr, parsed)) if self.asn else 0
        geo = self.geo.get(addr, parsed) if self.geo else None
        net = self.networks.lookup(addr, parsed) if self.networks else networks.EMPTY
        if len(self.addresses) >= self.limit or len(self.address_answers.rows) >= self.limit:
            self.addresses.clear()  # bounded: start over rather than grow (ids of this table stay valid)
        hit = self.addresses[addr] = self.address_answers.id((asn, mmdb.country_of(geo), mmdb.city_of(geo), *net))
        return hit

    def exporter_name(self, exporter: str) -> str:
        return self.directory.get(exporter, ("", {}))[0]

    def exporter_names(self, exporters: pa.Array) -> pa.Array:
        """The names of a table's exporters (its dictionary), the same array while they stay the same."""
        if self._exporter_names[0] is None or not self._exporter_names[0].equals(exporters):
            self._exporter_names = (exporters, pa.array([self.exporter_name(x) for x in exporters.to_pylist()],
                                                        pa.string()))
        return self._exporter_names[1]

    def exporter_number(self, exporter: str) -> int:
        n = self.exporter_numbers.get(exporter)
        if n is None:
            n = self.exporter_numbers[exporter] = len(self.exporters)
            self.exporters.append(exporter)
        return n

    def interface(self, exporter: str, ifindex: int) -> tuple:
        """(name, description, speed Mbit/s, boundary, connectivity, provider)."""
        return self.if_answers.rows[self.interface_id(exporter, ifindex)]

    def interface_id(self, exporter: str, ifindex: int) -> int:
        key = (exporter, ifindex)
        hit = self.ifs.get(key)
        if hit is not None:
            return hit
        ename, table = self.directory.get(exporter, ("", {}))
        known = table.get(ifindex)
        if known is None:
            answer = self.if_answers.id((*interfaces.UNKNOWN, "", "", ""))
            if ifindex and self.refresh is not None:
                self.refresh.ask(exporter)
                # asked: look again once the poller had time (a later table, after a refresh)
                return answer
        else:
            answer = self.if_answers.id((*known, *classify.classify(self.rules, ename, known[0], known[1])))
        if len(self.ifs) >= self.limit:
            self.ifs.clear()
        self.ifs[key] = answer
        return answer


def _address_columns(e: Enricher, side: str, col: pa.Array) -> list[pa.Array]:
    def lookup(keys: pa.Array):
        return [e.address_id(a) for a in keys.to_numpy(zero_copy_only=False)], [True] * len(keys)

    return e.address_answers.columns(e.recent[side].ids(col, lookup))


def _interface_columns(e: Enricher, side: str, exporters: pa.DictionaryArray, ifindex: pa.Array) -> list[pa.Array]:
    # key: the exporter's number in this process << 32 | ifIndex, stable across tables
    numbers = [e.exporter_number(x) for x in exporters.dictionary.to_pylist()]
    key = pc.bit_wise_and(ifindex, 0xFFFFFFFF)
    if numbers != [0]:
        key = pc.add(key, pa.array(np.array(numbers, np.int64) << 32).take(exporters.indices))

    def lookup(keys: pa.Array):
        ids, keep = [], []
        for k in keys.to_numpy().tolist():
            ex = e.exporters[k >> 32]
            ids.append(e.interface_id(ex, k & 0xFFFFFFFF))
            keep.append((ex, k & 0xFFFFFFFF) in e.ifs)
        return ids, keep

    return e.if_answers.columns(e.recent[side].ids(key, lookup))


def _exporters(col) -> pa.DictionaryArray:
    """The exporter column dictionary-encoded; flows from one exporter (the usual case) by one
    comparison instead of a hash per row."""
    if len(col) and pc.all(pc.equal(col, col[0])).as_py():
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(col), np.int32)), pa.array([col[0].as_py()]))
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return pc.dictionary_encode(col)


# the wire columns enrichment reads
KEY_COLUMNS = ("exporter", "input_if", "output_if", "src_addr", "dst_addr", "src_as", "dst_as", "bgp_next_hop")


def enrich_columns(cols: dict[str, pa.Array], e: Enricher) -> dict[str, pa.Array]:
    """The enrichment columns of flows given by their KEY_COLUMNS (arrays or chunked arrays:
    a row group's messages are matched as they are, without copying them into one)."""
    out: dict[str, pa.Array] = {}
    exporters = _exporters(cols["exporter"])
    out["exporter_name"] = pa.DictionaryArray.from_arrays(exporters.indices, e.exporter_names(exporters.dictionary))
    for side, ifcol in (("in", "input_if"), ("out", "output_if")):
        for name, arr in zip(_IF, _interface_columns(e, side, exporters, cols[ifcol])):
            out[f"{side}_if_{name}"] = arr
    n = len(cols["src_addr"])
    if e.routing is not None:
        rt = routing.routing_columns(e.routing, cols, exporters)
    else:
        rt = routing.unknown_columns(n)
    for side in ("src", "dst"):
        asn, *rest = _address_columns(e, side, cols[f"{side}_addr"])
        # the first non-zero of [routing] as_sources: the router's export, the route's origin, the database
        out[f"{side}_as"] = routing.pick_as(e.plan.as_sources, {
            "flow": cols[f"{side}_as"], "routing": rt.pop(f"{side}_as_routing"), "geoip": asn})
        for name, arr in zip(_ADDR, rest):
            out[f"{side}_{name}"] = arr
    out.update(rt)
    return out


def enrich_table(table: pa.Table, e: Enricher, schema: pa.Schema | None = None) -> pa.Table:
    """The flows of `table` (wire schema) with the lake's enrichment columns. Whole tables
    (a row group's messages) at once: the matching of keys costs per call, not per row."""
    schema = schema or lake_schema()
    cols = enrich_columns({n: table.column(n) for n in KEY_COLUMNS}, e)
    return pa.Table.from_arrays([cols[n] if n in cols else table.column(n) for n in schema.names], schema=schema)


def unenriched_table(table: pa.Table, schema: pa.Schema | None = None) -> pa.Table:
    """Enrichment off: the same columns, every one unknown (so every lake file has them)."""
    schema = schema or lake_schema()
    n = table.num_rows
    zeros = pa.array(np.zeros(n, np.int32))
    empty = pa.DictionaryArray.from_arrays(zeros, pa.array([""], pa.string()))
    routed = routing.unknown_columns(n)
    out = []
    for f in schema:
        if f.name in routing.COLUMNS:  # routing off: explicitly unknown
            out.append(routed[f.name])
        elif f.name in table.column_names:
            out.append(table.column(f.name))
        else:
            out.append(empty if f.type == DICT else zeros.cast(f.type))
    return pa.Table.from_arrays(out, schema=schema)


def lake_tables(plan: Plan | None):
    """The function a task applies to each decoded table: enriched by the plan, or (None)
    with the columns unknown."""
    schema = lake_schema()
    if plan is None:
        return lambda table: unenriched_table(table, schema)
    e = enricher_for(plan)
    return lambda table: enrich_table(table, e, schema)


_current: list = []  # [(key, Enricher)]: this worker process's enricher of the last plan


def enricher_for(plan: Plan) -> Enricher:
    if _current and _current[0][0] == plan.key:
        return _current[0][1]
    e = Enricher(plan)
    if _current:
        _current[0][1].close()
        _current.clear()
    _current.append((plan.key, e))
    return e


assert set(ENRICHMENT_NAMES) == {"exporter_name", *(f"{s}_if_{n}" for s in ("in", "out") for n in _IF),
                                 *(f"{s}_{n}" for s in ("src", "dst") for n in _ADDR)}, "schemas/enrich.py and apply.py"
