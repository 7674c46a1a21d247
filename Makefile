# Two entry points, each creating the environment it needs:
#   make demo   the main job on the bundled real data (no TensorFlow, no network use after setup)
#   make test   the whole test suite, real TensorFlow runs and captures included
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: demo test test-fast lint system-deps data clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# The core environment: what `tfsim` needs to read profiles and predict.
$(VENV)/.core-installed: pyproject.toml | $(BIN)/activate
	$(PIP) install -e '.[dev]'
	touch $@

# TensorFlow, for `tfsim collect` and the tests that run real jobs; dask, for the executor tests;
# ns-3, for the packet transfer model's tests.
$(VENV)/.tf-installed: $(VENV)/.core-installed
	$(PIP) install -e '.[tf,dev,dask,packet]'
	touch $@

# Debian tools the capture, lab and browser tests drive (installed only where missing; needs root).
system-deps:
	@missing=""; for tool in tcpdump tshark iperf3 ip; do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages for:$$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump tshark iperf3 iproute2 >/dev/null; \
	fi
	@if [ ! -x /usr/bin/chromium ]; then \
	  echo "installing chromium and chromium-driver for the report's browser check"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

demo: $(VENV)/.core-installed
	$(BIN)/tfsim demo

test: $(VENV)/.tf-installed system-deps lint
	$(BIN)/python -m pytest

# Static checks (configuration in pyproject.toml): part of make test, and so of CI.
lint: $(VENV)/.core-installed
	$(BIN)/ruff check .

# The suite without the tests that start TensorFlow processes.
test-fast: $(VENV)/.core-installed
	$(BIN)/python -m pytest -m "not tensorflow"

# Regenerate data/ with the project's own harness (about 10 minutes).
data: $(VENV)/.tf-installed
	TFSIM=$(BIN)/tfsim scripts/collect-bundled-data.sh

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
