"""The query server as a stack component. Apart from server.py, whose client side every
`flowlake query` imports first: it must stay free of the stack's imports (start-up cost)."""
from __future__ import annotations

from flowlake.base.component import Component

from .server import managed, start, status, stop


class QueryServer(Component):
    """Answers `flowlake query` from a warm process over a Unix socket ([query] server)."""
    name = "query-server"
    stop_timeout = 10.0

    def managed(self):
        return managed(self.cfg)

    def enabled(self) -> bool:
        return bool(self.cfg.query.server)

    def start(self) -> int | None:
        return start(self.cfg)

    def stop(self) -> bool:
        return stop(self.cfg)

    def status(self) -> dict:
        return status(self.cfg)
