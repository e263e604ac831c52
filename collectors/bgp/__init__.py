"""BGP towards the operator's routers: the speaker flowlake announces mitigations with
(Debian's gobgpd, supervised as the `bgp-speaker` component; speaker.py)."""
