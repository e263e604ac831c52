"""SNMP poller (issue 21): names, speeds and states of every exporter's interfaces for
the enricher, and interface counters into the lake beside the flows.

  settings.py  which exporters are polled, with what credentials ([snmp], [exporters."ADDR"])
  query.py     the SNMP requests (pysnmp, numeric OIDs: Debian ships no MIB files)
  deltas.py    counter deltas: wraps undone, agent restarts (sysUpTime going back) detected
  store.py     interfaces.json (the enricher's contract), refresh requests, counter Parquet files
  service.py   the poll loop, its supervision by `flowlake up`, and `flowlake status`
  cli.py       `flowlake snmp`
"""
