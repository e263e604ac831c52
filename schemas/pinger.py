"""Report tables of issue 26 owned by the PingER/behaviour jobs: pinger_matrix (region by
region, PingER style), behaviour_classes (EVL tele-immersion flow classes per day) and
behaviour_needs (per class: do the measured paths meet its latency/jitter needs)."""
from .core import Field, Record, REPORT_COUNT_AT, REPORT_DATE

PINGER_MATRIX = Record(
    name="pinger_matrix", namespace="flowlake.reports",
    doc="PingER region-to-region matrix from the active RTT tests: per monitoring region (source) and "
        "remote region (destination), the day (period='day') and the month to date (period='month'). "
        "Regions from the [pinger] regions CSV; hosts not in it are region 'unknown' (listed in the job's log).",
    fields=(
        Field("period", "string", "day or month (the month up to and including the report date)"),
        Field("month", "string", "YYYY-MM of the report date"),
        Field("src_region", "string", "region of the monitoring host (test source)"),
        Field("dst_region", "string", "region of the remote host (test destination)"),
        Field("rtt_median_ms", "double", "median of the samples' median RTTs", "ms", nullable=True),
        Field("loss_pct", "double", "100 * (sent - received) / sent over all samples", "%"),
        Field("ipdv_iqr_ms", "double", "mean of the samples' IPDV inter-quartile ranges (as PingER reports it)", "ms",
              nullable=True),
        Field("unreachable_pct", "double", "100 * share of samples without any reply", "%"),
        Field("throughput_mbps", "double",
              "derived TCP throughput, Mathis as PingER applies it: C * MSS*8 / (RTT_avg * sqrt(loss)), "
              "zero loss per [active] zero_loss_rule", "Mbit/s", nullable=True),
        Field("samples", "long", "RTT tests (PingER samples, typically 10 pings each)"),
        Field("rtt_band", "string", "quality band of rtt_median_ms ([pinger] rtt_band_*; default SLAC PAM 2001: "
              "White, Green, Yellow, Pink, Red)", nullable=True),
        Field("loss_band", "string", "PingER quality band of loss_pct ([pinger] loss_band_*)"),
        Field("ipdv_band", "string", "quality band of ipdv_iqr_ms ([pinger] ipdv_band_*; default SLAC PAM 2001 "
              "after ETSI TIPHON: good, medium, poor, bad)", nullable=True),
        REPORT_DATE,
    ),
    partition_by=("date",),
)

BEHAVIOUR_CLASSES = Record(
    name="behaviour_classes", namespace="flowlake.reports",
    doc="Flows per EVL tele-immersion behaviour class, classified from rate, duration, mean packet size, "
        "packets/s and periodicity (jobs/behaviour_classes.py), never from ports.",
    fields=(
        Field("class", "string", "avatar, audio, video, realtime_state, state_update, small_bulk, large_bulk, "
                                 "streaming_bulk or other"),
        Field("flows", "long", "flow records in the class"),
        Field("packets", "long", "packets", "packets"),
        Field("bytes", "long", "bytes", "bytes"),
        Field("hosts", "long", "distinct addresses (source or destination) taking part"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)

BEHAVIOUR_NEEDS = Record(
    name="behaviour_needs", namespace="flowlake.reports",
    doc="Per behaviour class and RTT-tested path (target) that carries flows of the class that day: the class's "
        "latency/jitter/loss needs against the path's measured active results (one-way latency taken as RTT/2). "
        "A flow is on a path when one of its ends is the target address or in the target's network "
        "([behaviour] needs_prefix_v4 / needs_prefix_v6 bits); paths without such flows have no row "
        "(jobs/behaviour_needs.py states the rule).",
    fields=(
        Field("class", "string", "behaviour class"),
        Field("target", "string", "destination address of the RTT tests: the path", address="one"),
        Field("flows", "long", "flows of the class that day on this path (an end in the target's network)"),
        Field("address_flows", "long", "of those, flows with an end at the target address itself"),
        Field("bytes", "long", "bytes of the class's flows on this path", "bytes"),
        Field("class_flows", "long", "all flows of the class that day, on any path or none"),
        Field("tests", "long", "RTT tests of the day measuring the path"),
        Field("latency_need_ms", "double", "one-way latency the class needs at most", "ms", nullable=True),
        Field("jitter_need_ms", "double", "jitter the class tolerates at most", "ms", nullable=True),
        Field("loss_need_pct", "double", "loss the class tolerates at most", "%", nullable=True),
        Field("latency_ms", "double", "measured one-way latency: median RTT / 2", "ms", nullable=True),
        Field("jitter_ms", "double", "measured jitter: median of the tests' IPDV IQRs", "ms", nullable=True),
        Field("loss_pct", "double", "measured loss", "%", nullable=True),
        Field("meets_latency", "boolean", "latency_ms <= latency_need_ms (null: no need or no measurement)", nullable=True),
        Field("meets_jitter", "boolean", "jitter_ms <= jitter_need_ms", nullable=True),
        Field("meets_loss", "boolean", "loss_pct <= loss_need_pct", nullable=True),
        Field("meets", "boolean", "every stated need is met", nullable=True),
        Field("source", "string", "where the class's needs come from"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)
