"""Superset for flowlake: its own virtualenv, secrets, start/stop, and dashboards as code.

Python API for `flowlake up` / `flowlake demo`:
  install_venv()   create .venv-superset (scripts/setup-superset.sh; idempotent)
  start(cfg)       bootstrap the metadata DB once, run gunicorn on 127.0.0.1:cfg.superset.port
  healthy(cfg)     /health answers OK
  provision(cfg)   build the bundle from superset/*.yaml + schemas, write the lake views
                   file, import the bundle (idempotent)
  warm(cfg)        open every dashboard once in headless Chromium (fills the data cache)
  stop(cfg)
  credentials(cfg) {"url", "username", "password"}

Secrets: FLOWLAKE_SUPERSET_SECRET_KEY / FLOWLAKE_SUPERSET_ADMIN_PASSWORD from the
environment, else generated once into $FLOWLAKE_HOME/superset/secrets.json (mode 600).
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import secrets as _secrets
import subprocess
import sys
import time
from dataclasses import dataclass
import urllib.request
from pathlib import Path

import click

from flowlake.base import config
from flowlake.base.component import Component
from flowlake.base.config import REPO_ROOT
from flowlake.base.process import Managed, wait_until

log = logging.getLogger(__name__)

SUPERSET_DIR = REPO_ROOT / "superset"
SETUP_SCRIPT = REPO_ROOT / "scripts" / "setup-superset.sh"
START_TIMEOUT = 240.0


# ---- paths and secrets ------------------------------------------------------------------
def venv_dir() -> Path:
    return Path(os.environ.get("FLOWLAKE_SUPERSET_VENV") or REPO_ROOT / ".venv-superset")


def venv_bin(tool: str) -> Path:
    return venv_dir() / "bin" / tool


def state_dir(cfg) -> Path:
    return cfg.path("superset")


def secrets(cfg) -> dict:
    """Secret key and admin password: environment first, else generated once (mode 600)."""
    path = state_dir(cfg) / "secrets.json"
    stored: dict = {}
    if path.exists():
        try:
            stored = json.loads(path.read_text())
        except ValueError as exc:
            raise click.ClickException(f"{path}: not valid JSON ({exc}); delete it to regenerate") from None
    if not {"secret_key", "admin_password"} <= stored.keys():
        stored = {"secret_key": stored.get("secret_key") or _secrets.token_urlsafe(48),
                  "admin_password": stored.get("admin_password") or _secrets.token_urlsafe(12)}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(stored, fh)
        os.replace(tmp, path)
    os.chmod(path, 0o600)
    return {"secret_key": os.environ.get("FLOWLAKE_SUPERSET_SECRET_KEY") or stored["secret_key"],
            "admin_password": os.environ.get("FLOWLAKE_SUPERSET_ADMIN_PASSWORD") or stored["admin_password"]}


def url(cfg) -> str:
    return f"http://{cfg.superset.host}:{cfg.superset.port}"


def credentials(cfg) -> dict:
    return {"url": url(cfg), "username": cfg.superset.admin_user, "password": secrets(cfg)["admin_password"]}


def superset_env(cfg) -> dict:
    """Environment for every Superset process (config file, state, lake, secret)."""
    env = {
        "SUPERSET_CONFIG_PATH": str(SUPERSET_DIR / "superset_config.py"),
        "FLOWLAKE_SUPERSET_STATE_DIR": str(state_dir(cfg)),
        "FLOWLAKE_LAKE_DIR": str(cfg.lake),
        "FLASK_APP": "superset.app:create_app()",
        "PYTHONUNBUFFERED": "1",
    }
    if os.environ.get("FLOWLAKE_SUPERSET_SECRET_KEY"):
        env["FLOWLAKE_SUPERSET_SECRET_KEY"] = os.environ["FLOWLAKE_SUPERSET_SECRET_KEY"]
    return env


def _managed(cfg):
    return Managed("superset", cfg.path("run"), cfg.path("log"))


def _run(cmd: list, cfg, what: str, timeout: float = 600) -> str:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **superset_env(cfg)}, cwd=str(state_dir(cfg)))
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-25:])
        raise click.ClickException(f"superset {what} failed (exit {res.returncode}):\n{tail}")
    return res.stdout


# ---- lifecycle ----------------------------------------------------------------------------
def install_venv() -> None:
    """Create or refresh .venv-superset (no-op when up to date)."""
    res = subprocess.run(["bash", str(SETUP_SCRIPT)], capture_output=True, text=True)
    if res.returncode != 0:
        raise click.ClickException(f"{SETUP_SCRIPT} failed:\n{res.stdout}\n{res.stderr}")


def bootstrap(cfg) -> None:
    """Metadata DB schema, admin user, roles: once per $FLOWLAKE_HOME (stamp file)."""
    sdir = state_dir(cfg)
    sdir.mkdir(parents=True, exist_ok=True)
    stamp = sdir / "bootstrap.done"
    sec = secrets(cfg)
    if stamp.exists():
        return
    if not venv_bin("superset").exists():
        raise click.ClickException(f"{venv_bin('superset')} missing: run scripts/setup-superset.sh (make setup)")
    superset = venv_bin("superset")
    _run([superset, "db", "upgrade"], cfg, "db upgrade")
    out = _run([superset, "fab", "create-admin", "--username", cfg.superset.admin_user, "--firstname", "flowlake",
                "--lastname", "admin", "--email", "admin@flowlake.invalid", "--password", sec["admin_password"]],
               cfg, "fab create-admin")
    if "already exist" in out:  # e.g. shared Postgres metadata: make the password the current one
        _run([superset, "fab", "reset-password", "--username", cfg.superset.admin_user,
              "--password", sec["admin_password"]], cfg, "fab reset-password")
    _run([superset, "init"], cfg, "init")
    stamp.write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))


def healthy(cfg) -> bool:
    try:
        with urllib.request.urlopen(url(cfg) + "/health", timeout=3) as resp:
            return resp.status == 200 and resp.read().strip() == b"OK"
    except OSError:
        return False


def gunicorn_argv(cfg) -> list[str]:
    workers = int(getattr(cfg.superset, "workers", 2))
    bind = f"{cfg.superset.host}:{cfg.superset.port}"
    return [str(venv_bin("gunicorn")), "-w", str(workers), "-k", "gthread", "--threads", "4",
            "--timeout", "120", "--graceful-timeout", "10", "-b", bind, "--limit-request-line", "0",
            "--limit-request-field_size", "0", "superset.app:create_app()"]


def provisioned(cfg) -> bool:
    """True once `provision` imported the dashboards into this FLOWLAKE_HOME's Superset."""
    return (state_dir(cfg) / "provisioned.json").exists()


