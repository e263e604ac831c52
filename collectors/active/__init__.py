"""Active tests beside the flows: parsers for ping/fping/iperf3/pScheduler/NetLogger/CSV
results, PingER metrics, Kafka publishing (active.v1), the probe and the bulk-impact lab."""
