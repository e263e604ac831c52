"""MkDocs hook: the reference pages, generated at build time from the code (nothing
generated is committed).

- `reference/configuration.md` from `flowlake.toml`: every section and key, its default
  (read with tomllib) and the comments beside it (read from the file's text), with the
  environment variable that overrides it (the rule of the config module, checked here by
  calling its `load()`).
- `reference/data.md` from `schemas/`: every record and table, by the same generator as
  `flowlake schema markdown` (`Record.markdown()`) and `flowlake schema formats`
  (`schemas.messages.markdown()`).
- the dashboards list in `dashboards.md` (the `<!-- dashboards -->` marker) from
  `superset/dashboards/*.yaml`, with a screenshot where `docs/screenshots/<slug>.png` exists
  (`make docs-screenshots` takes them; the build never needs them).

Project code is imported in one place, `project_modules()`.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import re
import sys
import tomllib
from pathlib import Path

import yaml
from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.reference")

CONFIG_PAGE = "reference/configuration.md"
DATA_PAGE = "reference/data.md"
DASHBOARDS_MARKER = "<!-- dashboards -->"


def project_modules(root: Path):
    """(config module, schemas package) of the checkout at `root`: the one place this hook
    imports flowlake (the configuration is flowlake.base.config). schemas/ is the package flowlake.schemas once installed, else the
    top-level folder of the checkout."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    config = importlib.import_module("flowlake.base.config")
    try:
        schemas = importlib.import_module("flowlake.schemas")
        if not Path(schemas.__file__).resolve().is_relative_to(root):
            raise ModuleNotFoundError("flowlake.schemas of another checkout")
    except ModuleNotFoundError:
        schemas = importlib.import_module("schemas")
    return config, schemas


# ---- configuration reference ---------------------------------------------------------

_KEY = re.compile(r"^([A-Za-z0-9_-]+)\s*=")
_HEADER = re.compile(r"^\[([A-Za-z0-9_.\"*-]+)\]")


def _split_comment(line: str) -> tuple[str, str]:
    """(code, comment) of a TOML line: the first '#' outside a string starts the comment."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            return line[:i].rstrip(), line[i + 1:].strip()
        i += 1
    return line.rstrip(), ""


def toml_comments(text: str) -> list[dict]:
    """Sections in file order: {"name", "intro": [lines], "keys": [{"key", "comment",
    "note"}]}. A comment block before a section's first key (or right before its header)
    introduces the section; one before a later key is a note on that key (and the keys after
    it); a key's own comment is the text beside it plus indented comment lines under it."""
    sections = [{"name": "", "intro": [], "keys": []}]
    block: list[str] = []      # column-0 comment lines not yet placed
    last = None                # the key whose comment indented lines continue
    for raw in text.splitlines():
        stripped = raw.strip()
        cur = sections[-1]
        if not stripped:
            if block and not cur["keys"]:
                cur["intro"] += block + [""]
                block = []
            last = None
            continue
        if stripped.startswith("#"):
            body = stripped[1:]
            body = body.removeprefix(" ")
            if raw[0].isspace() and last is not None:
                last["comment"] += " " + body.strip()
            else:
                block.append(body)
                last = None
            continue
        code, comment = _split_comment(stripped)
        header = _HEADER.match(code)
        if header:
            sections.append({"name": header.group(1), "intro": block + ([comment] if comment else []), "keys": []})
            block, last = [], None
            continue
        key = _KEY.match(code)
        if not key:
            continue
        if block and not cur["keys"] and cur["name"]:
            cur["intro"] += block
            block = []
        last = {"key": key.group(1), "comment": comment, "note": block}
        cur["keys"].append(last)
        block = []
    return sections


