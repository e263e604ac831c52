"""Build Superset's import bundle (a ZIP of YAML) from the sources in this folder.

Sources, all with fixed UUIDs so a re-import overwrites instead of duplicating:
  database.yaml          the DuckDB connection to the lake
  datasets.yaml          calculated columns for table datasets, and derived SQL datasets
  dashboards/*.yaml      one dashboard each, with its charts in compact form

Table datasets are generated from `flowlake.schemas.registry()` (column descriptions
included), so they follow the schemas as other areas add them. A chart whose dataset
or columns are not declared (yet) is skipped with a warning, never invented.

Every dataset is a physical table to Superset: a view in a small DuckDB file
(`Bundle.views`, written by superset/lake_views.py at provision time and opened
read-only by the lake connection) over the lake's Parquet files. Superset then sends
plain `SELECT ... FROM main.<view>` queries, and skips the per-request work it does for
virtual (SQL) datasets (a DuckDB connection just to look up the default schema, SQL
parsing for row-level security): that work cost more than serving a cached chart.

Runs in flowlake's virtualenv (it needs the schemas); the import itself runs inside
Superset's virtualenv (superset/import_bundle.py).
"""
from __future__ import annotations

import html
import io
import ipaddress
import json
import logging
import re
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

log = logging.getLogger("flowlake.superset.bundle")

HERE = Path(__file__).resolve().parent
NAMESPACE = uuid.UUID("5a1e0c8e-7f1a-4f0e-9b7e-f10d1a4e0007")  # fixed: dataset UUIDs derive from it
DATABASE_NAME = "flowlake lake (DuckDB)"
VERSION = "1.0.0"


class BundleError(ValueError):
    """A source file under superset/ is malformed; the message names file and field."""


def dataset_uuid(name: str) -> str:
    return str(uuid.uuid5(NAMESPACE, f"dataset/{name}"))


# ---- SQL fragments templated at provision time ------------------------------------------
def parquet_source(lake: Path, rel: str) -> str:
    """The Parquet files of a lake table (DuckDB re-expands the glob at every query, so
    files written later are seen). Superset's DuckDB (1.4, for the delta extension) fails
    a glob that matches nothing, so a table without files gets no glob (`table_source`)."""
    path = str(Path(lake) / rel / "**" / "*.parquet").replace("'", "''")
    return f"read_parquet('{path}', hive_partitioning=true, union_by_name=true)"


def has_parquet(lake: Path, rel: str) -> bool:
    """Does the table's folder hold a Parquet file yet (stops at the first found)?"""
    return next((Path(lake) / rel).rglob("*.parquet"), None) is not None


def is_delta_table(lake: Path, rel: str) -> bool:
    """A lake table folder that is a Delta table (issue 38): it has a `_delta_log/`."""
    return (Path(lake) / rel / "_delta_log").is_dir()


def delta_source(lake: Path, rel: str) -> str:
    """A Delta table's current version, read by DuckDB's delta extension: each query reads
    the log and then exactly the files of one version, so a compaction or retention commit
    in between is never half seen (the replaced files stay until VACUUM). The lake
    connection loads the extension (superset_config.py)."""
    path = str(Path(lake) / rel).replace("'", "''")
    return f"delta_scan('{path}')"


def table_source(lake: Path, rel: str) -> str | None:
    """What a lake table's view reads: the Delta table if the folder is one, else the
    Parquet glob, or nothing (None) while the folder has no Parquet file. Decided when the
    views file is written: `flowlake superset views` (also run by `superset start`,
    `provision`, and after the report jobs) rewrites it when a table changed kind or got
    its first files."""
    if is_delta_table(lake, rel):
        return delta_source(lake, rel)
    return parquet_source(lake, rel) if has_parquet(lake, rel) else None


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_view_sql(lake: Path, rel: str, columns: list[dict]) -> str:
    """A lake table with exactly its declared columns, whatever the files hold: an empty
    typed branch gives the columns (and their types) before any file exists; columns
    missing from older files read as NULL (union by name); undeclared ones are dropped."""
    typed = ", ".join(f"CAST(NULL AS {c['type']}) AS {ident(c['column_name'])}" for c in columns)
    names = ", ".join(ident(c["column_name"]) for c in columns)
    source = table_source(lake, rel)
    if source is None:  # no file yet: the typed empty relation (rewritten once files exist)
        return f"SELECT {names} FROM (SELECT {typed} WHERE false)"
    if source.startswith("delta_scan(") and any(c["column_name"] == "date" for c in columns):
        # a Delta partition value is a string; the glob's hive partition reads as DATE
        source = f'(SELECT * REPLACE (CAST("date" AS DATE) AS "date") FROM {source})'
    return (f"SELECT {names} FROM (SELECT * FROM {source} "
            f"UNION ALL BY NAME SELECT {typed} WHERE false)")


def _ipv4_int(col: str) -> str:
    # DuckDB without the inet extension: dotted quad -> integer (NULL for IPv6 text).
    parts = [f"TRY_CAST(split_part({col}, '.', {i}) AS BIGINT)" for i in range(1, 5)]
    return f"(CASE WHEN {col} LIKE '%.%.%.%' AND {col} NOT LIKE '%:%' THEN " \
           f"(({parts[0]} * 16777216) + ({parts[1]} * 65536) + ({parts[2]} * 256) + {parts[3]}) END)"


