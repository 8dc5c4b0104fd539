# Needs only Python 3.10+ with pip and venv (and, for `make test`, Debian's apt
# when Chromium is missing). `make demo` and `make test` create .venv on first
# use and reuse it afterwards; `make test-compat` builds its own venvs under
# .venv-compat/, `make lint` its own .venv-lint. CI (.ci/run) calls only these targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The other venvs, named here: make expands a rule's prerequisites when it
# reads the rule, so a name defined below its first use would read empty.
COMPAT ?= .venv-compat
NO_TF ?= .venv-no-tf
JAX_VENV ?= .venv-jax
PYTEST_ARGS ?=
# Two pytest workers, one test file each at a time (module fixtures stay
# shared): much of the suite waits on subprocesses, worker pairs and the
# profiler, so two workers fit two cores. `make test PYTEST_JOBS=0` runs serially.
PYTEST_JOBS ?= 2

.PHONY: ci demo docs lint test test-main test-quick test-compat test-no-tf no-tf-venv compat-venvs browser-deps bench clean \
	test-jax test-jax-compat jax-venvs

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[cpu,profile]"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[cpu,profile,test,docs]"
	# tf_keras (legacy Keras 2, for its tests) declares a dependency on the
	# full `tensorflow` wheel; tensorflow-cpu already provides that package.
	$(PY) -m pip install --quiet --no-deps "tf_keras>=2.20,<2.22"
	touch $@

# tests/output/test_browser.py drives headless Chromium through chromedriver. pip
# cannot install them, so install Debian's packages, only when missing, and
# only as root; anyone else gets told what to install instead of a test error.
browser-deps:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then \
	  exit 0; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "Installing chromium and chromium-driver (apt-get) for tests/output/test_browser.py"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && \
	  apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; \
	else \
	  echo "make test needs Chromium and its driver for tests/output/test_browser.py;" >&2; \
	  echo "install them as root:  apt-get install -y --no-install-recommends chromium chromium-driver" >&2; \
	  echo "(or run 'make test-quick', which skips the browser test)" >&2; \
	  exit 1; \
	fi

# The quickstart notebook executed, outputs stored, for its docs page
# (docs/_hooks/notebook.py; tests/test_notebook.py keeps it in sync).
.PHONY: notebook-docs
notebook-docs: $(VENV)/.installed-test
	$(PY) docs/_hooks/notebook.py --execute

# Retakes docs/images/html_report.png with the browser test's own page.
.PHONY: docs-images
docs-images: browser-deps $(VENV)/.installed-test
	XLA_GUARD_UPDATE_DOCS_IMAGES=1 $(PY) -m pytest -q tests/output/test_browser.py -k "html_report"

demo: $(VENV)/.installed
	$(PY) -m keras_xla_guard.demo --log-dir logs/demo

# The manual under docs/ (MkDocs, API pages from the docstrings) into site/.
docs: $(VENV)/.installed-test
	$(PY) -m mkdocs build --strict

# browser-deps first: without root and Chromium it fails before the long install.
# The JAX suite runs after the TensorFlow one, in its own venv (see test-jax).
test: browser-deps $(VENV)/.installed-test $(JAX_VENV)/.installed
	@$(MAKE) --no-print-directory test-main
	@$(MAKE) --no-print-directory test-jax

# The suite in .venv alone (`make test` runs tests/on_jax after it; CI builds
# .venv-jax in the background meanwhile).
test-main: browser-deps $(VENV)/.installed-test
	$(PY) -m pytest -n $(PYTEST_JOBS) --dist loadfile $(PYTEST_ARGS)

test-quick: $(VENV)/.installed-test
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# ------------------------------------------------------------- style and types
# ruff (the lint rules and the formatting, pyproject.toml's [tool.ruff]) over
# the tree, then mypy over the package ([tool.mypy]: its `files`). Pinned in a
# venv of their own, without the package or TensorFlow (mypy reads the
# source; third-party imports count as untyped), so a new ruff or mypy
# release cannot fail CI on unchanged code: raise the pins on purpose and fix
# what they then report. All three run, so one call shows every problem.
LINT_VENV ?= .venv-lint
RUFF_VERSION ?= 0.17.6
MYPY_VERSION ?= 2.4.1

$(LINT_VENV)/.installed: Makefile
	rm -rf $(LINT_VENV)
	$(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LINT_VENV)/bin/python -m pip install --quiet "ruff==$(RUFF_VERSION)" "mypy==$(MYPY_VERSION)"
	touch $@

