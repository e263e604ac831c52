"""Border traffic model and NetFlow v5/v9/IPFIX exporter with known ground truth.

`model` draws flows in bulk (numpy), `netflow` packs them into real export datagrams,
`exporter` paces them over UDP from one socket per router, `truth` records what was
sent, `ping` writes matching iputils-style ping output, `api.generate_day` ties it up.
"""