def local_sql(col: str, prefixes: list[str]) -> str:
    """SQL boolean: is the address text in `col` inside one of the local prefixes?

    IPv4 exactly (integer range); IPv6 by the prefix's leading hextets as text, which is
    exact for prefixes whose length is a multiple of 16 and written without `::` inside
    the prefix part (e.g. 2001:db8::/32); other IPv6 prefixes are rejected loudly."""
    terms = []
    for text in prefixes:
        try:
            net = ipaddress.ip_network(text, strict=False)
        except ValueError as exc:
            raise BundleError(f"[site] local_prefixes: {text!r}: {exc}") from None
        if net.version == 4:
            lo, hi = int(net.network_address), int(net.broadcast_address)
            terms.append(f"({_ipv4_int(col)} BETWEEN {lo} AND {hi})")
        else:
            if net.prefixlen % 16:
                raise BundleError(f"[site] local_prefixes: {text}: IPv6 prefix length must be a multiple of 16 for the Superset direction column")
            groups = net.network_address.exploded.split(":")[: net.prefixlen // 16]
            head = ":".join(format(int(g, 16), "x") for g in groups)
            terms.append(f"(lower({col}) LIKE '{head}:%')")
    return "(" + " OR ".join(terms) + ")" if terms else "FALSE"


def direction_sql(prefixes: list[str], src: str = "src_addr", dst: str = "dst_addr") -> str:
    s, d = local_sql(src, prefixes), local_sql(dst, prefixes)
    return (f"CASE WHEN {s} AND {d} THEN 'internal' WHEN {d} THEN 'inbound' "
            f"WHEN {s} THEN 'outbound' ELSE 'transit' END")


PROTO_NAME_SQL = ("CASE proto WHEN 6 THEN 'TCP' WHEN 17 THEN 'UDP' WHEN 1 THEN 'ICMP' "
                  "WHEN 58 THEN 'ICMPv6' WHEN 47 THEN 'GRE' WHEN 50 THEN 'ESP' "
                  "ELSE 'proto ' || CAST(proto AS VARCHAR) END")


def templates(cfg) -> dict[str, str]:
    prefixes = list(cfg.site.local_prefixes)
    direction = direction_sql(prefixes)
    return {
        "lake": str(cfg.lake),
        "flows": ident("flows"),  # the view (derived datasets are views over the table views)
        "direction": direction,
        "proto_name": PROTO_NAME_SQL,
        "flow_class": (f"CASE WHEN proto = 6 AND ({direction}) = 'inbound' THEN 'TCP in' "
                       f"WHEN proto = 6 THEN 'TCP out' WHEN proto = 17 THEN 'UDP' "
                       f"WHEN proto IN (1, 58) THEN 'ICMP' ELSE 'other' END"),
        "interface_speed": interface_speed_sql(cfg),
        "silent_after_seconds": repr(float(getattr(getattr(cfg, "health", None), "silent_after_seconds", 300))),
        **pinger_band_lists(cfg),
    }


def pinger_band_lists(cfg) -> dict[str, str]:
    """${pinger_<metric>_bands}: [pinger] band names, best first, as a DuckDB list literal
    (a band's position in it orders the heat-map colours)."""
    pinger = getattr(cfg, "pinger", None)
    out = {}
    for metric in ("rtt", "loss", "ipdv"):
        names = list(getattr(pinger, f"{metric}_band_names", None) or ["n/a"]) if pinger else ["n/a"]
        out[f"pinger_{metric}_bands"] = "[" + ", ".join("'" + str(n).replace("'", "''") + "'" for n in names) + "]"
    return out


def interface_speed_sql(cfg, exporter: str = "exporter", if_index: str = "if_index") -> str:
    """SQL for an interface's speed in bit/s, from the same settings the bulk-transfer job
    uses ([active] interface_speeds "exporter/ifindex=bps" with "*" wildcards, first match
    wins, else default_interface_speed_bps)."""
    active = getattr(cfg, "active", None)
    default = float(getattr(active, "default_interface_speed_bps", 1e9)) if active else 1e9
    whens = []
    for entry in (getattr(active, "interface_speeds", []) if active else []):
        try:
            key, bps = entry.split("=", 1)
            exp_, idx = key.strip().rsplit("/", 1)
            speed = float(bps)
            conds = []
            if exp_ != "*":
                conds.append(f"{exporter} = '{exp_.replace(chr(39), '')}'")
            if idx != "*":
                conds.append(f"{if_index} = {int(idx)}")
        except ValueError:
            raise BundleError(f"[active] interface_speeds: {entry!r}: expected exporter/ifindex=bps") from None
        whens.append(f"WHEN {' AND '.join(conds) or 'TRUE'} THEN {speed!r}")
    if not whens:
        return repr(default)
    return f"(CASE {' '.join(whens)} ELSE {default!r} END)"


VIEW_SCHEMA = "main"
GROWING_TABLE_CACHE_S = 300


class MissingTable(LookupError):
    """A derived dataset reads a report table that is not declared (yet)."""


def fill(text: str, values: dict[str, str], where: str) -> str:
    def sub(m):
        key = m.group(1)
        if key.startswith(("report_", "rollup_", "table_")) and key not in values:
            raise MissingTable(key.removeprefix("report_").removeprefix("table_"))
        if key not in values:
            raise BundleError(f"{where}: unknown placeholder ${{{key}}} (known: {', '.join(sorted(values))})")
        return values[key]
    return re.sub(r"\$\{(\w+)\}", sub, text)


# ---- datasets -------------------------------------------------------------------------
@dataclass
class Dataset:
    name: str
    uuid: str
    sql: str  # the view's SELECT
    columns: list[dict]
    main_dttm_col: str | None
    description: str = ""
    cache_timeout: int | None = None  # seconds; None = the data cache's default

    @property
    def column_names(self) -> set[str]:
        return {c["column_name"] for c in self.columns}


def table_location(record) -> str | None:
    """Where a registry record lives in the lake, or None if it is not a lake table."""
    if record.namespace == "flowlake.pipelines.lake":  # lake/<name>: flows, active, exporter_health
        return record.name
    if record.namespace == "flowlake.rollups":  # lake/rollups/<1m|5m|1h|1d>/ (schemas/rollups.py)
        return "rollups/" + record.name.split("_", 1)[1]
    if record.fields and record.fields[-1].name == "date" and record.namespace != "flowlake.v1":
        return f"reports/{record.name}"
    return None


def _column(name, type_, doc="", is_dttm=False, expression=None) -> dict:
    return {"column_name": name, "verbose_name": None, "is_dttm": is_dttm, "is_active": True,
            "type": type_, "advanced_data_type": None, "groupby": True, "filterable": True,
            "expression": expression, "description": doc or None, "python_date_format": None,
            "extra": {}}


def build_datasets(cfg, registry: dict, spec: dict, where: str) -> dict[str, Dataset]:
    values = templates(cfg)
    for name, record in registry.items():
        rel = table_location(record) or ""
        if rel.startswith("reports/"):
            values[f"report_{name}"] = ident(name)  # the table's view
        elif rel.startswith("rollups/"):
            values[name] = ident(name)  # ${rollup_1d}, ...
        elif rel:
            values[f"table_{name}"] = ident(name)  # a lake table's view (flows, exporter_health, ...)
    out: dict[str, Dataset] = {}
    for name, record in sorted(registry.items()):
        rel = table_location(record)
        if rel is None:
            continue
        cols = []
        for c in record.superset_columns():
            col = _column(c["column_name"], c["type"], c["description"], c["is_dttm"])
            if c["column_name"] == "date":  # hive partition value: DuckDB reads it as DATE
                col.update(type="DATE", is_dttm=True)
            cols.append(col)
        for i, extra in enumerate((spec.get("calculated") or {}).get(name, [])):
            at = f"{where}: calculated.{name}[{i}]"
            _need(extra, ("column_name", "type", "expression"), at)
            cols.append(_column(extra["column_name"], extra["type"], extra.get("description", ""),
                                bool(extra.get("is_dttm")), fill(extra["expression"], values, at)))
        dttm = "time_start" if "time_start" in record.names else ("date" if "date" in record.names else None)
        stored = [c for c in cols if not c["expression"]]
        # Report tables change when the jobs rewrite them (the cache notices); the flows and
        # active results grow continuously, so cached answers over them live 5 minutes.
        timeout = None if rel.startswith("reports/") else GROWING_TABLE_CACHE_S
        out[name] = Dataset(name, dataset_uuid(name), table_view_sql(cfg.lake, rel, stored), cols, dttm, record.doc,
                            timeout)
    for i, d in enumerate(spec.get("derived") or []):
        at = f"{where}: derived[{i}]"
        _need(d, ("name", "uuid", "sql", "columns"), at)
        cols = []
        for j, c in enumerate(d["columns"]):
            _need(c, ("name", "type"), f"{at}.columns[{j}]")
            cols.append(_column(c["name"], c["type"], c.get("doc", ""), bool(c.get("is_dttm"))))
        try:
            sql = fill(d["sql"], values, at).strip()
        except MissingTable as exc:
            log.warning("%s: dataset %r skipped: table %r is not declared in schemas/ yet", at, d["name"], str(exc))
            continue
        out[d["name"]] = Dataset(d["name"], str(uuid.UUID(d["uuid"])), sql,
                                 cols, d.get("main_dttm_col"), d.get("description", ""))
    return out


def _unique_uuids(paths) -> None:
    """Superset imports by UUID: a dashboard or chart reusing another's UUID silently
    replaces it (two dashboards once shared one and only one of them showed)."""
    seen: dict[str, str] = {}
    for path in paths:
        for found in re.findall(r"uuid:\s*([0-9a-fA-F-]{36})", path.read_text()):
            key = found.lower()
            if key in seen:
                raise BundleError(f"{path}: uuid {found} is already used in {seen[key]}")
            seen[key] = path.name


def _need(obj, keys, where):
    if not isinstance(obj, dict):
        raise BundleError(f"{where}: expected a mapping")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise BundleError(f"{where}: missing {', '.join(missing)}")


def dataset_yaml(ds: Dataset, database_uuid: str) -> dict:
    return {
        "table_name": ds.name, "main_dttm_col": ds.main_dttm_col, "description": ds.description or None,
        "default_endpoint": None, "offset": 0, "cache_timeout": ds.cache_timeout, "catalog": None, "schema": VIEW_SCHEMA,
        "sql": None, "params": None, "template_params": None, "filter_select_enabled": True,
        "fetch_values_predicate": None, "extra": None, "normalize_columns": False,
        "uuid": ds.uuid,
        "metrics": [{"metric_name": "count", "verbose_name": "COUNT(*)", "metric_type": "count",
                     "expression": "COUNT(*)", "description": None, "d3format": None,
                     "extra": {}, "warning_text": None}],
        "columns": ds.columns, "version": VERSION, "database_uuid": database_uuid,
    }


# ---- charts -----------------------------------------------------------------------------
# Time grains of Superset 6.1's DuckDB engine spec (db_engine_specs/duckdb.py): no PT5M.
DUCKDB_GRAINS = ("PT1S", "PT1M", "PT1H", "P1D", "P1W", "P1M", "P3M", "P1Y")
VIZ = {"table": "handlebars", "line": "echarts_timeseries_line", "bar": "echarts_timeseries_bar",
       "big_number": "big_number_total", "pie": "pie", "heatmap": "heatmap_v2",
       "area": "echarts_area"}
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _metric(m, where) -> dict:
    if isinstance(m, str):
        m = {"sql": m, "label": m}
    _need(m, ("sql",), where)
    return {"expressionType": "SQL", "sqlExpression": m["sql"], "label": m.get("label", m["sql"]),
            "hasCustomLabel": True, "optionName": "metric_" + re.sub(r"\W", "_", m.get("label", m["sql"]))}


def chart_columns(chart: dict) -> set[str]:
    """Dataset columns a chart needs: explicit ones plus `requires` for SQL expressions."""
    cols = set(chart.get("groupby") or []) | set(chart.get("columns") or []) | set(chart.get("requires") or [])
    if chart.get("x"):
        cols.add(chart["x"])
    for f in chart.get("filters") or []:
        cols.add(f["col"])
    return cols


def chart_payload(chart: dict, ds: Dataset, where: str) -> tuple[dict, dict]:
    """(params, query_context) for one compact chart spec."""
    viz = chart["viz"]
    if viz not in VIZ:
        raise BundleError(f"{where}: viz {viz!r} not one of {', '.join(VIZ)}")
    metrics = [_metric(m, f"{where}.metrics[{i}]") for i, m in enumerate(chart.get("metrics") or [])]
    if viz in ("line", "bar", "area", "big_number", "pie", "heatmap") and not metrics:
        raise BundleError(f"{where}: a {viz} chart needs metrics")
    groupby = list(chart.get("groupby") or [])
    limit = int(chart.get("limit", 1000))
    filters = []
    if ds.main_dttm_col:  # the dashboard's time-range filter lands here
        filters.append({"clause": "WHERE", "subject": ds.main_dttm_col, "operator": "TEMPORAL_RANGE",
                        "comparator": "No filter", "expressionType": "SIMPLE"})
    for f in chart.get("filters") or []:
        filters.append({"clause": "WHERE", "subject": f["col"], "operator": f.get("op", "=="),
                        "comparator": f["val"], "expressionType": "SIMPLE"})
    if chart.get("where"):
        filters.append({"clause": "WHERE", "expressionType": "SQL", "sqlExpression": chart["where"]})
    qfilters = [{"col": f["subject"], "op": f["operator"], "val": f["comparator"]}
                for f in filters if f["expressionType"] == "SIMPLE"]
    where_sql = " AND ".join(f"({f['sqlExpression']})" for f in filters if f["expressionType"] == "SQL")
    extras = {"having": "", "where": where_sql}
    params = {"viz_type": VIZ[viz], "adhoc_filters": filters, "row_limit": limit,
              "extra_form_data": {}, "dashboards": []}
    query = {"filters": qfilters, "extras": extras, "applied_time_extras": {}, "orderby": [],
             "annotation_layers": [], "row_limit": limit, "series_limit": 0, "order_desc": True,
             "url_params": {}, "custom_params": {}, "custom_form_data": {}}
    if viz == "table":
        report_table(chart, ds, params, query, metrics, where)
    elif viz in ("line", "bar", "area"):
        x = chart.get("x")
        if not x:
            raise BundleError(f"{where}: a {viz} chart needs x")
        grain = chart.get("time_grain")
        if grain and grain not in DUCKDB_GRAINS:  # Superset would answer the chart with a 500
            raise BundleError(f"{where}: time_grain {grain!r}: Superset's DuckDB engine knows {', '.join(DUCKDB_GRAINS)}")
        temporal = x in {c["column_name"] for c in ds.columns if c["is_dttm"]}
        # Points on a line unless it is a dense time series: a daily (or coarser) series
        # over one day, e.g. the demo's or a new deployment's first, is a single point,
        # and a line without markers draws nothing there.
        markers = viz == "line" and (not temporal or _daily_or_coarser(grain))
        params.update(x_axis=x, time_grain_sqla=grain, metrics=metrics, groupby=groupby,
                      logAxis=bool(chart.get("log_y")), truncateYAxis=False, show_legend=True,
                      rich_tooltip=True, x_axis_title=chart.get("x_title", ""), y_axis_title=chart.get("y_title", ""),
                      y_axis_format=chart.get("y_format", "SMART_NUMBER"),
                      markerEnabled=markers,
                      seriesType="line", order_desc=True, xAxisForceCategorical=not temporal and viz == "bar")
        if viz == "area" or chart.get("stack"):  # series stacked: the total is the top line
            params.update(stack="Stack", opacity=0.7)
        xcol = {"label": x, "sqlExpression": x, "columnType": "BASE_AXIS", "expressionType": "SQL"}
        if temporal:
            xcol["timeGrain"] = grain
        query.update(columns=[xcol] + groupby, metrics=metrics, orderby=[[metrics[0], False]],
                     series_columns=groupby,
                     post_processing=[{"operation": "pivot", "options": {
                         "index": [x], "columns": groupby,
                         "aggregates": {m["label"]: {"operator": "mean"} for m in metrics},
                         "drop_missing_columns": False}},
                         {"operation": "flatten"}])
        if not temporal:  # numeric x (e.g. CCDF): points in x order
            query["orderby"] = [[x, True]]
    elif viz == "big_number":
        params.update(metric=metrics[0], header_font_size=0.4, subheader_font_size=0.15,
                      y_axis_format=chart.get("y_format", "SMART_NUMBER"))
        query.update(columns=[], metrics=[metrics[0]], orderby=[])
    elif viz == "pie":
        params.update(groupby=groupby, metric=metrics[0], show_legend=True, show_labels=True,
                      label_type="key_percent", number_format="SMART_NUMBER", sort_by_metric=True)
        query.update(columns=groupby, metrics=[metrics[0]], orderby=[[metrics[0], False]])
    elif viz == "heatmap":
        heatmap(chart, params, query, metrics, where)
    query_context = {
        "datasource": {"id": 0, "type": "table"}, "force": False, "queries": [query],
        "form_data": params, "result_format": "json", "result_type": "full",
    }
    return params, query_context


def heatmap(chart: dict, params: dict, query: dict, metrics: list[dict], where: str) -> None:
    """ECharts heat map (heatmap_v2): x by y (`groupby`, one column), cells coloured by the
    first metric over `bounds` [lo, hi] with `colors` (a sequential scheme)."""
    x, ys = chart.get("x"), list(chart.get("groupby") or [])
    if not x or len(ys) != 1:
        raise BundleError(f"{where}: a heatmap needs x and exactly one groupby column (the y axis)")
    bounds = chart.get("bounds") or [None, None]
    params.update(x_axis=x, groupby=ys, metric=metrics[0], linear_color_scheme=chart.get("colors", "schemeYlOrRd"),
                  normalize_across="heatmap", normalized=False, value_bounds=bounds, show_legend=True,
                  legend_type="continuous", show_values=True, show_percentage=False, xscale_interval=-1,
                  yscale_interval=-1, left_margin="auto", bottom_margin="auto", sort_x_axis="alpha_asc",
                  sort_y_axis="alpha_asc", y_axis_format=chart.get("y_format", "SMART_NUMBER"))
    query.update(columns=[x, ys[0]], metrics=[metrics[0]], orderby=[[x, True], [ys[0], True]],
                 post_processing=[{"operation": "rank", "options": {"metric": metrics[0]["label"]}}])


# ---- report tables ----------------------------------------------------------------------
# A table chart is static HTML drawn by Superset's Handlebars chart, not its interactive table
# plugin: the plugin cost the browser ~0.1 s more per table, the difference between a
# dashboard opening within 2 s or not on this 2-core box (bench/superset_render.py). The
# chart's data keeps exact numbers (REST, CSV, "view as table"); the template formats them
# with the helpers Superset 6.1 registers (sprintf, division, gte, ...). Dates and times are
# formatted in SQL instead: the browser's date helpers would show its local time, not UTC.
TABLE_FORMAT = re.compile(r"^\.(\d)([sf%])$")  # d3 formats the template can reproduce
NUMERIC_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "HUGEINT", "DOUBLE", "FLOAT", "REAL", "DECIMAL")
_SI_STEPS = "".join(f"{{{{else if (gte (abs v) {10 ** e})}}}}{{{{sprintf f (division v {10 ** e})}}}}{p}"
                    for e, p in ((12, "T"), (9, "G"), (6, "M"), (3, "k")))
