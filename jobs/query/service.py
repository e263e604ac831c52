"""The query server as a stack component. Apart from server.py, whose client side every
`flowlake query` imports first: it must stay free of the stack's imports (start-up cost)."""
from __future__ import annotations

from flowlake.base.component import ModuleComponent

from . import server


class QueryServer(ModuleComponent):
    """Answers `flowlake query` from a warm process over a Unix socket ([query] server)."""
    name = "query-server"
    stop_timeout = 10.0
    functions = server

    def enabled(self) -> bool:
        return bool(self.cfg.query.server)
