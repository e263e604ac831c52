"""Real servers the tests start and stop (dnsmasq, an SMTP server):
fixtures of the tests, not components of flowlake."""
