# Needs only Python 3.10+ with pip and venv. `make demo` and `make test`
# create .venv on first use and reuse it afterwards.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: demo test test-quick bench clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[cpu]"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[cpu,test]"
	# tf_keras (legacy Keras 2, for its tests) declares a dependency on the
	# full `tensorflow` wheel; tensorflow-cpu already provides that package.
	$(PY) -m pip install --quiet --no-deps "tf_keras>=2.16,<2.22"
	touch $@

demo: $(VENV)/.installed
	$(PY) -m keras_xla_guard.demo --log-dir logs/demo

test: $(VENV)/.installed-test
	$(PY) -m pytest $(PYTEST_ARGS)

test-quick: $(VENV)/.installed-test
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# Every benchmark, one JSON object each (several minutes; run on a quiet machine).
bench: $(VENV)/.installed-test
	$(PY) benchmarks/bench_overhead.py --no-signatures
	$(PY) benchmarks/bench_overhead.py
	$(PY) benchmarks/bench_signatures.py
	$(PY) benchmarks/bench_fix.py
	$(PY) benchmarks/bench_analyze.py
	$(PY) benchmarks/bench_loop.py
	$(PY) benchmarks/bench_doctor.py

clean:
	rm -rf $(VENV) logs test-artifacts .pytest_cache

# GPU readiness: on a GPU machine, checks the guard's device-plane figures
# against the raw trace and xprof (exit 1 on a mismatch); on CPU, says so, exit 0.
.PHONY: gpu-check
gpu-check: $(VENV)/.installed-test
	$(PY) benchmarks/gpu_check.py