TABLE_PARTIALS = (
    # SI prefix with f = "%.<significant digits>g", as d3's ".4s"; nothing for null
    '{{#*inline "si"}}{{#if (eqw v null)}}' + _SI_STEPS + '{{else}}{{sprintf f (division v 1)}}{{/if}}{{/inline}}'
    '{{#*inline "pct"}}{{#unless (eqw v null)}}{{sprintf f (multiplication v 100)}}%{{/unless}}{{/inline}}'
    '{{#*inline "num"}}{{#unless (eqw v null)}}{{sprintf f (division v 1)}}{{/unless}}{{/inline}}')
# Cells never wrap (a table wider than its chart scrolls), except addresses (align="left"):
# an IPv6 address may break anywhere; so may the free-text columns a chart names in `wrap`
# (an alert's summary is as long as its evidence). Superset's markdown renderer turns align into
# style="text-align: ...", the only presentational attribute its sanitizer lets through.
TABLE_CSS = """.handlebars table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
.handlebars th { text-align: left; font-weight: 600; padding: 4px 8px; border-bottom: 1px solid rgba(128,128,128,.5); }
.handlebars td { padding: 3px 8px; border-bottom: 1px solid rgba(128,128,128,.15); white-space: nowrap; }
.handlebars td[style*=left] { white-space: normal; overflow-wrap: anywhere; }
"""