def start(cfg, timeout: float = START_TIMEOUT) -> dict:
    """Start Superset (gunicorn) in the background; return when /health answers."""
    proc = _managed(cfg)
    if proc.running() and healthy(cfg):
        return credentials(cfg)
    bootstrap(cfg)
    try:
        refresh_views(cfg)  # a table converted to Delta (or given its first files) while Superset was down
    except (click.ClickException, OSError, ValueError) as exc:  # the bundle's errors are ValueErrors
        log.error("Superset's lake views not rewritten, starting with the old ones: %s",
                  getattr(exc, "message", exc))
    bind = f"{cfg.superset.host}:{cfg.superset.port}"
    proc.start(gunicorn_argv(cfg), env=superset_env(cfg), cwd=str(state_dir(cfg)))
    wait_until(lambda: healthy(cfg), timeout, f"Superset /health on {bind}", interval=1.0, proc=proc)
    return credentials(cfg)


def stop(cfg) -> bool:
    return _managed(cfg).stop(timeout=20)


def _bundle_module():
    """superset/bundle.py lives beside the YAML it reads; load it by path."""
    name = "flowlake_superset_bundle"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SUPERSET_DIR / "bundle.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build_bundle(cfg, out: Path | None = None):
    bundle_mod = _bundle_module()
    try:
        bundle = bundle_mod.build(cfg)
    except bundle_mod.BundleError as exc:
        raise click.ClickException(str(exc)) from None
    out = out or state_dir(cfg) / "bundle.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(bundle.zip_bytes())
    return bundle, out


