"""The `flowlake` subcommands this stage owns (the stream: Kafka into the lake, hour close, alerts).

name -> ("module:attribute", one-line help); the hub's CLI (flowlake/cli.py) merges every
stage's table and imports a command's module only when it runs. Strings only here: the
table is read by `flowlake --help`, which must stay instant."""

COMMANDS: dict[str, tuple[str, str]] = {
    "ingest": ("flowlake.pipelines.ingest:ingest", "Stream flows.v1/active.v1 from Kafka into the lake."),
    "compact": ("flowlake.pipelines.hour_close:compact_cmd", "Close the lake's hours: compaction and rollups."),
    "alerts": ("flowlake.pipelines.alerts.cli:alerts", "Alerts of the live detectors: list, show, ack, snooze."),
    "attacks": ("flowlake.pipelines.alerts.attacks_cli:attacks", "Volumetric attacks (DDoS) the detector recorded: list, show."),
    "mitigation": ("flowlake.pipelines.mitigation.cli:mitigation", "BGP mitigation of attacks (RTBH, flowspec): list, announce, withdraw."),
    "notify": ("flowlake.pipelines.alerts.notify_cli:notify", "Alert notifications (webhook, e-mail): `notify test` checks [notify]."),
}
