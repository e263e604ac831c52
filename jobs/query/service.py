"""The query server as a stack component. Apart from server.py, whose client side every
`flowlake query` imports first: it must stay free of the stack's imports (start-up cost)."""
from __future__ import annotations

from dataclasses import dataclass

from flowlake.base.component import ModuleComponent

from . import server


@dataclass(frozen=True)
class ServerSettings:
    """[query] as the server uses it."""
    server: bool
    server_max_clients: int


class QueryServer(ModuleComponent):
    """Answers `flowlake query` from a warm process over a Unix socket ([query] server)."""
    name = "query-server"
    stop_timeout = 10.0
    functions = server
    settings_type = ServerSettings
    section = "query"

    def enabled(self) -> bool:
        return self.settings.server
