# Two commands do everything on a fresh machine:
#   make demo   – create .venv, install, run the main job on embedded defaults
#   make test   – create .venv, install, run the test suite (everything: CI's command)
#   make check  – the inner loop: every test but the end-to-end ones that start real services (`slow`), no Docker
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
export MLFLOW_DISABLE_TELEMETRY := true
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1

.PHONY: setup demo test check bench lock deploy clean

# Installs come from the lock file (constraints.txt): a fresh machine gets exactly the versions CI tested.
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt pip
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/oltunes demo

# The Docker tests need an engine: .ci/docker-engine.sh installs Debian's docker.io, debootstrap and docker-compose
# if missing (root) and starts a private dockerd, stopped afterwards. Without one they skip saying why (CI=true: fail).
test: setup
	engine=$$(.ci/docker-engine.sh) && eval "$$engine" && started=1 || echo "no Docker engine: Docker tests will skip" >&2; \
	$(PY) -m pytest -q -ra $(PYTEST_ARGS); rc=$$?; \
	if [ -n "$${started:-}" ]; then infra/dockerd.sh stop; fi; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# Everything not marked `slow` (those start Prefect/MLflow servers, Docker, tuner/gateway/worker processes).
# Exit 5 (nothing collected) fails, as in `make test`.
check: setup
	$(PY) -m pytest -q -ra -m "not slow" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

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

# Prefect deployments on the server at PREFECT_API_URL: every work pool prefect.yaml names, the zoo, the batch input.
deploy: setup
	PATH=$(abspath $(VENV))/bin:$$PATH infra/deploy.sh

clean:
	rm -rf .oltunes
