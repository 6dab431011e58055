# Two entry points for a fresh machine: `make run` and `make test` (see README.md).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup run test lint unit integration bench soak clean kubernetes-examples

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,pipeline,java]'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(BIN)/python -m harness.run_local

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest tests/unit

integration: setup
	$(BIN)/pytest tests/integration

# Two workers: the modules on the shared Kafka cluster run on one, each other module whole on
# either (tests/conftest.py, work_unit).
test: lint
	$(BIN)/pytest -n 2 --dist loadscope

# examples/kubernetes/ is the Helm chart rendered (a unit test checks they are equal).
kubernetes-examples: setup
	$(BIN)/python -m harness.helm_chart

bench: setup
	$(BIN)/python -m bench.run_all

# 30 minutes of traffic and faults (not in CI; MINUTES=10 make soak for less).
MINUTES ?= 30
soak: setup
	$(BIN)/python -m bench.soak --minutes $(MINUTES) --out soak-report

clean:
	scripts/local-kafka down || true
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
