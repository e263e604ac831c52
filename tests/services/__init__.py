"""Real servers the tests start and stop (dnsmasq, an SMTP server, net-snmp's snmpd):
fixtures of the tests, not components of flowlake."""
