"""BGP mitigation of the detector's attacks (issue 36, docs/guide/mitigation.md).

policy.py decides (pure: attacks + safety rules + the operator's overrides -> the routes
wanted), service.py reconciles the speaker (collectors/bgp/speaker.py) with that decision
and records every change (store.py, lake/mitigations/), cli.py is `flowlake mitigation`.

Why pipelines/: the loop reads the stream's output (state/ddos/attacks.json, written by
the DDoS detector of the alerts service, pipelines/alerts/) and acts on it; the speaker it
drives is a collector-side piece (BGP towards the routers), one layer below."""
