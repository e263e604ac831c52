# flowlake: the two commands are `make demo` and `make test`; both run `make setup` first.
SHELL := /bin/bash
VENV  := .venv
PYTEST_ARGS ?=
# make test runs test modules on parallel workers (pytest-xdist, whole modules per worker,
# tests/conftest.py SHARED: modules sharing one Superset stay together; each
# worker has its own FLOWLAKE_HOME, ports, Kafka and Spark). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

# Tiers (markers, tests/_tier_guard/flowlake_tier_guard.py): unit (automatic, guarded: no
# services, no root), integration, e2e, browser, root; slow is orthogonal.
UNIT_TIER := unit and not slow

.PHONY: setup demo check lint lint-imports test test-unit test-integration soak bench clean help docs docs-serve docs-screenshots

help:
	@echo "make demo   set up, start the stack, fill the lake with a day of traffic, run the reports, open Superset"
	@echo "make check  lint (ruff), import contracts and the unit tests: no services, no root, under 3 minutes"
	@echo "make test   set up and run the whole test suite (real Kafka, nfcapd, Spark, Superset, Chromium); lint first"
	@echo "make soak   long fault-injection run (>= 1M flows, 20 faults)"
	@echo "make bench  run the benchmarks in bench/ (print figures, no assertions)"
	@echo "make setup  idempotent set-up only"
	@echo "make docs   build the documentation site into site/ (mkdocs --strict); make docs-serve serves it"
	@echo "make docs-screenshots  one PNG per Superset dashboard into docs/screenshots/ (browser tests)"

setup:
	@scripts/setup.sh

demo: setup
	$(VENV)/bin/flowlake demo

lint:
	$(VENV)/bin/ruff check .

lint-imports:
	$(VENV)/bin/python scripts/lint_imports.py

check: setup
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory lint lint-imports && \
	$(VENV)/bin/python -m pytest -m "$(UNIT_TIER)" $(PYTEST_ARGS); rc=$$?; \
	echo "make check: $$(( $$(date +%s) - start )) s (set-up excluded)"; exit $$rc

test: setup lint lint-imports
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --junitxml=test-output/junit.xml $(PYTEST_ARGS)

# The unit tier alone (what make check runs after the linters).
test-unit: setup
	$(VENV)/bin/python -m pytest -m "$(UNIT_TIER)" $(PYTEST_ARGS)

test-integration: setup
	$(VENV)/bin/python -m pytest -m integration $(PYTEST_ARGS)

soak: setup
	$(VENV)/bin/python -m flowlake.faults --soak

bench: setup
	@for b in bench/*.py; do echo "=== $$b"; $(VENV)/bin/python $$b || exit 1; done

clean:
	@echo "stopping any stack under var/ and removing it"; $(VENV)/bin/flowlake down || true; rm -rf var

# The documentation site (docs/, mkdocs.yml); the reference pages are generated at build time.
# any Python with requirements.txt's mkdocs pins (make setup installs them): make docs DOCS_PY=...
DOCS_PY ?= $(VENV)/bin/python
MKDOCS  := $(DOCS_PY) -m mkdocs

docs:
	$(MKDOCS) build --strict --site-dir site

docs-serve:
	$(MKDOCS) serve

# Screenshots for docs/dashboards.md: the browser tests save one PNG per dashboard (Superset on
# a synthetic lake, headless Chromium), shrunk for the site and committed in docs/screenshots/.
docs-screenshots: setup
	rm -rf test-output/docs-screenshots && mkdir -p test-output/docs-screenshots
	FLOWLAKE_DOCS_SCREENSHOTS=$(CURDIR)/test-output/docs-screenshots $(VENV)/bin/python -m pytest tests -k test_dashboard_renders_every_chart $(PYTEST_ARGS)
	$(VENV)/bin/python scripts/shrink_screenshots.py test-output/docs-screenshots docs/screenshots
