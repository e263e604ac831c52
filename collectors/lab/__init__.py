"""The experiment lab (issue 25): declared studies run on real packets in network namespaces."""
