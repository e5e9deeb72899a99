# Odradek — the two commands on a fresh machine:
#   make run    start one broker on localhost:9092, data under ./data
#   make test   install everything the tests need and run the whole suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= config/server.properties

.PHONY: run test lint bench venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/odradek $(CONFIG) $(ARGS)

test: $(STAMP)
	$(PY) -m ruff check broker protocol storage controller tests tools bench
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check broker protocol storage controller tests tools bench

bench: $(STAMP)
	$(PY) bench/reactor_bench.py
	$(PY) bench/storage_bench.py
	$(PY) bench/timer_bench.py

clean:
	rm -rf $(VENV) data build *.egg-info