lint: $(LINT_VENV)/.installed
	@rc=0; \
	echo "== ruff check ."; $(LINT_VENV)/bin/ruff check . || rc=1; \
	echo "== ruff format --check ."; $(LINT_VENV)/bin/ruff format --check . || rc=1; \
	echo "== mypy"; $(LINT_VENV)/bin/mypy || rc=1; \
	exit $$rc

# ---------------------------------------------------------------- compatibility
# The signature tap reaches into private Keras internals, so the tests marked
# `compat` (signatures, callback, loop, Keras seam) also run against the oldest
# versions setup.cfg declares and against keras-nightly, each in its own venv.
# Only what the compat tests import is installed (no selenium/jax/notebooks),
# to keep CI fast. Raise these pins together with setup.cfg's extras.
COMPAT_PYTEST_ARGS ?= -q -p no:cacheprovider -n $(PYTEST_JOBS) --dist loadfile
# Oldest declared: setup.cfg `tensorflow-cpu>=2.20`, `keras>=3.10`. Older
# TensorFlow writes CPU traces the analysis misreads (2.16-2.17: no XLA events
# at all; 2.18: compilations as CpuCompiler::CompileLegacyCpuExecutable; 2.19:
# XLA runs on a host_executor thread with no *Executable::Execute* event), and
# TensorFlow 2.20 itself requires keras>=3.10.
OLDEST_TF ?= 2.20.0
OLDEST_KERAS ?= 3.10.0
# tf_keras tracks TensorFlow's minor version (there is no tf_keras 2.20.0).
OLDEST_TF_KERAS ?= 2.20.1
# Newest TensorFlow with Keras' nightly build (the next release's trainer).
NIGHTLY_TF ?= 2.21.0
# What the compat tests need besides TensorFlow and Keras (matplotlib: the `html`
# extra, for the guards' write_html tests).
COMPAT_TEST_DEPS := "pytest>=7" "pytest-xdist>=3.5" "hypothesis>=6" "xprof>=2.24.1" "matplotlib>=3.8"
# And the oldest xprof the `profile` extra declares (TensorBoard's Profile tab),
# pinned in the oldest venv: the tab's end-to-end tests run in both venvs, and
# tests/test_loop.py checks its step analysis sees the guard's step markers.
OLDEST_XPROF ?= 2.24.1
# Deselected there: the non-TensorFlow backend test needs jax (Keras' numpy
# backend imports it too), a `test` extra left out of the compat venvs (`make
# test` runs it); and the two raw-trace oracle tests, which count TF 2.21's
# `CpuExecutable::ExecuteAsyncOnStream` spans that TF 2.20 does not emit. The
# MirroredStrategy tests (they tap other internals) and the Profile tab's
# end-to-end tests (a real fit served by a real tensorboard, xprof's op table
# included) are marked `compat` too; multi-worker stays in `make test`. One
# pytest call per venv: each call starts its workers and imports TensorFlow.
COMPAT_DESELECT := --deselect tests/test_callback.py::test_other_keras_backends_are_refused_at_construction \
  --deselect tests/test_distributed.py::test_mirrored_coverage_agrees_with_the_raw_trace_and_xprof \
  --deselect tests/output/test_tensorboard_e2e.py::test_served_xla_figures_match_the_raw_trace

$(COMPAT)/oldest/.installed: setup.cfg pyproject.toml Makefile
	rm -rf $(COMPAT)/oldest
	$(PYTHON) -m venv $(COMPAT)/oldest
	$(COMPAT)/oldest/bin/python -m pip install --quiet --upgrade pip
	$(COMPAT)/oldest/bin/python -m pip install --quiet -e . $(COMPAT_TEST_DEPS) \
	  "tensorflow-cpu==$(OLDEST_TF)" "keras==$(OLDEST_KERAS)" "xprof==$(OLDEST_XPROF)"
	# As in .venv: tf_keras would pull the full `tensorflow` wheel otherwise.
	$(COMPAT)/oldest/bin/python -m pip install --quiet --no-deps "tf_keras==$(OLDEST_TF_KERAS)"
	touch $@

