"""Clear logs: one format for every component, to stderr and optionally a file."""
from __future__ import annotations

import logging
import os


def setup(verbose: int = 0, logfile: str | None = None) -> None:
    level = logging.WARNING - 10 * verbose if verbose else None
    if level is None:
        name = os.environ.get("FLOWLAKE_LOG_LEVEL", "info").upper()
        level = getattr(logging, name, logging.INFO)
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if logfile:
        handlers.append(logging.FileHandler(logfile))
    logging.basicConfig(
        level=max(level, logging.DEBUG),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%S",
        handlers=handlers,
        force=True,
    )
    for noisy in ("py4j", "urllib3", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
