"""NAT translations of one address (`flowlake host ADDR`, issue 32 part 5): who was behind a
public address, or which public address and port an inside host had, in a time window.

A flow record of flow record revision 3 carries up to two translations (NSEL/NEL, IPFIX
postNAT* elements 225-228):
  source      inside src_addr:src_port            <-> outside src_addr_nat:src_port_nat
  destination inside dst_addr_nat:dst_port_nat    <-> outside dst_addr:dst_port
(a source NAT rewrites the inside host's address on the way out; a destination NAT, a port
forward, rewrites the public address a flow was sent to into the inside host's). A side
counts as translated when its NAT address is present, not all-zero, and differs from the
address or the port. The translations where ADDR is the inside or the outside address are
grouped by (kind, inside, outside, nat_event) with their flows and first/last seen. The
reverse half of a biflow (biflow_half 2: addresses swapped, the NAT columns the initiator's)
is left out: its initiator's half carries the same translation.

One definition, two engines: `translations()` on Spark, `translations_sql()` on DuckDB
(jobs/query/duck.py); tests/jobs/test_query.py holds them equal.
"""
from __future__ import annotations

import ipaddress

# the revision-3 columns read here, with their DuckDB and Spark types (null in older lakes)
COLUMNS = {"src_addr_nat": ("VARCHAR", "string"), "dst_addr_nat": ("VARCHAR", "string"),
           "src_port_nat": ("INTEGER", "int"), "dst_port_nat": ("INTEGER", "int"),
           "nat_event": ("INTEGER", "int"), "biflow_half": ("INTEGER", "int")}
KEYS = ["kind", "inside_addr", "inside_port", "outside_addr", "outside_port", "nat_event"]
OUT = [*KEYS, "flows", "first_seen", "last_seen"]
ZEROS = ("0.0.0.0", "::")
# (kind, inside addr, inside port, outside addr, outside port, the side's own addr and port)
SIDES = (("source", "src_addr", "src_port", "src_addr_nat", "src_port_nat", "src_addr_nat", "src_port_nat",
          "src_addr", "src_port"),
         ("destination", "dst_addr_nat", "dst_port_nat", "dst_addr", "dst_port", "dst_addr_nat", "dst_port_nat",
          "dst_addr", "dst_port"))


def translations(flows, address: str, limit: int = 50) -> tuple[list[dict], int]:
    """(the first `limit` translations of `address` by first seen, how many there are) on Spark."""
    from pyspark.sql import functions as F  # noqa: PLC0415  (start-up: pyspark only on the Spark engine)

    from flowlake.jobs.common import with_columns_or_null  # noqa: PLC0415  (start-up: pyspark)

    from .compiler import address_in  # noqa: PLC0415  (start-up: pyspark)

    net = (ipaddress.ip_network(ipaddress.ip_address(address)),)
    flows = with_columns_or_null(flows, {c: t for c, (_, t) in COLUMNS.items()})
    parts = None
    for kind, in_a, in_p, out_a, out_p, nat_a, nat_p, own_a, own_p in SIDES:
        translated = (F.col(nat_a).isNotNull() & ~F.col(nat_a).isin(*ZEROS)
                      & ((F.col(nat_a) != F.col(own_a)) | ~F.col(nat_p).eqNullSafe(F.col(own_p)))
                      & (F.coalesce(F.col("biflow_half"), F.lit(0)) != 2))
        part = (flows.where(translated & (address_in(F.col(in_a), net) | address_in(F.col(out_a), net)))
                .select(F.lit(kind).alias("kind"), F.col(in_a).alias("inside_addr"), F.col(in_p).alias("inside_port"),
                        F.col(out_a).alias("outside_addr"), F.col(out_p).alias("outside_port"), "nat_event",
                        "time_start", "time_end"))
        parts = part if parts is None else parts.unionByName(part)
    grouped = (parts.groupBy(*KEYS).agg(F.count(F.lit(1)).alias("flows"), F.min("time_start").alias("first_seen"),
                                        F.max("time_end").alias("last_seen")).cache())
    try:
        total = grouped.count()
        order = ["first_seen", "kind", "inside_addr", F.coalesce("inside_port", F.lit(-1)), "outside_addr",
                 F.coalesce("outside_port", F.lit(-1)), F.coalesce("nat_event", F.lit(-1))]
        rows = grouped.orderBy(*order).limit(int(limit)).select(*OUT).collect() if limit else []
        return [r.asDict() for r in rows], total
    finally:
        grouped.unpersist()


def translations_sql(source: str, address: str) -> tuple[str, str]:
    """(the grouped translations of `address` as a DuckDB query over `source`, its ORDER BY)."""
    from .sql import address_in, host_net  # noqa: PLC0415  (start-up: sql imports the filter AST)

    net = host_net(address)
    parts = []
    for kind, in_a, in_p, out_a, out_p, nat_a, nat_p, own_a, own_p in SIDES:
        zeros = ", ".join(f"'{z}'" for z in ZEROS)
        translated = (f"{nat_a} IS NOT NULL AND {nat_a} NOT IN ({zeros}) "
                      f"AND ({nat_a} <> {own_a} OR {nat_p} IS DISTINCT FROM {own_p}) AND coalesce(biflow_half, 0) <> 2")
        parts.append(f"""SELECT '{kind}' AS kind, {in_a} AS inside_addr, {in_p} AS inside_port,
                   {out_a} AS outside_addr, {out_p} AS outside_port, nat_event, time_start, time_end
            FROM {source} WHERE {translated} AND ({address_in(in_a, net)} OR {address_in(out_a, net)})""")
    union = " UNION ALL ".join(parts)
    query = f"""SELECT {', '.join(KEYS)}, count(*) AS flows, CAST(min(time_start) AS TIMESTAMP) AS first_seen,
            CAST(max(time_end) AS TIMESTAMP) AS last_seen FROM ({union}) GROUP BY ALL"""
    order = ("first_seen, kind, inside_addr, coalesce(inside_port, -1), outside_addr, coalesce(outside_port, -1), "
             "coalesce(nat_event, -1)")
    return query, order
