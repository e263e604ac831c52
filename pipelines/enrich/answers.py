"""Enrichment answers spread over a table's rows without a Python object per row.

- `Answers`: the distinct answers (tuples), each with a small id; per string column a
  dictionary of its distinct values (each once: "DE" is one entry however many answers
  say it) and each answer's code in it. A table's rows, given as answer ids, get each
  column as an Arrow dictionary array: one `take` of codes per column, none for a column
  with a single value (an all-unknown column: no database, no rules). The Parquet writer
  takes such arrays as they are (its dictionary page is the dictionary; small
  dictionaries mean narrow indices and runs), and the lake's type stays string.
- `Recent`: the keys (addresses, interface keys) of the last tables with their answer
  ids, as Arrow arrays: a table's column is matched against them in C++ (`index_in`),
  only keys not among them go to Python (the caller's lookup and its bounded cache).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# keys kept by a Recent: matching builds a hash of them per table, so few tables' worth
RECENT_KEYS = 65536


class Answers:
    def __init__(self, types: list):
        self.types = types
        self.rows: list[tuple] = []
        self.ids: dict[tuple, int] = {}
        self.strings = [pa.types.is_string(t) for t in types]
        self.values: list[dict] = [{} for _ in types]   # string columns: value -> code
        self.codes: list[list[int]] = [[] for _ in types]  # per column, per answer: code (or the int value)
        self._arrays: list | None = None

    def id(self, row: tuple) -> int:
        i = self.ids.get(row)
        if i is None:
            i = self.ids[row] = len(self.rows)
            self.rows.append(row)
            for k, v in enumerate(row):
                if self.strings[k]:
                    v = self.values[k].setdefault(v, len(self.values[k]))
                self.codes[k].append(v)
            self._arrays = None
        return i

    def _columns(self) -> list:
        """Per column: (dictionary, codes per answer, the first column with the same codes) of
        a string column; the values of an int one."""
        if self._arrays is None:
            self._arrays = []
            for k, t in enumerate(self.types):
                if not self.strings[k]:
                    self._arrays.append(pa.array(self.codes[k], t))
                    continue
                codes = np.array(self.codes[k], np.int32)
                same = next((j for j, c in enumerate(self._arrays) if isinstance(c, tuple) and len(c[1]) > 1
                             and np.array_equal(c[1], codes)), k)
                self._arrays.append((pa.array(list(self.values[k]), pa.string()), codes, same))
        return self._arrays

    def columns(self, ids) -> list[pa.Array]:
        """The columns of the answers `ids` (int32, one per row)."""
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        out = []
        indices: dict[int, pa.Array] = {}  # by the column whose codes they are (country and city often share)
        rows = None
        for k, c in enumerate(self._columns()):
            if not isinstance(c, tuple):
                out.append(c.take(ids))
                continue
            dictionary, codes, same = c
            if len(dictionary) == 1:  # one value (an unknown column, a single site): no take
                if -1 not in indices:
                    indices[-1] = pa.array(np.zeros(len(ids), np.int32))
                same = -1
            elif same not in indices:
                if rows is None:
                    rows = ids.to_numpy()
                indices[same] = pa.array(codes[rows])
            out.append(pa.DictionaryArray.from_arrays(indices[same], dictionary, safe=False))
        return out


class Recent:
    """Keys of the last tables and their answer ids. `ids(col, lookup)`: each row's answer id;
    `lookup(keys)` answers the distinct keys not known here with (ids, keep flags): a key
    not kept (an interface asked for again) is looked up again in the next table."""

    def __init__(self, limit: int | None = None):
        self.limit = RECENT_KEYS if limit is None else limit
        self.keys = pa.array([], pa.null())
        self.answer_ids = pa.array([], pa.int32())

    def ids(self, col: pa.Array, lookup) -> pa.Array:
        if len(self.keys):
            pos = pc.index_in(col, value_set=self.keys)
            if pos.null_count == 0:  # the usual case: every key seen in the last tables
                return self.answer_ids.take(pos)
        uniq = pc.unique(col)
        new = uniq.filter(pc.invert(pc.is_in(uniq, value_set=self.keys))) if len(self.keys) else uniq
        found, keep = lookup(new)
        keys = pa.concat_arrays([self.keys.cast(col.type), new])
        answer_ids = pa.concat_arrays([self.answer_ids, pa.array(np.asarray(found, np.int32))])
        out = answer_ids.take(pc.index_in(col, value_set=keys))
        if not all(keep):
            mask = pa.array([True] * len(self.keys) + list(keep))
            keys, answer_ids = keys.filter(mask), answer_ids.filter(mask)
        if len(keys) > self.limit:  # start over from this table's keys: the hash built per table stays small
            mine = uniq.filter(pc.is_in(uniq, value_set=keys))
            keys, answer_ids = mine, answer_ids.take(pc.index_in(mine, value_set=keys))
            if len(keys) > self.limit:
                keys, answer_ids = pa.array([], pa.null()), pa.array([], pa.int32())
        self.keys, self.answer_ids = keys, answer_ids
        return out
