"""Table `powerlaw_fits`: Clauset-Shalizi-Newman power-law fits of flow sizes."""
from .core import Field, Record, REPORT_COUNT_AT, REPORT_DATE, REPORT_HOUR

POWERLAW_FITS = Record(
    name="powerlaw_fits",
    namespace="flowlake.reports",
    doc=("Power-law fit (CSN 2009: MLE alpha, xmin by minimum KS distance over every "
         "distinct value) of bytes or packets per flow, per hour and per day (hour null), "
         "per class. Rows with too few tail flows are flagged `insufficient` and carry "
         "no fitted numbers."),
    fields=(
        REPORT_HOUR,
        Field("class", "string", "tcp_in, tcp_out, udp, or app:<service> (top services by flows)"),
        Field("metric", "string", "bytes or packets (per flow)"),
        Field("flows", "long", "flows in the window and class", "flows"),
        Field("distinct_values", "long", "distinct metric values (candidates for xmin + 1)"),
        Field("discrete", "boolean", "fitted as a discrete (Hurwitz zeta) power law"),
        Field("xmin", "double", "start of the power-law tail", "bytes|packets", nullable=True),
        Field("alpha", "double", "MLE exponent of p(x) ~ x^-alpha", nullable=True),
        Field("sigma", "double", "standard error of alpha", nullable=True),
        Field("n_tail", "long", "flows with value >= xmin", "flows", nullable=True),
        Field("tail_share_flows", "double", "n_tail / flows", nullable=True),
        Field("tail_share_bytes", "double", "share of the class's bytes carried by tail flows",
              nullable=True),
        Field("ks_d", "double", "Kolmogorov-Smirnov distance of the tail to the fit", nullable=True),
        Field("p", "double", "goodness-of-fit p (semi-parametric bootstrap); null if not run",
              nullable=True),
        Field("bootstrap_replicates", "int", "bootstrap replicates behind p (0: not run)"),
        Field("lr_r", "map_string_double",
              "normalised log-likelihood ratio vs lognormal, exponential, stretched_exponential, "
              "truncated_power_law (> 0 favours the power law)", nullable=True),
        Field("lr_p", "map_string_double", "p-value of each likelihood ratio's sign", nullable=True),
        Field("ccdf_x", "array_double", "tail values for plotting (log-spaced)", "bytes|packets",
              nullable=True),
        Field("ccdf_data", "array_double", "empirical P(X >= x | X >= xmin) at ccdf_x", nullable=True),
        Field("ccdf_model", "array_double", "fitted power law's P(X >= x | X >= xmin) at ccdf_x",
              nullable=True),
        Field("insufficient", "boolean", "too few tail flows (or values) for a meaningful fit"),
        Field("reason", "string", "why the row is insufficient; empty otherwise"),
        REPORT_COUNT_AT, REPORT_DATE,
    ),
    partition_by=("date",),
)
