"""The `flowlake` subcommands this stage owns (the reports and investigations over the lake).

name -> ("module:attribute", one-line help); the hub's CLI (flowlake/cli.py) merges every
stage's table and imports a command's module only when it runs. Strings only here: the
table is read by `flowlake --help`, which must stay instant."""

COMMANDS: dict[str, tuple[str, str]] = {
    "jobs": ("flowlake.jobs.runner:jobs", "Run the daily Spark report jobs."),
    "powerlaw": ("flowlake.jobs.powerlaw.cli:powerlaw", "Fit a power law to a column of numbers (CSN 2009)."),
    "query": ("flowlake.jobs.query.cli:query", "Search the lake with nfdump filter syntax."),
    "host": ("flowlake.jobs.query.cli:host", "Profile one host: peers, ports, volumes, first/last seen."),
    "query-index": ("flowlake.jobs.query.cli:index_cmd", "Index closed hours in DuckDB files for fast queries."),
    "query-server": ("flowlake.jobs.query.cli:server_cmd", "Answer `flowlake query` from a warm process (`flowlake up` starts it)."),
    "reports": ("flowlake.jobs.report_export:reports", "Export a report table's day (CSV, JSON, Parquet), optionally anonymised."),
    "anonymise": ("flowlake.jobs.anonymise:anonymise", "Write a day of flows with addresses anonymised (Crypto-PAn, as nfanon)."),
}
