"""What `flowlake status` shows of the notifications: per channel counters (from the stack's
notifier, state/notify.json) and the last `flowlake notify test`."""
from __future__ import annotations

from flowlake.base.config import ConfigError

from .notify import STATE_FILE, build_channels, read_state
from .notify_cli import TEST_STATE_FILE


def status(cfg) -> dict:
    try:
        configured = {c.name: c.target for c in build_channels(cfg)}
        error = None
    except ConfigError as exc:
        configured, error = {}, str(exc)
    live = read_state(cfg.path("state", STATE_FILE))
    return {"configured": configured, "config_error": error, "updated": live.get("updated"),
            "channels": live.get("channels", {}), "last_test": read_state(cfg.path("state", TEST_STATE_FILE)) or None}


def render(console, st: dict) -> None:
    from rich.table import Table  # noqa: PLC0415  (start-up: rich)

    if st.get("config_error"):
        console.print(f"[bold red]notifications: configuration error: {st['config_error']}[/]")
    names = list(dict.fromkeys([*st["configured"], *st["channels"]]))
    if not names:
        console.print("notifications: none configured ([notify] webhook_url / smtp_host)", markup=False)
        return
    t = Table(title=f"notifications (counters as of {st['updated'] or 'never'})")
    for col in ("channel", "target", "sent", "failed", "retrying", "dropped", "queued", "last error"):
        t.add_column(col, justify="right" if col in ("sent", "failed", "retrying", "dropped", "queued") else "left")
    for name in names:
        c = st["channels"].get(name, {})
        target = st["configured"].get(name) or f"{c.get('target', '?')} (no longer configured)"
        err = c.get("last_error")
        t.add_row(name, target, *(str(c.get(k, 0)) for k in ("sent", "failed", "retrying", "dropped", "queued")),
                  f"{c.get('last_error_at')}: {err}" if err else "")
    console.print(t)
    bad = {n: c for n, c in st["channels"].items() if c.get("failed") or c.get("dropped")}
    for n, c in bad.items():
        console.print(f"[bold red]WARNING: notifications via {n}: {c.get('failed', 0)} failed, "
                      f"{c.get('dropped', 0)} dropped[/]")
    test = st.get("last_test")
    if test:
        parts = [f"{n} {'ok' if r['ok'] else 'FAILED: ' + str(r['error'])}" for n, r in test["channels"].items()]
        console.print(f"last `flowlake notify test` at {test['at']}: " + "; ".join(parts))
