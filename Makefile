# Laneway task runner: one entry point for people and CI. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.laneway-installed
PYTEST_ARGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@if [ -t 1 ]; then on=$$'\033[36m' off=$$'\033[0m'; else on='' off=''; fi; \
	awk -v on="$$on" -v off="$$off" 'BEGIN {FS = ":.*## "} \
		/^[a-zA-Z_-]+:.*## / {n++; name[n] = $$1; text[n] = $$2; if (length($$1) > width) width = length($$1)} \
		END {row = "  " on "%-" width "s" off "  %s\n"; for (i = 1; i <= n; i++) printf row, name[i], text[i]}' \
		$(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spark,bench,dev]'
	@touch $@

.PHONY: venv
venv: $(STAMP) ## create the virtualenv and install Laneway with its tools (reused when present)

.PHONY: jars
jars: $(STAMP) ## fetch the Kafka broker and Spark extra jars from Maven Central (cached in ~/.cache/laneway)
	$(PY) -m laneway.jars kafka spark

.PHONY: lint
lint: $(STAMP) ## ruff and mypy --strict
	$(VENV)/bin/ruff check laneway tests bench
	$(VENV)/bin/ruff format --check laneway tests bench
	$(VENV)/bin/mypy

.PHONY: prometheus
prometheus: ## install Prometheus and promtool (Debian's package) for the dashboard and alert tests
	@if [ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
		  || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; }; }; \
	else \
		echo "Prometheus is missing: run 'sudo apt-get install prometheus' (Debian/Ubuntu; it ships prometheus and promtool)"; \
	fi

.PHONY: test
test: jars prometheus lint ## run the whole suite (lint, unit, integration on a real local broker)
	$(VENV)/bin/pytest $(PYTEST_ARGS)

.PHONY: chaos
chaos: jars ## the long form of the chaos suite (kills, rebalance storms, broker restarts)
	LANEWAY_CHAOS=long $(VENV)/bin/pytest tests/chaos $(PYTEST_ARGS)

.PHONY: demo
demo: jars ## run the main job on the embedded defaults
	$(PY) -m laneway.demo

.PHONY: bench
bench: jars ## run the benchmarks (quick mode; BENCH_MODE=full for the long one)
	$(PY) -m bench --mode $${BENCH_MODE:-quick}

.PHONY: broker
broker: jars ## start a detached local broker (stop it with `make broker-stop`)
	$(VENV)/bin/laneway broker start

.PHONY: broker-secure
broker-secure: jars ## start a detached secured broker (SASL_SSL, ACLs); prints the client files
	$(VENV)/bin/laneway broker start --secure

.PHONY: broker-stop
broker-stop: ## stop the detached local broker
	$(VENV)/bin/laneway broker stop

.PHONY: fmt
fmt: $(STAMP) ## format and autofix
	$(VENV)/bin/ruff format laneway tests bench
	$(VENV)/bin/ruff check --fix laneway tests bench

.PHONY: clean
clean: ## remove the virtualenv and caches in the tree (not the jar cache)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