def write_views(cfg, bundle) -> Path:
    """The lake connection's views file (DuckDB, in Superset's own DuckDB format)."""
    spec = state_dir(cfg) / "lake_views.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps(bundle.views_sql(), indent=1))
    _run([venv_bin("python"), SUPERSET_DIR / "lake_views.py", spec, bundle.views_db], cfg, "lake views")
    _views_stamp(cfg).write_text(_venv_requirements())
    return Path(bundle.views_db)


def _views_stamp(cfg) -> Path:
    return state_dir(cfg) / "lake_views.requirements"


def _venv_requirements() -> str:
    """Superset's venv pins: a views file is in its DuckDB's storage format (a file written
    by DuckDB 2.0 does not open in 1.4), so a change of pins rewrites it."""
    return (SUPERSET_DIR / "requirements.txt").read_text()


def refresh_views(cfg) -> list[str] | None:
    """Rewrite the views file when what it should say changed since it was written: a
    lake table became a Delta table (its view then reads `delta_scan`, not the Parquet
    glob: the glob would count a compacted hour's replaced files twice, and matches the
    log's checkpoint files), or the schemas changed. Returns the views reading Delta
    tables when it rewrote the file, None when it was current or Superset is not
    provisioned in this home. Cheap when nothing changed (the bundle is built in memory)."""
    if not provisioned(cfg):
        return None
    bundle = _bundle_module().build(cfg)
    spec = state_dir(cfg) / "lake_views.json"
    try:
        current = (json.loads(spec.read_text()) == bundle.views_sql() and Path(bundle.views_db).exists()
                   and _views_stamp(cfg).read_text() == _venv_requirements())
    except (OSError, ValueError):
        current = False
    if current:
        return None
    write_views(cfg, bundle)
    return sorted(name for name, sql in bundle.views.items() if "delta_scan(" in sql)


def refresh_views_hook(cfg, console) -> None:
    """base/hooks.py: after the lake's tables changed kind (`flowlake lake migrate`) or the
    report jobs ran. Best effort on a `rich` console, as refill_cache."""
    try:
        delta = refresh_views(cfg)
    except Exception as exc:  # noqa: BLE001  (a failed views build is reported, the caller's outcome stands)
        console.print(f"[yellow]Superset's lake views not rewritten: {getattr(exc, 'message', exc)}[/yellow]")
        return
    if delta is not None:
        console.print("Superset's lake views rewritten" + (f" (Delta tables: {', '.join(delta)})" if delta else ""))


def provision(cfg) -> dict:
    """Build the bundle, write the views file and import the bundle (overwrites by
    UUID: safe to repeat)."""
    bootstrap(cfg)
    bundle, path = build_bundle(cfg)
    write_views(cfg, bundle)
    _run([venv_bin("python"), SUPERSET_DIR / "import_bundle.py", path, cfg.superset.admin_user,
          ",".join(bundle.retired)], cfg, "import")
    result = {"bundle": str(path), "dashboards": bundle.charts, "skipped": bundle.skipped}
    (state_dir(cfg) / "provisioned.json").write_text(json.dumps(result, default=str))
    return result


# ---- the browser's view ------------------------------------------------------------------------
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

# True once every chart of the open dashboard has finished: no loading indicator, and
# either the chart or an error shown in its place.
ALL_CHARTS_SETTLED = """() => {
  const h = document.querySelectorAll('[data-test="dashboard-component-chart-holder"]');
  return h.length > 0 && Array.from(h).every(e =>
    !e.querySelector('[data-test="loading-indicator"], .loading') &&
    e.querySelector('[data-test="slice-container"], [role="alert"], .ant-alert'));
}"""