def _md(text: str) -> str:
    """Text of a comment as Markdown: code spans kept, markup characters outside them escaped."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = (parts[i].replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_")
                    .replace("<", "&lt;").replace("[", "\\["))
    return "`".join(parts).replace("|", "\\|")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def _type_name(value) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "list"}.get(type(value), type(value).__name__)


def _check_override_rule(config_mod, toml_path: Path) -> None:
    """The documented rule, FLOWLAKE_<KEY> and FLOWLAKE_<SECTION>_<KEY>, asked of the config
    module itself: if it changes, the strict build fails instead of the page lying."""
    try:
        cfg = config_mod.load(toml_path, env={"FLOWLAKE_LOG_LEVEL": "debug", "FLOWLAKE_COLLECTOR_PORT": "2999",
                                              "FLOWLAKE_SITE_LOCAL_PREFIXES": "10.0.0.0/8, 192.0.2.0/24"})
        ok = (cfg.log_level == "debug" and cfg.collector.port == 2999
              and cfg.site.local_prefixes == ["10.0.0.0/8", "192.0.2.0/24"])
    except Exception as exc:  # noqa: BLE001 - any failure means the page may be wrong
        log.warning("configuration reference: config.load() with environment overrides failed: %s", exc)
        return
    if not ok:
        log.warning("configuration reference: FLOWLAKE_<SECTION>_<KEY> no longer overrides as documented")


CONFIG_INTRO = """# Configuration reference

Generated from `flowlake.toml` when the docs are built: every section and key, its default
and the comment beside it in the file. `flowlake config` prints the effective configuration
(secrets show only whether they are set).

## Where values come from

Later wins:

1. the defaults in the repository's `flowlake.toml` (this page);
2. the file named by `FLOWLAKE_CONFIG`, else `./flowlake.toml` in the current folder if it
   exists. It may set only keys that exist here (an unknown key is an error naming the known
   ones), with the default's type (an integer is accepted where the default is a float);
3. environment variables: `FLOWLAKE_<KEY>` for a top-level key and `FLOWLAKE_<SECTION>_<KEY>`
   for a key of a section, upper case (`[collector] port` is `FLOWLAKE_COLLECTOR_PORT`, `home`
   is `FLOWLAKE_HOME`).

