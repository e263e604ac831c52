"""The one way to declare a record or table: fields with type, unit and meaning.

Every view (Avro schema, Spark StructType, Superset column descriptions, the
Markdown docs table) is generated from a `Record` here; nothing is written twice.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

# logical type -> (avro type, spark type name, duckdb/sql type)
TYPES = {
    "int": ("int", "int", "INTEGER"),
    "long": ("long", "bigint", "BIGINT"),
    "double": ("double", "double", "DOUBLE"),
    "string": ("string", "string", "VARCHAR"),
    "boolean": ("boolean", "boolean", "BOOLEAN"),
    "bytes": ("bytes", "binary", "BLOB"),
    "timestamp_ms": ({"type": "long", "logicalType": "timestamp-millis"}, "timestamp", "TIMESTAMP"),
    "date": ({"type": "int", "logicalType": "date"}, "date", "DATE"),
    "map_string_double": ({"type": "map", "values": "double"}, "map<string,double>", "MAP(VARCHAR, DOUBLE)"),
    "map_string_string": ({"type": "map", "values": "string"}, "map<string,string>", "MAP(VARCHAR, VARCHAR)"),
    "array_double": ({"type": "array", "items": "double"}, "array<double>", "DOUBLE[]"),
    "array_int": ({"type": "array", "items": "int"}, "array<int>", "INTEGER[]"),
    "array_long": ({"type": "array", "items": "long"}, "array<bigint>", "BIGINT[]"),
    "array_string": ({"type": "array", "items": "string"}, "array<string>", "VARCHAR[]"),
}


ADDRESS_KINDS = ("", "one", "list")


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    doc: str
    unit: str = ""
    nullable: bool = False
    default: object = None
    # Holds host addresses, which `--anonymise` replaces (jobs/anonymise.py): "one" = an
    # address (or a host name, left as it is), "list" = comma-separated addresses; "" = none.
    address: str = ""

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"field {self.name}: unknown type {self.type!r}")
        if self.address not in ADDRESS_KINDS:
            raise ValueError(f"field {self.name}: address={self.address!r}, expected one of {ADDRESS_KINDS}")


@dataclass(frozen=True)
class Record:
    name: str
    namespace: str
    doc: str
    fields: tuple[Field, ...]
    partition_by: tuple[str, ...] = field(default=())

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def address_fields(self, kind: str = "one") -> list[str]:
        """Names of the fields declared to hold addresses of this kind (anonymised on export)."""
        return [f.name for f in self.fields if f.address == kind]

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.name} has no field {name!r}")

    # ---- Avro ----------------------------------------------------------------------
    def avro_schema(self) -> dict:
        out = []
        for f in self.fields:
            t = TYPES[f.type][0]
            entry = {"name": f.name, "type": ["null", t] if f.nullable else t, "doc": _doc(f)}
            if f.nullable:
                entry["default"] = None
            out.append(entry)
        return {"type": "record", "name": self.name, "namespace": self.namespace,
                "doc": self.doc, "fields": out}

    def avro_json(self) -> str:
        return json.dumps(self.avro_schema(), indent=2)

    # ---- Spark ---------------------------------------------------------------------
    def spark_ddl(self) -> str:
        return ", ".join(
            f"`{f.name}` {TYPES[f.type][1]}{'' if f.nullable else ' NOT NULL'}" for f in self.fields
        )

    def spark_schema(self):
        """The StructType, built in Python (no JVM needed, unlike StructType.fromDDL)."""
        from pyspark.sql import types as T  # noqa: PLC0415  (start-up: pyspark)

        spark_types = {
            "int": T.IntegerType(), "long": T.LongType(), "double": T.DoubleType(),
            "string": T.StringType(), "boolean": T.BooleanType(), "bytes": T.BinaryType(),
            "timestamp_ms": T.TimestampType(), "date": T.DateType(),
            "map_string_double": T.MapType(T.StringType(), T.DoubleType()),
            "map_string_string": T.MapType(T.StringType(), T.StringType()),
            "array_double": T.ArrayType(T.DoubleType()),
            "array_int": T.ArrayType(T.IntegerType()),
            "array_long": T.ArrayType(T.LongType()),
            "array_string": T.ArrayType(T.StringType()),
        }
        return T.StructType([T.StructField(f.name, spark_types[f.type], f.nullable, {"comment": _doc(f)})
                             for f in self.fields])

    # ---- SQL / Superset / docs ------------------------------------------------------
    def sql_columns(self) -> list[tuple[str, str]]:
        return [(f.name, TYPES[f.type][2]) for f in self.fields]

    def superset_columns(self) -> list[dict]:
        return [
            {"column_name": f.name, "type": TYPES[f.type][2], "description": _doc(f),
             "is_dttm": f.type in ("timestamp_ms", "date"), "groupby": True, "filterable": True}
            for f in self.fields
        ]

    def markdown(self) -> str:
        lines = [f"### `{self.name}`", "", self.doc, "",
                 "| column | type | unit | meaning |", "|---|---|---|---|"]
        for f in self.fields:
            null = " (nullable)" if f.nullable else ""
            anon = {"one": " (address: anonymised on export)", "list": " (addresses: anonymised on export)"}.get(f.address, "")
            lines.append(f"| `{f.name}` | {f.type}{null} | {f.unit} | {f.doc}{anon} |")
        if self.partition_by:
            lines += ["", "Partitioned by " + ", ".join(f"`{p}`" for p in self.partition_by) + "."]
        return "\n".join(lines) + "\n"


def _doc(f: Field) -> str:
    return f"{f.doc} [{f.unit}]" if f.unit else f.doc


# Columns every report table shares, declared once.
REPORT_DATE = Field("date", "string", "report date, YYYY-MM-DD (partition)")
REPORT_HOUR = Field("hour", "int", "UTC hour 0-23; null = the whole day", nullable=True)
# The counting rule a report of flows was computed with (issue 34): the site's `[site] count_at`
# (auto, boundary, key: each flow once) or all (every observation: views per device or interface).
REPORT_COUNT_AT = Field("count_at", "string",
                        "counting rule the rows were computed with ([site] count_at, issue 34): auto / boundary / key "
                        "count each flow once at a multi-router border; all = every observation (a view per device or "
                        "interface, or the site set to all); null in partitions written before the column existed",
                        nullable=True)
