"""Alerts on the live stream (issue 24).

    Kafka flows.v1 + flowlake.ledger --source.py--> one Interval per rotated nfcapd file
    --engine.py--> detectors (scans.py, fan_in.py, volume.py, silent.py, talkers.py,
    blocklist.py), each Interval -> Findings --lifecycle.py--> alerts opened, updated,
    resolved (deduplicated per detector and subject), ack and snooze honoured
    --store.py--> lake/alerts/date=D/ ; each transition -> sinks' submit(alert)
    (notifications: pipelines/alerts/notify.py when present)

`flowlake alerts serve` (started by `flowlake up`) runs it; `flowlake alerts
list|show|ack|snooze` reads and changes the stored alerts.
"""