def browser_login(page, creds: dict, attempts: int = 3) -> None:
    """Log in through Superset's login page (Playwright page).

    A login that does not leave the login page within a minute is tried again from a
    fresh login page (a loaded box once left the form unsubmitted: no navigation, no
    message); after `attempts` the error names what the page and the login POST showed."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: PLC0415  (optional: Playwright)

    seen, posts = [], []

    def on_response(r) -> None:
        if r.request.method == "POST" and "/login" in r.url:
            posts.append(r.status)

    for attempt in range(1, attempts + 1):
        posts.clear()
        page.on("response", on_response)
        try:
            page.goto(creds["url"] + "/login/")
            if "/login" not in page.url:
                return  # already logged in: the login page sent us on
            page.fill('[data-test="username-input"]', creds["username"])
            page.fill('[data-test="password-input"]', creds["password"])
            page.click('[data-test="login-button"]')
            # "commit": the next page's response arrived; its scripts may still load.
            page.wait_for_url(lambda u: "/login" not in u, timeout=60_000, wait_until="commit")
            return
        except PlaywrightTimeout:
            shown = page.evaluate("() => Array.from(document.querySelectorAll("
                                  "'[role=alert], .ant-form-item-explain, .ant-message')"
                                  ").map(e => e.innerText.trim()).filter(Boolean).join(' | ')")
            seen.append(f"attempt {attempt}: still at {page.url}; login POSTs answered "
                        f"{posts or 'none'}; page shows {shown or 'no message'}")
            log.warning("superset browser login: %s", seen[-1])
        finally:
            page.remove_listener("response", on_response)
    raise RuntimeError(f"could not log in to Superset at {creds['url']} as {creds['username']!r}: "
                       + "; ".join(seen))


def warm(cfg, timeout_s: float = 180) -> dict:
    """Open every provisioned dashboard once in headless Chromium, so Superset's data
    cache holds exactly the queries the dashboards send (their native filters' defaults
    included) and the next visitor gets cached charts. Run it after the report jobs.
    Returns {slug: seconds, or None if not every chart finished within timeout_s}; needs
    Playwright and Debian's chromium (as the tests do)."""
    try:
        from playwright.sync_api import TimeoutError as PlaywrightTimeout, sync_playwright  # noqa: PLC0415  (optional: Playwright, only for superset warm)
    except ImportError:
        raise click.ClickException("superset warm needs Playwright (pip install playwright; `make setup` does)") from None
    if not Path(CHROMIUM).exists():
        raise click.ClickException(f"superset warm needs {CHROMIUM} (apt-get install chromium; `make setup` does)")
    if not provisioned(cfg):
        raise click.ClickException("Superset is not provisioned yet: run `flowlake superset provision`")
    if not healthy(cfg):
        raise click.ClickException(f"Superset does not answer at {url(cfg)}: `flowlake superset start`")
    slugs = list(json.loads((state_dir(cfg) / "provisioned.json").read_text())["dashboards"])
    creds, took = credentials(cfg), {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1200})
            browser_login(page, creds)
            for slug in slugs:
                t0 = time.monotonic()
                page.goto(f"{creds['url']}/superset/dashboard/{slug}/")
                try:
                    page.wait_for_function(ALL_CHARTS_SETTLED, timeout=timeout_s * 1000, polling=100)
                    took[slug] = round(time.monotonic() - t0, 2)
                except PlaywrightTimeout:
                    took[slug] = None  # some chart still loading after timeout_s: reported, not fatal
        finally:
            browser.close()
    return took


