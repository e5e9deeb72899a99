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

# The Java/Spark tests need Kafka's and Spark's jars: `jars` fetches them from Maven Central into
# .cache/ on first use (about a minute) and is a no-op afterwards.
test: $(STAMP) jars
	$(PY) -m ruff check broker protocol storage controller tests tools bench pipeline
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check broker protocol storage controller tests tools bench pipeline

bench: $(STAMP)
	$(PY) bench/reactor_bench.py
	$(PY) bench/storage_bench.py
	$(PY) bench/timer_bench.py

clean:
	rm -rf $(VENV) data build *.egg-info

# --- Java/Kafka/Spark tool chain (java/, tools/kafka_dist.py, pipeline/) ---
#   make jars           fill .cache/jars from Maven Central (Kafka 3.9.1, Spark 4.0.0 connector, test driver)
#   make kafka-start    a real Apache Kafka on localhost:$(KAFKA_PORT) for comparison (data in .cache/kafka-run)
#   make kafka-stop
#   make pipeline       generate $(EVENTS) events into $(BOOTSTRAP) and run the PySpark pipeline once
.PHONY: jars kafka-start kafka-stop pipeline
KAFKA_PORT ?= 9192
BOOTSTRAP ?= localhost:9092
EVENTS ?= 5000

jars: $(STAMP)
	$(PY) -m tools.kafka_dist jars

kafka-start: jars
	$(PY) -m tools.kafka_dist start --port $(KAFKA_PORT)

kafka-stop: $(STAMP)
	$(PY) -m tools.kafka_dist stop

pipeline: jars
	$(PY) -m pipeline.generate --bootstrap $(BOOTSTRAP) --events $(EVENTS) --create-topic
	$(PY) -m pipeline.run --bootstrap $(BOOTSTRAP) $(PIPELINE_ARGS)
