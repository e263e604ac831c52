"""The `flowlake` subcommands this stage owns (collection: nfcapd files to Kafka, exporters, active tests,
SNMP, routing).

name -> ("module:attribute", one-line help); the hub's CLI (flowlake/cli.py) merges every
stage's table and imports a command's module only when it runs. Strings only here: the
table is read by `flowlake --help`, which must stay instant."""

COMMANDS: dict[str, tuple[str, str]] = {
    "ship": ("flowlake.collectors.ship:ship", "Ship nfcapd files to Kafka (backfill or --pending)."),
    "generate": ("flowlake.collectors.generate:generate", "Export modelled border traffic as NetFlow/IPFIX."),
    "active": ("flowlake.collectors.active.cli:active", "Parse and import active-test results."),
    "probe": ("flowlake.collectors.active.probe:probe", "Run PingER-style probes on a schedule."),
    "snmp": ("flowlake.collectors.snmp.cli:snmp", "SNMP poller: interface names and counters per exporter."),
    "routing": ("flowlake.collectors.routing.cli:routing", "BMP collector: routing tables per router."),
}
