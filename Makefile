# Everything a fresh clone needs. Only Python must be present.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test sysdeps lint imports typecheck pytest docs charts chart-parts parity-table bench clean venv

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,view]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/interlock fit

test: $(STAMP) sysdeps
	$(MAKE) lint imports typecheck pytest docs

# Graphviz and Chromium for the chart-rendering and browser tests (apt-get, when missing)
sysdeps:
	@bash tools/sysdeps.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests tools
	$(BIN)/ruff format --check src tests tools

imports: $(STAMP)
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# Two workers (pytest-xdist), a test file to one worker; tests/conftest.py hands out the slowest files first
pytest: $(STAMP)
	$(BIN)/python -m pytest tests -n 2 --dist loadfile --durations=25

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir .site

charts: $(STAMP)
	$(BIN)/python -m interlock.cli.main chart --format mermaid -o statecharts/trainer.mmd
	$(BIN)/python -m interlock.cli.main chart --format svg -o statecharts/trainer.svg
	cp statecharts/trainer.svg docs/assets/trainer.svg
	$(MAKE) chart-parts

# The chart in parts, each legible at page width (README and docs): the overview, then one picture per region.
CHART := $(BIN)/python -m interlock.cli.main chart --format svg
chart-parts: $(STAMP)
	$(CHART) --depth 1 -o docs/assets/trainer-overview.svg
	$(CHART) --region fit --depth 1 -o docs/assets/trainer-fit.svg
	$(CHART) --region fit.sanity -o docs/assets/trainer-fit.sanity.svg
	$(CHART) --region fit.train --depth 1 -o docs/assets/trainer-fit.train.svg
	$(CHART) --region fit.train.batch -o docs/assets/trainer-fit.train.batch.svg
	$(CHART) --region fit.train.val --depth 1 -o docs/assets/trainer-fit.train.val.svg
	$(CHART) --region fit.train.val.batch -o docs/assets/trainer-fit.train.val.batch.svg
	$(CHART) --region validate -o docs/assets/trainer-validate.svg

# docs/porting.md's "What still differs" table, from the parity matrix (tests/parity/matrix.py)
parity-table: $(STAMP)
	$(BIN)/python tools/parity_table.py

bench: $(STAMP)
	$(BIN)/pip install -q -c <(echo torch==2.13.0) -e '.[bench]' || echo "Lightning/Ignite not installed: bench compares interlock with the plain loop only"
	$(BIN)/python tools/bench.py

clean:
	rm -rf $(VENV) .site .pytest_cache
