"""The documentation site builds with `mkdocs build --strict`, and its generated reference
pages hold what the code declares: every key of flowlake.toml, the flow record's columns.
Needs no services and no root; runs in a few seconds."""
from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stdout}\n{res.stderr}"
    assert "WARNING" not in res.stderr, res.stderr
    return out


def text(site: Path, page: str) -> str:
    """A built page as plain text (tags dropped, entities decoded)."""
    raw = (site / page / "index.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def test_site_builds_with_every_page(site):
    for page in ("install", "quickstart", "operating", "dashboards", "internals", "benchmarks", "changelog",
                 "reference/configuration", "reference/data", "guide/collection"):
        assert (site / page / "index.html").exists(), page
    assert (site / "index.html").exists()


def test_configuration_reference_has_every_key_with_its_variable(site):
    page = text(site, "reference/configuration")
    data = tomllib.loads((REPO / "flowlake.toml").read_text())
    for section, values in data.items():
        if not isinstance(values, dict):
            assert f"FLOWLAKE_{section.upper()}" in page, section
            continue
        assert f"[{section}]" in page, section
        for key, value in values.items():
            if isinstance(value, dict):
                continue
            assert f"FLOWLAKE_{section}_{key}".upper() in page, f"[{section}] {key}"
    # a key with its default and the comment beside it in the file
    assert "how often a file is closed and shipped" in page
    assert re.search(r"port\s*2055\s*integer\s*FLOWLAKE_COLLECTOR_PORT\s*UDP port routers export to", page)


def test_data_reference_has_the_flow_columns(site):
    page = text(site, "reference/data")
    for name in ("flows", "Flow", "top_talkers", "exporter_health", "rollup_5m"):
        assert re.search(rf"^\s*{name}\s*$", page, re.MULTILINE), name
    assert re.search(r"sampling_rate\s*int", page)
    assert "src_addr" in page and "dst_addr" in page
    assert "flows topic wire formats" in page


def test_dashboards_page_lists_every_dashboard(site):
    import yaml

    page = text(site, "dashboards")
    for spec in sorted((REPO / "superset" / "dashboards").glob("*.yaml")):
        d = yaml.safe_load(spec.read_text())
        assert d["title"] in page and f"/superset/dashboard/{d['slug']}/" in page, spec.name


def test_readme_stays_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 160, f"README.md has {len(lines)} lines: move the rest into docs/"