def _daily_or_coarser(grain: str | None) -> bool:
    """ISO 8601 time grains P1D, P1W, P1M, P3M, P1Y... (not PT5M, PT1H)."""
    return bool(grain) and grain.startswith("P") and not grain.startswith("PT")


def _temporal(type_: str | None) -> bool:
    t = (type_ or "").upper()
    return t == "DATE" or t.startswith("TIMESTAMP")


def table_cell(label: str, type_: str | None, fmt: str | None, where: str) -> tuple[str, bool]:
    """(Handlebars for one cell, numeric?). A float without a format gets 4 significant
    digits with an SI prefix, as Superset's default number format would show it."""
    if "]" in label or "}" in label:
        raise BundleError(f"{where}: column label {label!r} cannot be used in a table (']' or '}}')")
    ref = f"[{label}]"
    numeric = fmt is not None or (type_ or "").upper().startswith(NUMERIC_TYPES)
    if fmt is None and (type_ or "").upper() in ("DOUBLE", "FLOAT", "REAL"):
        fmt = ".4s"
    if fmt is None:
        return "{{" + ref + "}}", numeric
    m = TABLE_FORMAT.match(fmt)
    if not m:
        raise BundleError(f"{where}: format {fmt!r} for {label!r}: tables know .Ns (SI prefix, N significant "
                          f"digits), .Nf (N decimals) and .N% (percent with N decimals)")
    digits, kind = m.groups()
    partial, f = {"s": ("si", f"%.{digits}g"), "f": ("num", f"%.{digits}f"), "%": ("pct", f"%.{digits}f")}[kind]
    return f'{{{{> {partial} v={ref} f="{f}"}}}}', True


