"""Report tables of the active-test jobs (active_summary, bulk_transfers, bulk_impact,
path_models). Record.name is the table name; `date` is the partition column."""
from .core import Field, Record, REPORT_COUNT_AT, REPORT_DATE


ACTIVE_SUMMARY = Record(
    name="active_summary", namespace="flowlake.reports",
    doc="PingER-style summary of RTT tests per target, per hour (period='hour') and per day (period='day').",
    fields=(
        Field("target", "string", "destination of the tests", address="one"),
        Field("period", "string", "hour or day"),
        Field("period_start", "timestamp_ms", "start of the hour/day (UTC)"),
        Field("tests", "long", "RTT tests in the period"),
        Field("sent", "long", "echo requests sent", "packets"),
        Field("received", "long", "distinct echo replies", "packets"),
        Field("loss", "double", "(sent - received) / sent", "fraction"),
        Field("rtt_min_ms", "double", "lowest RTT", "ms", nullable=True),
        Field("rtt_avg_ms", "double", "mean RTT weighted by replies", "ms", nullable=True),
        Field("rtt_median_ms", "double", "median of the tests' median RTTs", "ms", nullable=True),
        Field("rtt_max_ms", "double", "highest RTT", "ms", nullable=True),
        Field("jitter_ms", "double", "mean of the tests' IPDV inter-quartile ranges", "ms", nullable=True),
        Field("reachability", "double", "share of tests with at least one reply", "fraction"),
        Field("rtt_band", "string", "PingER RTT band: 0-64, 64-128, 128-256, 256-512, >512 ms (null: no reply)", nullable=True),
        Field("loss_band", "string", "PingER loss band: 0-0.1%, 0.1-1%, 1-2.5%, 2.5-5%, 5-12%, >12%"),
        Field("mathis_loss", "double", "loss used in the Mathis bound: measured, or 1/(sent+1) at zero loss", "fraction", nullable=True),
        Field("mathis_bound", "boolean", "true when mathis_loss is the zero-loss stand-in 1/(sent+1): loss is at most that, so the throughput is a lower bound of the Mathis estimate", nullable=True),
        Field("mathis_throughput_bps", "double", "MSS/RTT * C/sqrt(p), C = sqrt(3/2)", "bit/s", nullable=True),
        Field("responsiveness_s", "double", "C*RTT^2/(2*MSS): time to recover from one loss at the configured link capacity", "s", nullable=True),
        REPORT_DATE,
    ),
    partition_by=("date",),
)