An environment value is converted to the default's type, and a value that does not convert
fails naming the variable: booleans take `1`/`true`/`yes`/`on` and `0`/`false`/`no`/`off`;
integers and floats as numbers; lists as comma-separated strings
(`FLOWLAKE_NOTIFY_SMTP_TO=a@x,b@y`), so a list of tables (`[[enrich.interface_rules]]`) is set
in a file. Only keys of the top level and of a section's own level are read from the
environment; {free_tables} (keyed by the user's own names) has no variables. A variable that
names no key is ignored.
"""


def configuration_markdown(root: Path) -> str:
    config_mod, _ = project_modules(root)
    toml_path = root / "flowlake.toml"
    text = toml_path.read_text()
    data = tomllib.loads(text)
    free = tuple(getattr(config_mod, "FREE_TABLES", ("exporters",)))
    _check_override_rule(config_mod, toml_path)

    free_tables = ", ".join(f"`[{t}]`" for t in free)
    out = [CONFIG_INTRO.format(free_tables=free_tables)]
    for section in toml_comments(text):
        name = section["name"]
        values = data if not name else data.get(name.strip('"'), {})
        if name:
            out += [f"## `[{name}]`", ""]
        else:
            out += ["## Top-level keys", ""]
        intro = [line for line in section["intro"]]
        while intro and not intro[-1].strip():
            intro.pop()
        if intro and name:
            out += ["```toml"] + [("# " + line).rstrip() for line in intro] + ["```", ""]
        documented = [k["key"] for k in section["keys"]]
        plain = {k: v for k, v in values.items() if not isinstance(v, dict)}
        if set(documented) != set(plain):
            log.warning("configuration reference: [%s] keys read from the text %s differ from tomllib's %s",
                        name, sorted(documented), sorted(plain))
        table_open = False
        for item in section["keys"]:
            note = " ".join(line.strip() for line in item["note"])
            if note and not item["comment"]:
                item["comment"] = note  # a comment above the key, about it alone
            elif note:  # a comment above a group of keys
                out += ["", _md(note), ""]
                table_open = False
            if not table_open:
                out += ["| key | default | type | environment variable | meaning |", "|---|---|---|---|---|"]
                table_open = True
            key = item["key"]
            value = values.get(key)
            env = "" if name in free else (f"FLOWLAKE_{name}_{key}" if name else f"FLOWLAKE_{key}").upper()
            out.append(f"| `{key}` | `{_md_code(_toml_value(value))}` | {_type_name(value)} | "
                       f"{'`' + env + '`' if env else '-'} | {_md(item['comment'])} |")
        out.append("")
    return "\n".join(out) + "\n"


def _md_code(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


# ---- data reference ------------------------------------------------------------------

NAMESPACES = {
    "flowlake.v1": ("Kafka records",
                    "What the shipper, the importers and the lab publish; Avro schemas with `flowlake schema avro NAME`."),
    "flowlake.lake": ("Lake tables", "What the ingest and the services write under `$FLOWLAKE_HOME/lake/`."),
    "flowlake.rollups": ("Rollups", "Written as each hour closes, under `lake/rollups/`."),
    "flowlake.reports": ("Report tables",
                         "Written by `flowlake jobs run --date D` under `lake/reports/<table>/date=D/`; a rerun replaces it."),
    "flowlake.security": ("Security tables", "Daily security views written by the jobs."),
}


DATA_INTRO = """# Data reference

Generated from `schemas/` when the docs are built, by the same code as `flowlake schema
markdown` (every table below) and `flowlake schema formats` (the wire formats). A field is
declared once (name, type, unit, meaning); the Avro schema, Spark schema, Superset column
descriptions and this page are generated from it. Types are the schema's logical types
(`flowlake schema sql NAME` gives the DuckDB types, `flowlake schema spark NAME` Spark's).
"""


def _escaped(rec):
    """The record with its texts escaped for a Markdown table (a '|' in a meaning would split
    the cell, a '<tool>' would read as HTML), rendered by its own `markdown()`."""
    fields = tuple(dataclasses.replace(f, doc=_md(f.doc), unit=_md(f.unit)) for f in rec.fields)
    return dataclasses.replace(rec, doc=_md(rec.doc), fields=fields)


def data_markdown(root: Path) -> str:
    _, schemas = project_modules(root)
    messages = importlib.import_module(schemas.__name__ + ".messages")
    records = schemas.registry()
    out = [DATA_INTRO]
    groups: dict[str, list] = {}
    for rec in records.values():
        groups.setdefault(rec.namespace, []).append(rec)
    order = list(NAMESPACES) + sorted(set(groups) - set(NAMESPACES))
    for ns in order:
        if ns not in groups:
            continue
        title, doc = NAMESPACES.get(ns, (ns, ""))
        out += [f"## {title}", "", f"Namespace `{ns}`. {doc}".rstrip(), ""]
        for rec in sorted(groups[ns], key=lambda r: r.name):
            out.append(_escaped(rec).markdown())
    out += ["## Wire formats of the flows topic", "", messages.markdown()]
    return "\n".join(out) + "\n"


# ---- dashboards ----------------------------------------------------------------------

def dashboards_markdown(root: Path, docs_dir: Path) -> str:
    out = []
    for path in sorted((root / "superset" / "dashboards").glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())
        slug, title = spec["slug"], spec["title"]
        charts = spec.get("charts", [])
        filters = ", ".join(f"`{f}`" for f in spec.get("filters", []))
        tables = sorted({c.get("dataset") for c in charts if c.get("dataset")})
        datasets = ", ".join(f"`{t}`" for t in tables)
        where = f"`/superset/dashboard/{slug}/`, from `superset/dashboards/{path.name}`"
        out += [f"### {title}", "", f"{where}; filters: {filters or 'none'}; datasets: {datasets}.", ""]
        out += [f"- {_md(str(c.get('title', '')))}" + (f": {_md(str(c['description']))}" if c.get("description") else "")
                for c in charts]
        out.append("")
        shot = docs_dir / "screenshots" / f"{slug}.png"
        if shot.exists():
            out += [f"![{title}](screenshots/{slug}.png)", ""]
        else:
            out += ["*(No screenshot in this build: `make docs-screenshots` takes one.)*", ""]
    return "\n".join(out)


# ---- MkDocs events -------------------------------------------------------------------

def _root(config) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def on_files(files, config):
    root = _root(config)
    for uri, make in ((CONFIG_PAGE, configuration_markdown), (DATA_PAGE, data_markdown)):
        existing = files.get_file_from_path(uri)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, uri, content=make(root)))
    return files


def on_page_markdown(markdown, page, config, files):
    if DASHBOARDS_MARKER in markdown:
        markdown = markdown.replace(DASHBOARDS_MARKER, dashboards_markdown(_root(config), Path(config["docs_dir"])))
    return markdown
