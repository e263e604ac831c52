"""Collection side: nfcapd supervision, the shipper, the traffic model, active-test probes and importers."""
