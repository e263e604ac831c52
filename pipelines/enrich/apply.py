"""The enrichment columns (schemas/enrich.py) computed over an Arrow table of flows.

Vectorised where rows are many and lookups where values are few: each address column and
each (exporter, interface) pair is dictionary-encoded by Arrow, each distinct value is
looked up once (and kept in a bounded per-process cache across tables), and the answers
are spread back over the rows with `take`. A Spark task's Python worker builds one
`Enricher` per plan (sources.py) and keeps it while the plan's key stays the same.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from flowlake.schemas import FLOW, Record
from flowlake.schemas.enrich import ENRICHMENT_FIELDS, ENRICHMENT_NAMES

from . import classify, interfaces, mmdb, networks

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


DICT = pa.dictionary(pa.int32(), pa.string())


def lake_schema() -> pa.Schema:
    """Columns of a lake flows file: the wire record's, then the enrichment's. Its strings
    are handed to the Parquet writer as dictionary arrays (Parquet stores them as strings
    with a dictionary page; DuckDB and Spark read strings): the writer then takes the
    dictionary as it is instead of hashing every row's value (bench/ingest.py)."""
    from flowlake.schemas import messages

    plain = messages.arrow_schema(Record("FlowsFile", "flowlake.lake", "lake file", FLOW.fields + ENRICHMENT_FIELDS))
    return pa.schema([f.with_type(DICT) if f.name in ENRICHMENT_NAMES and pa.types.is_string(f.type) else f
                      for f in plain])


class Interned:
    """Distinct answers, each kept once with a small id, and their columns as Arrow arrays:
    a table's rows then get their answers by one `take` of ids per column, without a
    Python object per row."""

    def __init__(self, types: list):
        self.types = types
        self.rows: list[tuple] = []
        self.ids: dict[tuple, int] = {}
        self._arrays: list[pa.Array] | None = None

    def id(self, row: tuple) -> int:
        i = self.ids.get(row)
        if i is None:
            i = self.ids[row] = len(self.rows)
            self.rows.append(row)
            self._arrays = None
        return i

    def arrays(self) -> list[pa.Array]:
        if self._arrays is None:
            self._arrays = [pa.array([r[k] for r in self.rows], t) for k, t in enumerate(self.types)]
        return self._arrays

    def clear(self) -> None:
        self.rows, self.ids, self._arrays = [], {}, None


class Enricher:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.asn = mmdb.Lookup(plan.asn_path) if plan.asn_path else None
        self.geo = mmdb.Lookup(plan.geo_path) if plan.geo_path else None
        self.networks = networks.Networks(networks.parse(plan.networks_path)) if plan.networks_path else None
        self.rules = classify.parse_rules(list(plan.rules))
        self.directory = plan.directory
        self.refresh = interfaces.RefreshRequests(plan.refresh_dir) if plan.refresh_dir else None
        # address -> id of its answer (asn, country, city, net name, role, site, region, tenant)
        self.addresses: dict[str, int] = {}
        self.address_answers = Interned([pa.int64()] + [pa.string()] * len(_ADDR))
        # (exporter, ifIndex) -> id of (name, description, speed, boundary, connectivity, provider)
        self.ifs: dict[tuple[str, int], int] = {}
        self.if_answers = Interned([pa.int64() if k == "speed" else pa.string() for k in _IF])
        self.limit = max(1000, int(plan.cache_entries))

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
        asn = mmdb.asn_of(self.asn.get(addr)) if self.asn else 0
        geo = self.geo.get(addr) if self.geo else None
        net = self.networks.lookup(addr) if self.networks else networks.EMPTY
        if len(self.addresses) >= self.limit or len(self.address_answers.rows) >= self.limit:
            self.addresses.clear()  # bounded: start over rather than grow (ids of this table stay valid)
        hit = self.addresses[addr] = self.address_answers.id((asn, mmdb.country_of(geo), mmdb.city_of(geo), *net))
        return hit

    def exporter_name(self, exporter: str) -> str:
        return self.directory.get(exporter, ("", {}))[0]

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


def _answers(interned: Interned, ids: list[int], indices: pa.Array) -> list[pa.Array]:
    """Per row, the columns of its answer: ids of the distinct values, spread by `indices`."""
    rows = pa.array(ids, pa.int32()).take(indices)
    return [pa.DictionaryArray.from_arrays(rows, a) if pa.types.is_string(a.type) else a.take(rows)
            for a in interned.arrays()]


def _address_columns(e: Enricher, col: pa.Array) -> list[pa.Array]:
    enc = pc.dictionary_encode(col)
    uniq = enc.dictionary.to_numpy(zero_copy_only=False)  # str objects 20x faster than to_pylist()
    ids = list(map(e.addresses.get, uniq))
    if None in ids:
        ids = [e.address_id(a) if i is None else i for i, a in zip(ids, uniq)]
    return _answers(e.address_answers, ids, enc.indices)


def _interface_columns(e: Enricher, exporters: pa.DictionaryArray, ifindex: pa.Array) -> list[pa.Array]:
    key = pc.add(pc.multiply(exporters.indices.cast(pa.int64()), 1 << 32), pc.bit_wise_and(ifindex, 0xFFFFFFFF))
    enc = pc.dictionary_encode(key)
    names = exporters.dictionary.to_pylist()
    ids = [e.interface_id(names[k >> 32], k & 0xFFFFFFFF) for k in enc.dictionary.to_numpy().tolist()]
    return _answers(e.if_answers, ids, enc.indices)


def enrich_batch(batch: pa.RecordBatch, e: Enricher) -> dict[str, pa.Array]:
    cols: dict[str, pa.Array] = {}
    exporters = pc.dictionary_encode(batch.column("exporter"))
    cols["exporter_name"] = pa.DictionaryArray.from_arrays(
        exporters.indices, pa.array([e.exporter_name(x) for x in exporters.dictionary.to_pylist()], pa.string()))
    for side, ifcol in (("in", "input_if"), ("out", "output_if")):
        for name, arr in zip(_IF, _interface_columns(e, exporters, batch.column(ifcol))):
            cols[f"{side}_if_{name}"] = arr
    for side in ("src", "dst"):
        asn, *rest = _address_columns(e, batch.column(f"{side}_addr"))
        own = batch.column(f"{side}_as")
        # the router's own AS number when it exports one, the database's otherwise
        cols[f"{side}_as"] = pc.if_else(pc.equal(own, 0), asn, own)
        for name, arr in zip(_ADDR, rest):
            cols[f"{side}_{name}"] = arr
    return cols


def enrich_table(table: pa.Table, e: Enricher, schema: pa.Schema | None = None) -> pa.Table:
    """The flows of `table` (wire schema) with the lake's enrichment columns."""
    schema = schema or lake_schema()
    batches = []
    for batch in table.to_batches():
        cols = enrich_batch(batch, e)
        arrays = [cols[n] if n in cols else batch.column(n) for n in schema.names]
        batches.append(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return pa.Table.from_batches(batches, schema=schema)


def unenriched_table(table: pa.Table, schema: pa.Schema | None = None) -> pa.Table:
    """Enrichment off: the same columns, every one unknown (so every lake file has them)."""
    import numpy as np

    schema = schema or lake_schema()
    n = table.num_rows
    zeros = pa.array(np.zeros(n, np.int32))
    empty = pa.DictionaryArray.from_arrays(zeros, pa.array([""], pa.string()))
    out = []
    for f in schema:
        if f.name in table.column_names:
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