def report_table(chart: dict, ds: Dataset, params: dict, query: dict, metrics: list[dict], where: str) -> None:
    """Fill params and query of a table chart: raw rows (`columns`) or an aggregate
    (`groupby` + `metrics`), drawn by a generated Handlebars template."""
    types = {c["column_name"]: c["type"] for c in ds.columns}
    formats = {m["label"]: spec.get("format") or chart.get("y_format")  # per metric, else the chart's
               for m, spec in zip(metrics, chart.get("metrics") or []) if isinstance(spec, dict)}
    formats.update(chart.get("formats") or {})  # raw columns: {column: d3 format}

    def column(name: str):
        """A dataset column as selected: dates and times as UTC text, from SQL."""
        if _temporal(types.get(name)):
            expr = (f"CAST({ident(name)} AS DATE)" if types[name].upper() == "DATE"
                    else f"date_trunc('second', {ident(name)})")
            return {"label": name, "sqlExpression": f"CAST({expr} AS VARCHAR)", "expressionType": "SQL"}
        return name

    order = chart.get("order_by")
    if chart.get("columns"):  # raw rows
        names = list(chart["columns"])
        cols = [column(c) for c in names]
        asc = not chart.get("order_desc", True)
        params.update(query_mode="raw", all_columns=cols, order_by_cols=[json.dumps([order, asc])] if order else [])
        query.update(columns=cols, metrics=[], orderby=[[order, asc]] if order else [])
        cells = [(c, types.get(c)) for c in names]
    else:
        groupby = [column(c) for c in chart.get("groupby") or []]
        params.update(query_mode="aggregate", groupby=groupby, metrics=metrics,
                      order_desc=True, timeseries_limit_metric=metrics[0] if metrics else None)
        query.update(columns=groupby, metrics=metrics, orderby=[[metrics[0], False]] if metrics else [])
        cells = [(c, types.get(c)) for c in chart.get("groupby") or []] + [(m["label"], None) for m in metrics]
    head, row = [], []
    for label, type_ in cells:
        cell, numeric = table_cell(label, "VARCHAR" if _temporal(type_) else type_, formats.get(label), where)
        wraps = label.endswith("_addr") or label in (chart.get("wrap") or ())
        align = ' align="right"' if numeric else (' align="left"' if wraps else "")
        head.append(f"<th{align}>{html.escape(label)}</th>")
        row.append(f"<td{align}>{cell}</td>")
    params.update(handlebarsTemplate=TABLE_PARTIALS + "<table><thead><tr>" + "".join(head) + "</tr></thead><tbody>"
                  "{{#each data}}<tr>" + "".join(row) + "</tr>{{/each}}</tbody></table>", styleTemplate="")