def refill_cache(cfg, console) -> None:
    """After the jobs rewrote report tables, which empties Superset's chart cache for them
    (superset/lake_cache.py): refill it when this home's Superset is provisioned and
    running (`jobs run`, `demo`). Best effort on a `rich` console: a failure is reported,
    the caller's outcome stands."""
    refresh_views_hook(cfg, console)  # before the cache is filled through them
    if not (provisioned(cfg) and healthy(cfg)):
        return
    try:
        with console.status("filling Superset's chart cache (headless Chromium) ..."):
            took = warm(cfg)
    except Exception as exc:  # noqa: BLE001  (Playwright's errors too)
        console.print(f"[yellow]Superset's chart cache not refilled: {getattr(exc, 'message', exc)}[/yellow]")
        return
    console.print("Superset's chart cache refilled: " + ", ".join(
        f"{slug} {s:.1f} s" if s is not None else f"{slug} [yellow]not every chart in time[/yellow]"
        for slug, s in took.items()))


# ---- CLI ------------------------------------------------------------------------------------
@click.group()
def superset() -> None:
    """Superset: credentials, start/stop, and dashboards provisioned from superset/*.yaml.

    \b
    Examples:
      flowlake superset start            # bootstrap once, run on 127.0.0.1:$FLOWLAKE_SUPERSET_PORT
      flowlake superset provision        # build the bundle and import it (repeatable)
      flowlake superset warm             # after the report jobs: fill the cache
      flowlake superset check            # which charts show no data, and why
      flowlake superset views            # after `flowlake lake migrate`: views read Delta tables
      flowlake superset credentials --json
      flowlake superset bundle -o /tmp/bundle.zip   # only build the ZIP, no Superset needed
      flowlake superset stop
    """


def _cfg():
    return config.get()


@superset.command("credentials")
@click.option("--json", "as_json", is_flag=True, help='Print {"url","username","password"} as JSON.')
def credentials_cmd(as_json: bool) -> None:
    """Print Superset's URL, user and password (generated once per FLOWLAKE_HOME).

    \b
    Example:
      flowlake superset credentials --json | jq -r .password
    """
    creds = credentials(_cfg())
    if as_json:
        click.echo(json.dumps(creds))
    else:
        click.echo(f"URL:      {creds['url']}\nusername: {creds['username']}\npassword: {creds['password']}")


@superset.command("provision")
def provision_cmd() -> None:
    """Build the import bundle from superset/*.yaml and the schemas, and import it.

    Charts whose report table or columns are not declared in schemas/ yet are skipped
    with a warning. Re-running overwrites the same UUIDs (idempotent).

    \b
    Example:
      flowlake superset provision
    """
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)

    console = Console(stderr=True)
    with console.status("building and importing the Superset bundle..."):
        result = provision(_cfg())
    # charts skipped for undeclared tables/columns were already logged as warnings
    for slug, charts in result["dashboards"].items():
        console.print(f"{slug}: {len(charts)} charts")
    click.echo(f"provisioned {url(_cfg())}/superset/dashboard/<slug>/ from {result['bundle']}")


@superset.command("views")
def views_cmd() -> None:
    """Rewrite the lake views file if a lake table changed kind (became a Delta table).

    A view over a Delta table reads `delta_scan('<table>')` (one table version per
    query), a view over a plain Parquet table the table's files; `flowlake superset
    start`, `provision` and the report jobs run this too. Safe to repeat.

    \b
    Example:
      flowlake lake migrate && flowlake superset views
    """
    cfg = _cfg()
    if not provisioned(cfg):
        raise click.ClickException("Superset is not provisioned yet: run `flowlake superset provision`")
    delta = refresh_views(cfg)
    if delta is None:
        click.echo(f"{views_db_path_text(cfg)}: current")
    else:
        click.echo(f"{views_db_path_text(cfg)}: rewritten; views reading Delta tables: {', '.join(delta) or 'none'}")


def views_db_path_text(cfg) -> str:
    return str(_bundle_module().views_db_path(cfg))


