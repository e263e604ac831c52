"""The Go shipper's hand-written field tables against the one declaration (schemas/flow.py
FLOW): names, order and kind (text or integer). Pure: reads the Go source, runs nothing.

The shipper takes the field order from FLOW's Avro schema at run time (avro.go NewEncoder,
flowbatch.go), but three tables in its source mirror the field list by hand:
- avro.go's fieldID constants (fTimeStart ... fDstVlan, before fNull), in schema order;
- avro.go's knownFields: schema name -> (fieldID, written as a string?, as an array of int?);
- main.go's JSON writer (-json output): one num(...)/str(...) per field, then the
  revision-3 fields (null when a record lacks them) in its optionalJSON table, in schema order.
A field added to FLOW that the shipper does not fill must be nullable (NewEncoder writes it
null); a field the shipper fills must be in all three tables.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path

from flowlake.schemas.flow import FILLED_AT_INGEST, FLOW

SHIPPER = Path(__file__).resolve().parents[2] / "collectors" / "shipper"
INTEGER = {"int", "long", "timestamp_ms"}


def _schema_lines() -> list[str]:
    out = []
    for f in FLOW.fields:
        if f.name in FILLED_AT_INGEST:  # the ingest fills them; the shipper writes null
            continue
        kind = ("string" if f.type == "string" else "integer" if f.type in INTEGER
                else "array" if f.type == "array_int" else f"unexpected type {f.type}")
        out.append(f"{f.name} {kind}")
    return out


def _diff(want: list[str], got: list[str], what: str) -> str:
    return (f"{what} differs from schemas/flow.py FLOW (- schema, + Go):\n"
            + "\n".join(difflib.unified_diff(want, got, "schemas/flow.py FLOW", what, lineterm="", n=1)))


def _block(text: str, start: str) -> str:
    """The text from `start` to its closing bracket (the first line that is only ')' or '}')."""
    i = text.index(start)
    j = re.compile(r"^[)}]\s*$", re.MULTILINE).search(text, i).start()
    return text[i:j]


def _avro_tables() -> tuple[list[str], dict[str, tuple[str, str]]]:
    src = (SHIPPER / "avro.go").read_text()
    consts = re.findall(r"^\s*(f[A-Za-z0-9]+)(?:\s+fieldID\s*=\s*iota)?\s*(?://.*)?$",
                        _block(src, "fTimeStart fieldID = iota"), re.MULTILINE)
    assert consts and consts[-1] == "fNull", f"avro.go: the fieldID constants should end with fNull: {consts}"
    known = {name: (ident, "string" if text == "true" else "array" if lst == "true" else "integer")
             for name, ident, text, lst in
             re.findall(r'"([a-z0-9_]+)":\s*\{(f[A-Za-z0-9]+),\s*(true|false),\s*(true|false)\}',
                        _block(src, "var knownFields"))}
    assert known, "avro.go: knownFields not found"
    return consts[:-1], known


def test_avro_field_ids_follow_the_schema():
    consts, known = _avro_tables()
    by_id = {ident: name for name, (ident, _) in known.items()}
    unnamed = [c for c in consts if c not in by_id]
    assert not unnamed, f"avro.go: fieldID constants without a knownFields entry: {unnamed}"
    got = [f"{by_id[c]} {known[by_id[c]][1]}" for c in consts]
    assert len(known) == len(consts), f"avro.go: knownFields names ids that are not constants: {set(known) - set(by_id.values())}"
    want = _schema_lines()
    assert got == want, _diff(want, got, "collectors/shipper/avro.go fieldID constants + knownFields")


def test_json_writer_follows_the_schema():
    src = (SHIPPER / "main.go").read_text()
    body = src[src.index('b = append(b, `{"time_start":`...)'):]
    body = body[:body.index("return append(b, '}'")]
    got = ["time_start integer"] + [f"{name} {'string' if kind == 'str' else 'integer'}"
                                    for kind, name in re.findall(r'^\s*(num|str)\("([a-z0-9_]+)"', body, re.MULTILINE)]
    _, known = _avro_tables()
    table = src[src.index("var optionalJSON"):]
    got += [f"{name} {known[name][1]}" for name, _ in
            re.findall(r'\{"([a-z0-9_]+)",\s*(f[A-Za-z0-9]+)\}', _block(table, "var optionalJSON"))]
    want = _schema_lines()
    assert got == want, _diff(want, got, "collectors/shipper/main.go JSON writer")


def test_the_diff_names_what_differs():
    want = _schema_lines()
    got = [line for line in want if not line.startswith("tos ")] + ["tos string"]
    message = _diff(want, got, "collectors/shipper/avro.go")
    assert "-tos integer" in message and "+tos string" in message
