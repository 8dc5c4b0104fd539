"""Shared fixtures: small real Keras models trained with the real profiler.

Training is the slow part of this suite, so each distinct training run is
done once per session and shared by every test that only reads its results.
The helpers they use live in `_helpers.py`.

Every report a guard measures in this process (any fit, any custom loop,
the session fits included) passes `_helpers.assert_consistent` after the
test that ran it: issue 29's consistency check applied to every real fit
of the suite, at the cost of a few comparisons per report. Fits run in
child processes (multi-worker, other Keras versions) check their own
figures in their tests.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if os.environ.get("HYPOTHESIS_PROFILE") == "mutation":
    # benchmarks/mutation.py: a mutant needs only whether a property fails,
    # not its smallest failing example, and shrinking one can take seconds.
    from hypothesis import Phase, settings

    settings.register_profile("mutation", phases=[Phase.explicit, Phase.reuse, Phase.generate])
    settings.load_profile("mutation")

# tests/on_jax needs Keras on JAX, and Keras fixes its backend once per process:
# `make test-jax` runs it in a pytest of its own with KERAS_BACKEND=jax (in a
# venv without TensorFlow); every other test needs the TensorFlow backend.
collect_ignore = [] if os.environ.get("KERAS_BACKEND") == "jax" else ["on_jax"]

from _helpers import Fit, assert_consistent, fit_with_guard  # noqa: E402 - after the TF log level

# Reports the guards of this process measured and no test has checked yet.
_MEASURED: list = []


@pytest.fixture(scope="session", autouse=True)
def _collect_measured_reports():
    """Keeps every measured report any guard's engine stores, session fixtures' fits included."""
    from keras_xla_guard.runtime.engine import XlaGuardEngine

    store = XlaGuardEngine._store

    def collecting(self, report):
        if report.ok:
            _MEASURED.append(report)
        store(self, report)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(XlaGuardEngine, "_store", collecting)
        yield


# Whether a module- or class-scoped fixture was set up since the last full collection.
_WIDE_FIXTURES = [False]


def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> None:
    if fixturedef.scope in ("class", "module", "package") and fixturedef.argname != "_free_module_cycles":
        _WIDE_FIXTURES[0] = True


@pytest.fixture(scope="module", autouse=True)
def _free_module_cycles():
    """After each test file with module or class fixtures: every reference cycle is freed.

    Their values outlived the tests that froze them (`_free_cycles_while_young`
    says why cycles are freed early); only a collection of every generation,
    frozen ones included, frees them. It costs about 0.6 s with TensorFlow
    loaded, so it runs only where such fixtures were set up (about a quarter
    of the files); the rest left their cycles to the per-test collection.
    """
    yield
    if "tensorflow" in sys.modules and _WIDE_FIXTURES[0]:
        _WIDE_FIXTURES[0] = False
        gc.unfreeze()
        gc.collect()
        gc.freeze()


@pytest.fixture(autouse=True)
def _free_cycles_while_young():
    """After each test: reference cycles it left are freed now, while their tf.data iterators are young.

    An exception kept by a test (`pytest.raises`) holds its traceback, and
    through it `fit`'s frames and their tf.data iterators. Left to Python's
    rare full collections, such cycles were freed minutes later, in bulk,
    inside some later test, which then stalled for 15-130 s (2-5 such tests
    a suite run): gdb during a stall showed the main thread in TensorFlow's
    iterator destructor (`~LogicalThreadWrapper`) waiting for the
    pipeline's autotuning threads, which sat in `Model::OptimizeLoop`'s
    timed wait. A collection after every test frees the cycles while the
    iterators are young; what survives it is frozen, so the next test's
    collection only looks at what that test made (a full collection after
    every test cost several CPU-minutes a suite run). With both fixtures,
    the suite ran in 9.9 min where it took 12.1-12.5 min without.
    """
    yield
    if "tensorflow" in sys.modules:
        gc.collect()
        gc.freeze()


@pytest.fixture(autouse=True)
def _measured_reports_agree():
    """After each test: every report a real fit measured meanwhile passes `assert_consistent`."""
    yield
    reports = list(_MEASURED)
    _MEASURED.clear()
    for report in reports:
        assert_consistent(report)


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """SIGINT handled by Python's own handler for the test, as in a terminal.

    A shell that starts pytest in the background without job control (`make
    test &` in a script, `nohup`) hands it SIGINT ignored, and Python then
    raises no KeyboardInterrupt: tests that pin what a Ctrl-C does set the
    handler a user at a terminal has, and put the one they found back.
    """
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session")
def jit_fit(tmp_path_factory: pytest.TempPathFactory) -> Fit:
    """3 epochs, jit_compile=True, epoch 1 profiled."""
    return fit_with_guard(True, tmp_path_factory.mktemp("jit") / "xla_guard", profile_epochs=(1,))


@pytest.fixture(scope="session")
def plain_fit(tmp_path_factory: pytest.TempPathFactory) -> Fit:
    """3 epochs, jit_compile=False, epoch 1 profiled."""
    return fit_with_guard(False, tmp_path_factory.mktemp("plain") / "xla_guard", profile_epochs=(1,))