@superset.command("warm")
def warm_cmd() -> None:
    """Fill Superset's cache: open every dashboard once in headless Chromium.

    Cached chart data stays valid until the report jobs rewrite a report table;
    `flowlake jobs run` calls this itself when Superset is up (unless --no-warm), so the
    morning's first visitor does not wait for the queries.

    \b
    Example:
      flowlake jobs run --date 2026-11-20 --no-warm && flowlake superset warm
    """
    slow = []
    for slug, seconds in warm(_cfg()).items():
        if seconds is None:
            slow.append(slug)
            click.echo(f"{slug}: not every chart finished in time", err=True)
        else:
            click.echo(f"{slug}: rendered in {seconds:.2f} s (now cached)")
    if slow:
        raise SystemExit(1)


@superset.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as JSON.")
def check_cmd(as_json: bool) -> None:
    """Run every chart's query as its dashboard does and say which show no data: failed,
    empty ("No results"), or led by "(unknown)" (the enrichment is missing). Exits 1 when
    any does. Superset must be running.

    \b
    Example:
      flowlake jobs run --date 2026-11-20 && flowlake superset check
    """
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)

    from .superset_check import check, print_check  # noqa: PLC0415  (start-up: requests)

    cfg = _cfg()
    if not healthy(cfg):
        raise click.ClickException(f"Superset does not answer at {url(cfg)}: `flowlake superset start` first")
    res = check(credentials(cfg))
    if as_json:
        click.echo(json.dumps(res, indent=1))
    else:
        print_check(Console(), res)
    if res["failed"] or res["empty"] or res["unknown_first"]:
        raise SystemExit(1)


@superset.command("bundle")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the ZIP.")
def bundle_cmd(output: Path) -> None:
    """Only build the import ZIP (for review or for `superset import-dashboards`).

    \b
    Example:
      flowlake superset bundle -o /tmp/flowlake-bundle.zip && unzip -l /tmp/flowlake-bundle.zip
    """
    bundle, path = build_bundle(_cfg(), output)
    for msg in bundle.skipped:
        click.echo(f"skipped: {msg}", err=True)
    click.echo(f"{path}: {len(bundle.files)} files")


@superset.command("start")
@click.option("--foreground", is_flag=True, help="Run gunicorn in the foreground (containers).")
def start_cmd(foreground: bool) -> None:
    """Start Superset in the background (first start also creates the metadata DB).

    \b
    Example:
      FLOWLAKE_SUPERSET_PORT=8089 flowlake superset start
    """
    from rich.console import Console  # noqa: PLC0415  (start-up: rich)

    cfg = _cfg()
    if foreground:
        bootstrap(cfg)
        os.chdir(state_dir(cfg))
        os.execve(gunicorn_argv(cfg)[0], gunicorn_argv(cfg), {**os.environ, **superset_env(cfg)})
    with Console(stderr=True).status(f"starting Superset on {url(cfg)} (first start takes a few minutes)..."):
        creds = start(cfg)
    click.echo(f"Superset is up: {creds['url']}  user {creds['username']}  "
               f"(password: flowlake superset credentials)")


@superset.command("stop")
def stop_cmd() -> None:
    """Stop the Superset started by `flowlake superset start` / `flowlake up`."""
    click.echo("stopped" if stop(_cfg()) else "Superset was not running")


@dataclass(frozen=True)
class SupersetSettings:
    """[superset]"""
    host: str
    port: int
    admin_user: str
    workers: int


class Superset(Component):
    """Apache Superset (gunicorn, its own virtualenv), once provisioned (`flowlake superset provision`)."""
    name = "superset"
    settings_type = SupersetSettings
    section = "superset"

    def managed(self) -> Managed:
        return _managed(self.cfg)

    def port(self) -> int:
        return self.settings.port

    def enabled(self) -> bool:
        return provisioned(self.cfg)

    def start(self):
        return start(self.cfg)

    def stop(self) -> bool:
        return stop(self.cfg)
