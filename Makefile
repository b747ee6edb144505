# Two commands: `make run` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-test
# Spark's Kafka source for the report from a topic: Maven Central serves none of Spark 4.3's yet, 4.2.0's reads with it
SPARK_KAFKA_CONNECTOR ?= org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0

.PHONY: run test test-cluster unit integration lint bench soak fuzz clean prometheus-tools

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

run: $(STAMP)
	$(BIN)/python -m proxy.dev.run

# Prometheus's server and promtool, for the dashboard and alerting-rule tests: Debian's package, installed
# with apt-get where it is missing and this is root; otherwise the package to install is named.
prometheus-tools:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's prometheus package (server and promtool) for the tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends prometheus >/dev/null; }; \
	  else \
	    echo "the tests need Prometheus (prometheus and promtool): install Debian's 'prometheus' package" >&2; exit 2; \
	  fi; }

test: $(STAMP) prometheus-tools
	$(BIN)/ruff check protocol quotas allocator proxy pipeline tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q --durations=30 tests  # the slowest tests named at the end: what CI's time goes to

# The integration tests against a running cluster: KAFKA_BOOTSTRAP=host:port[,host:port] make test-cluster
test-cluster: $(STAMP) prometheus-tools
	@test -n "$(KAFKA_BOOTSTRAP)" || { echo "set KAFKA_BOOTSTRAP=host:port[,host:port...] (the cluster to test against)" >&2; exit 2; }
	KAFKA_BOOTSTRAP="$(KAFKA_BOOTSTRAP)" $(BIN)/pytest -q tests/integration

unit: $(STAMP) prometheus-tools
	$(BIN)/pytest -q tests/unit

integration: $(STAMP) prometheus-tools
	$(BIN)/pytest -q tests/integration

lint: $(STAMP)
	$(BIN)/ruff check protocol quotas allocator proxy pipeline tests bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench.run --out bench/results.json
	$(BIN)/python -m bench.quotas --out bench/quotas-results.json
	$(BIN)/python -m bench.protocol --out bench/protocol-results.json
	$(BIN)/python -m bench.allocator --out bench/allocator-results.json
	$(BIN)/python -m bench.pipeline --out bench/pipeline-results.json
	$(BIN)/python -m bench.report_sources --kafka-connector $(SPARK_KAFKA_CONNECTOR) --out bench/report-sources-results.json
	$(BIN)/python -m bench.tls --out bench/tls-results.json
	$(BIN)/python -m bench.workers --out bench/workers-results.json
	$(BIN)/python -m bench.ledger_latency --out bench/ledger-latency-results.json
	$(BIN)/python -m bench.fidelity --out bench/fidelity-results.json
	$(BIN)/python -m bench.observe --out bench/observe-results.json
	$(BIN)/python -m bench.request_cost --out bench/request-cost-results.json
	$(BIN)/python -m bench.decision_cost --out bench/decision-cost-results.json
	$(BIN)/python -m bench.relay_floor --out bench/relay-floor-results.json
	$(BIN)/python -m bench.relay_floor --modes copy splice --sink-receive-buffer 102400 --out bench/relay-floor-kafka-buffer-results.json
	$(BIN)/python -m bench.topic_quotas --out bench/topic-quotas-results.json
	$(BIN)/python -m bench.fleet_scale --out bench/fleet-scale-results.json
	$(BIN)/python -m bench.flood_service --out bench/flood-service-results.json
	$(BIN)/python -m bench.latency_aims --out bench/latency-aims-results.json
	$(BIN)/python -m bench.docs  # the documentation's table and plots, from the results above

# Every fuzz target 10 minutes under atheris, then 10 minutes of mutated frames at a live proxy beside well-behaved
# clients (not part of `make test`, which fuzzes each target for seconds)
fuzz: $(STAMP)
	$(BIN)/python -m bench.fuzz --out bench/fuzz-results.json
	$(BIN)/python -m bench.live_fuzz --out bench/live-fuzz-results.json

# 20 minutes of mixed traffic with a broker restart and a proxy SIGKILL (not part of `make test`)
soak: $(STAMP)
	$(BIN)/python -m bench.soak --out bench/soak-results.json

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