# ---- dashboards -----------------------------------------------------------------------
FILTERS = {
    "time": ("Date range", "filter_time", None),
    "exporter": ("Exporter", "filter_select", "exporter"),
    "direction": ("Direction", "filter_select", "direction"),
    "month": ("Month", "filter_select", "month"),
    "side": ("In / out", "filter_select", "side"),
}
# Select filters: (multiple choice, default value or None, pre-filter of the offered values).
# Direction is one required choice, 'all' by default: report tables hold an 'all' row beside
# each direction, so a chart summing over several directions would count flows twice.
# Exporters: any set (report rows per exporter add up); 'all' rows are not an exporter.
SELECT_FILTERS = {
    "exporter": (True, None, "exporter IS NOT NULL AND exporter <> 'all'"),
    "direction": (False, "all", "direction IS NOT NULL"),
    "month": (False, None, "month IS NOT NULL"),  # one month, the newest first (LATEST_FIRST)
    "side": (False, "in", "side IS NOT NULL"),  # one side: in and out each hold all the traffic
}
LATEST_FIRST = {"month"}  # select filters offering their values newest first, the first preselected


@dataclass
class Bundle:
    files: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    charts: dict[str, list[str]] = field(default_factory=dict)  # dashboard slug -> chart titles
    views: dict[str, str] = field(default_factory=dict)  # view name -> SELECT, in creation order
    retired: list[str] = field(default_factory=list)  # chart UUIDs to delete (dashboards' `retired_charts`)
    views_db: str = ""  # where the lake connection expects the views file

    def views_sql(self) -> list[str]:
        return [f"CREATE OR REPLACE VIEW {VIEW_SCHEMA}.{ident(name)} AS {sql}" for name, sql in self.views.items()]

    def zip_bytes(self) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, text in sorted(self.files.items()):
                zf.writestr(f"flowlake_bundle/{name}", text)
        return buf.getvalue()


