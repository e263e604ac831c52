"""Rollups for capacity planning (issue 23): the flow lake aggregated to 1-minute,
5-minute and 1-hour buckets, kept far longer than raw flows.

`lake/rollups/<1m|5m|1h>/date=YYYY-MM-DD/rollup.parquet`, one file per date and resolution,
written when an hour of the lake closes (`flowlake compact`). `date` and `hour` are those
of the flows' start (the lake partition the row was computed from), so a late batch
replaces exactly its hour's rows; `bucket` is where the traffic was: a flow's bytes and
packets are spread evenly over [time_start, time_end] (as the traffic_ts report does), so
rows of a date can hold buckets of the next one. A flow counts once, in the bucket of its
start. Sums over any set of dimensions are exact: every row is additive.
"""
from .core import Field, Record, REPORT_DATE

RESOLUTIONS = {"1m": 60, "5m": 300, "1h": 3600}

# Enrichment columns (issue 21): filled when the flow lake carries them, null otherwise.
ENRICHMENT = ("src_country", "dst_country", "src_net_name", "dst_net_name")

_FIELDS = (
    Field("bucket", "timestamp_ms", "start of the time bucket (UTC)", "ms since epoch"),
    Field("hour", "int", "UTC hour of the flows' start: the lake partition hour= this row was computed from"),
    Field("exporter", "string", "router that exported the flows"),
    Field("input_if", "long", "SNMP index of the input interface"),
    Field("output_if", "long", "SNMP index of the output interface"),
    Field("direction", "string", "inbound / outbound / internal / transit (from site.local_prefixes)"),
    Field("proto", "int", "IP protocol number"),
    Field("app", "string", "application label from the port map (as the app_mix report labels it)"),
    Field("src_as", "long", "source autonomous system (0 = unknown; null = other: outside the hour's "
          "top rollups.as_top_n source ASes by bytes)", nullable=True),
    Field("dst_as", "long", "destination autonomous system (0 = unknown; null = other: outside the hour's "
          "top rollups.as_top_n destination ASes by bytes)", nullable=True),
    Field("src_country", "string", "source country (enrichment; null when the lake has none)", nullable=True),
    Field("dst_country", "string", "destination country (enrichment; null when the lake has none)", nullable=True),
    Field("src_net_name", "string", "source network name (enrichment; null when the lake has none)", nullable=True),
    Field("dst_net_name", "string", "destination network name (enrichment; null when the lake has none)", nullable=True),
    Field("flows", "long", "flow records starting in the bucket", "flows"),
    Field("packets", "double", "packets in the bucket, sampling-corrected (the lake's packets)", "packets"),
    Field("bytes", "double", "bytes at layer 3 in the bucket, sampling-corrected (the lake's bytes)", "bytes"),
    Field("sampled_packets", "double", "packets as the routers sampled them (packets / sampling_rate; "
          "rate 0 = unknown: the lake holds wire counts)", "packets"),
    Field("sampled_bytes", "double", "bytes as the routers sampled them (bytes / sampling_rate, as sampled_packets)", "bytes"),
    Field("sampling_rate", "int", "largest 1:N sampling rate among the row's flows (1 = unsampled, 0 = all unknown)"),
    REPORT_DATE,
)


def _record(res: str) -> Record:
    return Record(
        name=f"rollup_{res}",
        namespace="flowlake.rollups",
        doc=(f"Traffic in {res} buckets per exporter, interfaces, direction, protocol, application and "
             f"AS (and country/network once the lake is enriched): `lake/rollups/{res}/date=.../`."),
        fields=_FIELDS,
        partition_by=("date",),
    )


DAILY_BUCKETS = 86400 // RESOLUTIONS["5m"]  # 288
P95_RANK = 274  # nearest rank of the 95th percentile among 288 (ceil(0.95 * 288)), as traffic_ts

_INTERFACE_SIDE = (
    Field("exporter", "string", "router that exported the flows"),
    Field("if_index", "long", "SNMP interface index"),
    Field("side", "string", "in (entering through the interface) / out (leaving through it)"),
)

ROLLUP_1D = Record(
    name="rollup_1d",
    namespace="flowlake.rollups",
    doc=("Per UTC day of the traffic, exporter, interface and side: the load on the interface from the "
         "5-minute rollups (`lake/rollups/1d/date=.../`), the figures capacity planning trends. `in` = "
         "traffic entering through the interface (input_if), `out` = leaving through it (output_if). "
         "p95 is the nearest-rank 95th percentile of the day's 288 five-minute rates, silent buckets "
         "counting as zero (as the traffic_ts report). Kept as long as the 1h rollups."),
    fields=(
        *_INTERFACE_SIDE,
        Field("direction", "string", "all / inbound / outbound / internal / transit (from site.local_prefixes)"),
        Field("flows", "long", "flow records starting that day", "flows"),
        Field("packets", "double", "packets that day (sampling-corrected)", "packets"),
        Field("bytes", "double", "bytes at layer 3 that day (sampling-corrected)", "bytes"),
        Field("mean_bps", "double", "bytes * 8 / 86400", "bit/s"),
        Field("peak_bps", "double", "largest 5-minute rate of the day", "bit/s"),
        Field("p95_bps", "double", "95th percentile of the day's 288 five-minute rates", "bit/s"),
        REPORT_DATE,
    ),
    partition_by=("date",),
)

ROLLUP_1M = _record("1m")
ROLLUP_5M = _record("5m")
ROLLUP_1H = _record("1h")
ROLLUPS = {"1m": ROLLUP_1M, "5m": ROLLUP_5M, "1h": ROLLUP_1H}


CAPACITY_FORECAST = Record(
    name="capacity_forecast",
    namespace="flowlake.reports",
    doc=("Growth and forecast per exporter interface and side (job capacity_forecast, from rollup_1d up "
         "to the report date, direction all): an ordinary least-squares linear trend of the daily 95th "
         "percentile (statsmodels) and when it reaches rollups.forecast_threshold of the interface speed "
         "([active] interface_speeds), with the day range in which the 95 % prediction interval crosses it."),
    fields=(
        *_INTERFACE_SIDE,
        Field("days", "int", "days of history fitted"),
        Field("first_day", "string", "first day fitted, YYYY-MM-DD"),
        Field("p95_bps", "double", "the last day's 95th percentile", "bit/s"),
        Field("trend_bps", "double", "the fitted trend at the report date", "bit/s", nullable=True),
        Field("growth_bps_per_day", "double", "slope of the trend", "bit/s per day", nullable=True),
        Field("growth_low", "double", "lower end of the slope's 95 % confidence interval", "bit/s per day", nullable=True),
        Field("growth_high", "double", "upper end of the slope's 95 % confidence interval", "bit/s per day", nullable=True),
        Field("speed_bps", "double", "interface speed from the configuration", "bit/s"),
        Field("threshold", "double", "utilisation the forecast looks for (rollups.forecast_threshold)", "fraction 0..1"),
        Field("crossing_date", "string", "day the trend reaches the threshold (YYYY-MM-DD); null = not within the horizon",
              nullable=True),
        Field("crossing_earliest", "string", "first day the 95 % prediction interval's upper bound reaches it", nullable=True),
        Field("crossing_latest", "string", "first day its lower bound reaches it (null = not within the horizon)", nullable=True),
        Field("status", "string", "forecast / no growth / too few days / over threshold"),
        REPORT_DATE,
    ),
    partition_by=("date",),
)
