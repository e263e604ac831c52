"""Calls from an earlier stage into a later one, without an upward import.

The report runner (jobs/) ends by refreshing what presents the reports (the hub's Superset
component): it cannot import the hub, so the hub's functions are named here as
'module:function' strings, resolved only when called (as the CLI's lazy commands are).
A failing hook is the hook's business: it reports on the console and the caller's
outcome stands."""
from __future__ import annotations

import importlib

# What refreshes after the report jobs rewrote report tables (jobs run, demo).
AFTER_REPORTS: tuple[str, ...] = ("flowlake.superset_cli:refill_cache",)
# What follows the lake when a table changed kind (made a Delta table: `flowlake lake
# migrate`): Superset's views read a Delta table through delta_scan, not its Parquet glob.
AFTER_LAKE_CHANGE: tuple[str, ...] = ("flowlake.superset_cli:refresh_views_hook",)


def _resolve(target: str):
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def after_reports(cfg, console) -> None:
    for target in AFTER_REPORTS:
        _resolve(target)(cfg, console)


def after_lake_change(cfg, console) -> None:
    for target in AFTER_LAKE_CHANGE:
        _resolve(target)(cfg, console)