def _dump(obj) -> str:
    return yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=120)


def _load(path: Path):
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise BundleError(f"{path}: not valid YAML: {exc}") from None


def views_db_path(cfg) -> Path:
    return cfg.path("superset", "lake_views.duckdb")


def build(cfg, registry: dict | None = None, source: Path = HERE) -> Bundle:
    if registry is None:
        from flowlake.schemas import registry as _reg
        registry = _reg()
    bundle = Bundle(views_db=str(views_db_path(cfg)))
    bundle.files["metadata.yaml"] = _dump({"version": VERSION, "type": "assets",
                                           "timestamp": "2026-01-01T00:00:00+00:00"})
    db_path = source / "database.yaml"
    db = _load(db_path)
    _need(db, ("uuid", "database_name", "sqlalchemy_uri"), str(db_path))
    db_uuid = str(uuid.UUID(db["uuid"]))
    db = json.loads(json.dumps(db))
    db["sqlalchemy_uri"] = fill(db["sqlalchemy_uri"], {"views_db": bundle.views_db}, f"{db_path}: sqlalchemy_uri")
    db["version"] = VERSION
    bundle.files["databases/flowlake_lake.yaml"] = _dump(db)

    ds_path = source / "datasets.yaml"
    datasets = build_datasets(cfg, registry, _load(ds_path) or {}, str(ds_path))
    bundle.views = {name: ds.sql for name, ds in datasets.items()}  # tables first, then derived in YAML order
    used: set[str] = set()
    dashboards = sorted((source / "dashboards").glob("*.yaml"))
    _unique_uuids(dashboards)
    for dash_path in dashboards:
        used |= _build_dashboard(bundle, dash_path, datasets, db_uuid)
    for name in sorted(used):
        bundle.files[f"datasets/{name}.yaml"] = _dump(dataset_yaml(datasets[name], db_uuid))
    # Every table dataset is offered for SQL Lab/explore, even if no chart uses it yet.
    for name, ds in datasets.items():
        bundle.files.setdefault(f"datasets/{name}.yaml", _dump(dataset_yaml(ds, db_uuid)))
    return bundle


