# Two commands do everything on a fresh machine:
#   make demo   – create .venv, install, run the main job on embedded defaults
#   make test   – create .venv, install, run the test suite
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
export MLFLOW_DISABLE_TELEMETRY := true
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1

.PHONY: setup demo test bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/oltunes demo

test: setup
	$(PY) -m pytest -q -ra $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench: setup
	mkdir -p benchmarks/results
	for b in $$(ls benchmarks/*.py | grep -v -e common -e __init__); do n=$$(basename $$b .py); $(PY) -m benchmarks.$$n --json benchmarks/results/$$n.json || exit 1; done

clean:
	rm -rf .oltunes