# keras-nightly provides the same `keras` module under another distribution
# name, so the released keras (pulled in by tensorflow-cpu) is removed first
# and keras-nightly goes in with --no-deps: a normal install would have pip
# re-resolve tensorflow-cpu's `keras>=...` and put the release back over it.
# Its own needs are listed by hand. A fresh CI machine gets the newest nightly;
# locally, `rm -rf .venv-compat/nightly` to pick up a newer one.
$(COMPAT)/nightly/.installed: setup.cfg pyproject.toml Makefile
	rm -rf $(COMPAT)/nightly
	$(PYTHON) -m venv $(COMPAT)/nightly
	$(COMPAT)/nightly/bin/python -m pip install --quiet --upgrade pip
	$(COMPAT)/nightly/bin/python -m pip install --quiet -e . $(COMPAT_TEST_DEPS) \
	  "tensorflow-cpu==$(NIGHTLY_TF)"
	$(COMPAT)/nightly/bin/python -m pip uninstall --quiet -y keras
	$(COMPAT)/nightly/bin/python -m pip install --quiet --no-deps --pre --upgrade keras-nightly
	$(COMPAT)/nightly/bin/python -m pip install --quiet absl-py rich namex h5py optree ml-dtypes
	$(COMPAT)/nightly/bin/python -m pip install --quiet --no-deps "tf_keras==$(NIGHTLY_TF)"
	touch $@

compat-venvs: $(COMPAT)/oldest/.installed $(COMPAT)/nightly/.installed

# Runs both venvs even when the first fails, then fails if either did.
test-compat: compat-venvs
	@rc=0; for v in oldest nightly; do \
	  echo "== compat tests in $(COMPAT)/$$v:"; \
	  $(COMPAT)/$$v/bin/python -c "import tensorflow as tf, keras; print('   tensorflow', tf.__version__, '| keras', keras.__version__)" 2>/dev/null; \
	  $(COMPAT)/$$v/bin/python -m pytest -m compat $(COMPAT_DESELECT) $(COMPAT_PYTEST_ARGS) || rc=1; \
	done; exit $$rc

# ------------------------------------------------------------ without TensorFlow
# `report` reads traces with the package's own XSpace bindings, so it must work
# where only the package's dependencies are installed (a CI box that only gates
# on traces, a JAX user). This venv holds those, the `html` extra and the test
# runner, with the oldest protobuf, numpy and matplotlib setup.cfg declares; no
# TensorFlow, no Keras.
# test-no-tf checks that `report`, with every flag, on the stored real traces
# prints exactly what it prints in .venv; that commands needing TensorFlow, and
# --html without matplotlib, exit 2 naming the extra; and runs the trace, CLI
# and HTML report tests not marked `tf` (or `slow`) there.
OLDEST_PROTOBUF ?= 4.21.1
# And the oldest numpy declared (setup.cfg `numpy>=1.23.5`, the oldest with
# wheels for Python 3.10 and 3.11); newer Pythons have no wheel that old, so
# there it is the oldest numpy released for them.
OLDEST_NUMPY ?= $(shell $(PYTHON) -c "import sys; print({(3, 10): '1.23.5', (3, 11): '1.23.5', \
  (3, 12): '1.26.0', (3, 13): '2.1.0'}.get(sys.version_info[:2], '2.3.2'))")
# And the oldest matplotlib the `html` extra declares, beside that numpy on
# Python 3.10-3.12 (numpy 1); on 3.13, whose oldest numpy is 2, the oldest
# matplotlib with a wheel for it (3.9.2, built for numpy 2); elsewhere the
# newest.
OLDEST_MATPLOTLIB ?= $(shell $(PYTHON) -c "import sys; print({(3, 10): '3.8.0', (3, 11): '3.8.0', \
  (3, 12): '3.8.0', (3, 13): '3.9.2'}.get(sys.version_info[:2], ''))")
NO_TF_TESTS := tests/trace tests/test_cli.py tests/output/test_html.py tests/output/test_figures_agree.py

$(NO_TF)/.installed: setup.cfg pyproject.toml Makefile
	rm -rf $(NO_TF)
	$(PYTHON) -m venv $(NO_TF)
	$(NO_TF)/bin/python -m pip install --quiet --upgrade pip
	$(NO_TF)/bin/python -m pip install --quiet -e ".[html]" "pytest>=7" "hypothesis>=6" \
	  "protobuf==$(OLDEST_PROTOBUF)" "numpy==$(OLDEST_NUMPY)" \
	  $(if $(OLDEST_MATPLOTLIB),"matplotlib==$(OLDEST_MATPLOTLIB)")
	touch $@

no-tf-venv: $(NO_TF)/.installed

test-no-tf: $(NO_TF)/.installed $(VENV)/.installed-test
	rm -rf test-artifacts/no-tf
	$(PY) tests/_cli_outputs.py write test-artifacts/no-tf
	$(NO_TF)/bin/python tests/_cli_outputs.py check test-artifacts/no-tf
	$(NO_TF)/bin/python -m pytest -q -p no:cacheprovider -m "not slow and not tf" $(NO_TF_TESTS)