def _build_dashboard(bundle: Bundle, path: Path, datasets: dict[str, Dataset], db_uuid: str) -> set[str]:
    spec = _load(path)
    _need(spec, ("uuid", "title", "slug", "charts"), str(path))
    used: set[str] = set()
    placed: list[tuple[dict, int, Dataset]] = []  # (chart spec, local id, dataset)
    charts: dict[int, tuple[str, dict]] = {}  # local id -> (bundle file, chart YAML)
    queries: dict[int, dict] = {}  # local id -> saved query_context
    for i, chart in enumerate(spec["charts"]):
        where = f"{path}: charts[{i}]"
        _need(chart, ("uuid", "title", "dataset", "viz"), where)
        ds = datasets.get(chart["dataset"])
        if ds is None:
            msg = f"{path.name}: chart {chart['title']!r} skipped: dataset {chart['dataset']!r} is not declared in schemas/ yet"
            log.warning(msg)
            bundle.skipped.append(msg)
            continue
        missing = sorted(chart_columns(chart) - ds.column_names)
        if missing:
            msg = (f"{path.name}: chart {chart['title']!r} skipped: dataset {ds.name!r} has no column(s) "
                   f"{', '.join(missing)}")
            log.warning(msg)
            bundle.skipped.append(msg)
            continue
        params, qc = chart_payload(chart, ds, where)
        chart_uuid = str(uuid.UUID(chart["uuid"]))
        queries[len(placed) + 1] = qc
        charts[len(placed) + 1] = (f"charts/{_slug(chart['title'])}_{chart_uuid[:8]}.yaml", {
            "slice_name": chart["title"], "description": chart.get("description"),
            "certified_by": None, "certification_details": None, "viz_type": params["viz_type"],
            "params": params, "query_context": None, "cache_timeout": None,
            "uuid": chart_uuid, "version": VERSION, "dataset_uuid": ds.uuid,
        })
        used.add(ds.name)
        placed.append((chart, len(placed) + 1, ds))
    bundle.charts[spec["slug"]] = [c["title"] for c, _, _ in placed]
    bundle.retired += [str(uuid.UUID(u)) for u in spec.get("retired_charts") or []]

    position = _layout(spec, placed)
    filters = []
    for key in spec.get("filters") or []:
        if key not in FILTERS:
            raise BundleError(f"{path}: filters: {key!r} not one of {', '.join(FILTERS)}")
        name, ftype, column = FILTERS[key]
        fid = "NATIVE_FILTER-" + str(uuid.uuid5(uuid.UUID(spec["uuid"]), key))[:12]
        flt = {"id": fid, "name": name, "filterType": ftype, "type": "NATIVE_FILTER",
               "controlValues": {}, "defaultDataMask": {"extraFormData": {}, "filterState": {}, "ownState": {}},
               "cascadeParentIds": [], "targets": [{}], "description": "",
               "scope": {"rootPath": ["ROOT_ID"], "excluded": []}}
        if column:
            source = next((ds for _, _, ds in placed if column in ds.column_names), None)
            if source is None:
                log.warning("%s: filter %r skipped: no chart's dataset has column %r", path.name, key, column)
                continue
            multi, default, prefilter = SELECT_FILTERS[key]
            flt["targets"] = [{"datasetUuid": source.uuid, "column": {"name": column}}]
            flt["controlValues"] = {"enableEmptyFilter": default is not None, "defaultToFirstItem": False,
                                    "multiSelect": multi, "searchAllOptions": False, "inverseSelection": False}
            flt["adhoc_filters"] = [{"clause": "WHERE", "expressionType": "SQL", "sqlExpression": prefilter}]
            if key in LATEST_FIRST:
                flt["controlValues"].update(defaultToFirstItem=True, enableEmptyFilter=True, sortAscending=False)
                flt["requiredFirst"] = True  # charts wait for the first value (as the filter editor saves it)
            if default is not None:
                flt["defaultDataMask"] = {
                    "extraFormData": {"filters": [{"col": column, "op": "IN", "val": [default]}]},
                    "filterState": {"value": [default], "label": default}, "ownState": {}}
            # Charts over datasets without the column are left out of the filter's scope.
            flt["scope"]["excluded"] = [cid for c, cid, ds in placed
                                        if column not in ds.column_names or key in (c.get("exclude_filters") or [])]
            if default is not None:  # the saved query (REST, CSV) shows what the dashboard shows
                for _, cid, _ in placed:
                    if cid not in flt["scope"]["excluded"]:
                        queries[cid]["queries"][0]["filters"].append({"col": column, "op": "IN", "val": [default]})
        else:
            flt["scope"]["excluded"] = [cid for c, cid, ds in placed
                                        if not ds.main_dttm_col or key in (c.get("exclude_filters") or [])]
        filters.append(flt)
    for cid, (name, doc) in charts.items():
        bundle.files[name] = _dump({**doc, "query_context": json.dumps(queries[cid])})
    bundle.files[f"dashboards/{spec['slug']}.yaml"] = _dump({
        "dashboard_title": spec["title"], "description": spec.get("description"), "css": TABLE_CSS,
        "slug": spec["slug"], "certified_by": None, "certification_details": None, "published": True,
        "uuid": str(uuid.UUID(spec["uuid"])), "position": position,
        "metadata": {"native_filter_configuration": filters, "color_scheme": "supersetColors",
                     "cross_filters_enabled": False, "refresh_frequency": 0, "expanded_slices": {},
                     "timed_refresh_immune_slices": [], "shared_label_colors": [], "color_scheme_domain": []},
        "version": VERSION,
    })
    return used


def _layout(spec: dict, placed) -> dict:
    """Rows of charts, 12 grid columns wide, in the order the YAML lists them."""
    pos = {"DASHBOARD_VERSION_KEY": "v2",
           "ROOT_ID": {"type": "ROOT", "id": "ROOT_ID", "children": ["GRID_ID"]},
           "GRID_ID": {"type": "GRID", "id": "GRID_ID", "children": [], "parents": ["ROOT_ID"]},
           "HEADER_ID": {"type": "HEADER", "id": "HEADER_ID", "meta": {"text": spec["title"]}}}
    row, used = None, 12
    for chart, cid, _ in placed:
        width = int(chart.get("width", 6))
        if row is None or used + width > 12 or chart.get("new_row"):
            row = f"ROW-{cid}"
            pos[row] = {"type": "ROW", "id": row, "children": [], "parents": ["ROOT_ID", "GRID_ID"],
                        "meta": {"background": "BACKGROUND_TRANSPARENT"}}
            pos["GRID_ID"]["children"].append(row)
            used = 0
        key = f"CHART-{cid}"
        pos[key] = {"type": "CHART", "id": key, "children": [], "parents": ["ROOT_ID", "GRID_ID", row],
                    "meta": {"width": width, "height": int(chart.get("height", 50)), "chartId": cid,
                             "uuid": str(uuid.UUID(chart["uuid"])), "sliceName": chart["title"]}}
        pos[row]["children"].append(key)
        used += width
    return pos


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40]