BULK_TRANSFERS = Record(
    name="bulk_transfers", namespace="flowlake.reports",
    doc="Flows classified as bulk transfers (size/duration/rate thresholds or known bulk ports).",
    fields=(
        Field("time_start", "timestamp_ms", "first packet"),
        Field("time_end", "timestamp_ms", "last packet"),
        Field("exporter", "string", "exporting router"),
        Field("input_if", "long", "input interface"),
        Field("output_if", "long", "output interface"),
        Field("src_addr", "string", "source address", address="one"),
        Field("dst_addr", "string", "destination address", address="one"),
        Field("src_port", "int", "source port"),
        Field("dst_port", "int", "destination port"),
        Field("proto", "int", "IP protocol"),
        Field("bytes", "long", "bytes", "bytes"),
        Field("packets", "long", "packets", "packets"),
        Field("duration_s", "double", "time_end - time_start", "s"),
        Field("rate_bps", "double", "bytes*8/duration (null for a zero-length flow)", "bit/s", nullable=True),
        Field("link_speed_bps", "double", "configured speed of the output interface", "bit/s"),
        Field("link_share", "double", "rate_bps / link_speed_bps", "fraction", nullable=True),
        Field("reason", "string", "thresholds, port, or thresholds+port"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

BULK_IMPACT = Record(
    name="bulk_impact", namespace="flowlake.reports",
    doc="Per target: RTT tests while bulk transfers ran (loaded) vs while none ran (unloaded).",
    fields=(
        Field("target", "string", "destination of the RTT tests", address="one"),
        Field("tests_unloaded", "long", "tests overlapping no bulk transfer"),
        Field("tests_loaded", "long", "tests overlapping a bulk transfer"),
        Field("rtt_median_unloaded_ms", "double", "median of test mean RTTs", "ms", nullable=True),
        Field("rtt_median_loaded_ms", "double", "median of test mean RTTs", "ms", nullable=True),
        Field("rtt_p95_unloaded_ms", "double", "95th percentile of test mean RTTs", "ms", nullable=True),
        Field("rtt_p95_loaded_ms", "double", "95th percentile of test mean RTTs", "ms", nullable=True),
        Field("loss_unloaded", "double", "lost / sent", "fraction", nullable=True),
        Field("loss_loaded", "double", "lost / sent", "fraction", nullable=True),
        Field("jitter_unloaded_ms", "double", "median IPDV IQR", "ms", nullable=True),
        Field("jitter_loaded_ms", "double", "median IPDV IQR", "ms", nullable=True),
        Field("rtt_median_diff_ms", "double", "loaded - unloaded median RTT", "ms", nullable=True),
        Field("loss_diff", "double", "loaded - unloaded loss", "fraction", nullable=True),
        Field("jitter_diff_ms", "double", "loaded - unloaded jitter", "ms", nullable=True),
        Field("mannwhitney_u", "double", "Mann-Whitney U of loaded vs unloaded test RTTs (scipy)", nullable=True),
        Field("p_value", "double", "one-sided p-value of the U test (loaded RTTs higher)", nullable=True),
        Field("p_adjusted", "double", "p_value Holm-corrected for the day's tested targets", nullable=True),
        Field("significant", "boolean",
              "degradation: p_adjusted < bulk_impact_alpha and rtt_median_diff_ms >= bulk_impact_min_rtt_ms",
              nullable=True),
        REPORT_DATE,
    ),
    partition_by=("date",),
)

BULK_IMPACT_THROUGHPUT = Record(
    name="bulk_impact_throughput", namespace="flowlake.reports",
    doc="Each throughput test against the cross-traffic the flows show during it.",
    fields=(
        Field("target", "string", "destination of the throughput test", address="one"),
        Field("source", "string", "source of the test"),
        Field("start", "timestamp_ms", "test start"),
        Field("end", "timestamp_ms", "test end"),
        Field("tool", "string", "tool of the test"),
        Field("throughput_bps", "double", "test result", "bit/s"),
        Field("cross_bytes", "double", "bytes of other flows during the test, pro-rated by overlap", "bytes"),
        Field("cross_bps", "double", "cross_bytes*8 / test duration", "bit/s"),
        Field("bulk_flows", "long", "bulk transfers overlapping the test"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

PATH_MODELS = Record(
    name="path_models", namespace="flowlake.reports",
    doc="Least-squares fit latency = a*size + l per path from latency-vs-message-size tests.",
    fields=(
        Field("path", "string", "path label (parameter `path`, else source>destination)"),
        Field("points", "long", "tests used"),
        Field("a_ms_per_byte", "double", "slope a", "ms/byte"),
        Field("l_ms", "double", "intercept l: fixed latency", "ms"),
        Field("bandwidth_bps", "double", "8 bits / a, the path's apparent bandwidth", "bit/s", nullable=True),
        Field("r2", "double", "coefficient of determination", nullable=True),
        Field("size_min", "double", "smallest size tested", "bytes"),
        Field("size_max", "double", "largest size tested", "bytes"),
        REPORT_DATE,
    ),
    partition_by=("date",),
)

PATH_BEST = Record(
    name="path_best", namespace="flowlake.reports",
    doc="The fastest path per message-size range (lower envelope of the fitted lines).",
    fields=(
        Field("size_from", "double", "range start", "bytes"),
        Field("size_to", "double", "range end (null: no upper limit)", "bytes", nullable=True),
        Field("best_path", "string", "path with the lowest modelled latency in the range"),
        REPORT_DATE,
    ),
    partition_by=("date",),
)

PATH_SPLIT = Record(
    name="path_split", namespace="flowlake.reports",
    doc="Splitting one message across two paths so both parts arrive at the same time.",
    fields=(
        Field("path_a", "string", "first path"),
        Field("path_b", "string", "second path"),
        Field("message_bytes", "double", "whole message", "bytes"),
        Field("bytes_a", "double", "part sent on path_a: (a_b*S + l_b - l_a)/(a_a + a_b), clipped to 0..S", "bytes"),
        Field("bytes_b", "double", "part sent on path_b", "bytes"),
        Field("delivery_ms", "double", "modelled delivery time of the split message", "ms"),
        Field("best_single_ms", "double", "delivery time on the faster single path", "ms"),
        Field("gain", "double", "1 - delivery_ms / best_single_ms", "fraction"),
        REPORT_DATE,
    ),
    partition_by=("date",),
)