# ------------------------------------------------------------------ Keras on JAX
# Keras fixes its backend once per process, so tests/on_jax runs in a pytest of its
# own with KERAS_BACKEND=jax (tests/conftest.py collects it only then). Its venv
# holds the package with the `jax` and `html` extras, pytest and xprof (the
# oracle its trace tests compare with), and NO TensorFlow: TensorBoard output,
# trace reading and the whole guard must work without it, and
# tests/on_jax/test_callback.py checks TensorFlow is not even importable there.
# test-jax-compat runs the same suite on the oldest declared jax, Keras and
# tensorboard. Two workers, one test file each at a time, as the main suite
# (77 s serial, 47 s so on this 2-core machine).
OLDEST_JAX ?= 0.6.2
OLDEST_JAX_KERAS ?= 3.10.0
# And the oldest tensorboard declared: without TensorFlow, the guard's
# TensorBoard output is tensorboard's own writer, under numpy 2.
OLDEST_TENSORBOARD ?= 2.17.1
JAX_TEST_DEPS := "pytest>=7" "pytest-xdist>=3.5" "xprof>=2.24.1"
# Flax NNX for tests/on_jax/test_nnx.py, in .venv-jax only: flax 0.12 needs jax >= 0.10,
# newer than the compat venv's oldest declared jax.
FLAX := "flax==0.12.8"
JAX_PYTEST_ARGS ?= -q -p no:cacheprovider -n $(PYTEST_JOBS) --dist loadfile

