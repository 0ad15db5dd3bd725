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

.PHONY: setup demo test bench lock clean

# Installs come from the lock file (constraints.txt): a fresh machine gets exactly the versions CI tested.
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt pip
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/oltunes demo

test: setup
	$(PY) -m pytest -q -ra $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench: setup
	mkdir -p benchmarks/results
	for b in $$(ls benchmarks/*.py | grep -v -e common -e __init__); do n=$$(basename $$b .py); $(PY) -m benchmarks.$$n --json benchmarks/results/$$n.json || exit 1; done

# Re-resolve the newest versions pyproject.toml allows into constraints.txt (then run `make test` and commit both).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q --upgrade pip
	.lock-venv/bin/python -m pip install -q -e '.[test]'
	{ echo "# Lock file: exact versions for 'make setup' (pip -c). Regenerate with 'make lock'; never edit by hand."; \
	  .lock-venv/bin/python -m pip freeze --all --exclude-editable | sed -e 's/+cpu$$//'; } > constraints.txt
	rm -rf .lock-venv

clean:
	rm -rf .oltunes