$(JAX_VENV)/.installed: setup.cfg pyproject.toml Makefile
	rm -rf $(JAX_VENV)
	$(PYTHON) -m venv $(JAX_VENV)
	$(JAX_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(JAX_VENV)/bin/python -m pip install --quiet -e ".[jax,html]" $(JAX_TEST_DEPS) $(FLAX)
	touch $@

$(COMPAT)/jax-oldest/.installed: setup.cfg pyproject.toml Makefile
	rm -rf $(COMPAT)/jax-oldest
	$(PYTHON) -m venv $(COMPAT)/jax-oldest
	$(COMPAT)/jax-oldest/bin/python -m pip install --quiet --upgrade pip
	$(COMPAT)/jax-oldest/bin/python -m pip install --quiet -e ".[html]" $(JAX_TEST_DEPS) \
	  "jax==$(OLDEST_JAX)" "jaxlib==$(OLDEST_JAX)" "keras==$(OLDEST_JAX_KERAS)" \
	  "tensorboard==$(OLDEST_TENSORBOARD)"
	touch $@

jax-venvs: $(JAX_VENV)/.installed $(COMPAT)/jax-oldest/.installed

test-jax: $(JAX_VENV)/.installed
	KERAS_BACKEND=jax $(JAX_VENV)/bin/python -m pytest $(JAX_PYTEST_ARGS) tests/on_jax

test-jax-compat: $(COMPAT)/jax-oldest/.installed
	@KERAS_BACKEND=jax $(COMPAT)/jax-oldest/bin/python -c "import jax, keras, tensorboard, numpy; print('== jax', jax.__version__, '| keras', keras.__version__, '| tensorboard', tensorboard.__version__, '| numpy', numpy.__version__)"
	KERAS_BACKEND=jax $(COMPAT)/jax-oldest/bin/python -m pytest $(JAX_PYTEST_ARGS) tests/on_jax

# The JAX custom loop's watched-step cost (docs/benchmarks.md#a-jax-custom-loop), saved.
.PHONY: bench-jax
bench-jax: $(JAX_VENV)/.installed
	$(JAX_VENV)/bin/python benchmarks/save_result.py benchmarks/bench_jax_loop.py --rounds 31 --batches 400

# Every benchmark, one JSON object each (several minutes; run on a quiet machine).
bench: $(VENV)/.installed-test
	$(PY) benchmarks/bench_overhead.py --no-signatures
	$(PY) benchmarks/bench_overhead.py
	$(PY) benchmarks/bench_signatures.py
	$(PY) benchmarks/bench_fix.py
	$(PY) benchmarks/bench_analyze.py
	$(PY) benchmarks/bench_loop.py
	$(PY) benchmarks/bench_doctor.py
	$(PY) benchmarks/bench_compare.py
	$(PY) benchmarks/bench_html.py
	$(PY) benchmarks/bench_compile_cost.py
	$(PY) benchmarks/cache_key_check.py
	$(PY) benchmarks/warmup_training_identity.py
	$(PY) benchmarks/stress_warmup_interrupt.py

# The proof that the default multi-worker guard (chief-only profiling) never
# crashes: 30 runs each of the 2-worker Keras 3 loop and tf_keras fit,
# alternated, counting native crashes (about 40 minutes on a busy 2-core
# machine); saved under benchmarks/results/. Other candidates: --modes
# guard-all,raw-level1,raw-quiesce,raw-server (docs/multiworker.md).
.PHONY: stress-multiworker
stress-multiworker: $(VENV)/.installed-test
	$(PY) benchmarks/save_result.py benchmarks/stress_multiworker.py --runs 30 --modes guard --scenarios loop,fit

# Mutation testing of trace/, signatures/ and warmup.py with the fast tests
# (mutmut, configured in pyproject.toml): a developer target, not part of
# `make ci` - CPU-heavy: about 10 minutes for signatures, two hours for trace
# (6,547 mutants) and more than half an hour for warmup (real train steps) on
# two loaded cores; `make mutation MUTATION_ROOMS=signatures` runs one. The result (mutants, killed, survivors per room) is saved under
# benchmarks/results/; docs/testing.md lists the survivors and why each stands.
MUTATION_ROOMS ?= trace,signatures,warmup

$(VENV)/.installed-mutation: $(VENV)/.installed-test
	$(PY) -m pip install --quiet -e ".[mutation]"
	touch $@

.PHONY: mutation
mutation: $(VENV)/.installed-mutation
	$(PY) benchmarks/save_result.py benchmarks/mutation.py --rooms $(MUTATION_ROOMS)

clean:
	rm -rf $(VENV) $(COMPAT) $(NO_TF) $(JAX_VENV) $(LINT_VENV) logs site test-artifacts .pytest_cache mutants \
	  .mypy_cache .ruff_cache

# GPU check (docs/jax.md): on the lent GPU machine, which has JAX (CUDA),
# TensorBoard and protobuf but no TensorFlow and no network, with this checkout
# and the wheels of `make gpu-wheels` carried along: installs xprof from them
# when missing, then fits a Keras model on JAX under the guard and checks its
# trace figures against xprof and jax.monitoring (exit 1 on a mismatch),
# saving the JSON under benchmarks/results/ and the gzipped trace as the
# GPU-plane tests' golden. Without a GPU it says so and exits 0;
# tests/on_jax/test_gpu_check.py runs it on CPU with --dry-run.
GPU_PYTHON ?= python3
GPU_WHEELS ?= .gpu-wheels
.PHONY: gpu-check gpu-wheels
gpu-check:
	@$(GPU_PYTHON) -c "import xprof" 2>/dev/null || \
	  $(GPU_PYTHON) -m pip install --quiet --no-index --find-links $(GPU_WHEELS) xprof
	KERAS_BACKEND=jax PYTHONPATH=. $(GPU_PYTHON) benchmarks/gpu_check.py --save

# xprof and its dependencies as wheels for this machine's Python; for another
# Python on the GPU machine: GPU_WHEEL_ARGS="--python-version 3.12 --only-binary=:all:".
GPU_WHEEL_ARGS ?=
gpu-wheels:
	$(PYTHON) -m pip download --quiet -d $(GPU_WHEELS) $(GPU_WHEEL_ARGS) "xprof>=2.24.1"

# What CI runs (.ci/run calls only this): `make lint` first (a minute at most,
# so a style or type error fails before the long suite), the suite in .venv,
# then tests/on_jax, the checks without TensorFlow and the compat tests. The
# venvs those need only download and unpack, so they build in the background,
# one after the other, while the suite runs (.venv-jax first); .venv is
# installed before because two editable installs of one source tree must not
# overlap.
CI_PYTEST_ARGS ?= -q --durations=15
ci: lint browser-deps $(VENV)/.installed-test
	@$(MAKE) --no-print-directory $(JAX_VENV)/.installed compat-venvs no-tf-venv $(COMPAT)/jax-oldest/.installed > compat-venvs.log 2>&1 & venvs=$$!; \
	$(MAKE) --no-print-directory test-main PYTEST_ARGS="$(CI_PYTEST_ARGS)"; rc=$$?; \
	if ! wait $$venvs; then cat compat-venvs.log; exit 1; fi; \
	[ $$rc -eq 0 ] || exit $$rc; \
	$(MAKE) --no-print-directory test-jax || rc=1; \
	$(MAKE) --no-print-directory test-no-tf || rc=1; \
	$(MAKE) --no-print-directory test-compat || rc=1; \
	$(MAKE) --no-print-directory test-jax-compat || rc=1; \
	exit $$rc
