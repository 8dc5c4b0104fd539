"""The pytest plugin (`keras_xla_guard/pytest_plugin.py`), run by pytest itself: real inner
sessions through the `pytester` fixture, with real fits of the sequence model of
`_fit_helpers.py` (5 XLA compilations by construction). Importing the plugin, which pytest does
in every session of every project that installs the package, imports no TensorFlow or Keras."""

from __future__ import annotations

import configparser
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]
PLUGIN = "keras_xla_guard.pytest_plugin"

_FITS = textwrap.dedent("""
    import keras
    import pytest
    from _fit_helpers import LENGTHS, _seq_dataset, _seq_model


    def _fit():
        _seq_model(True).fit(_seq_dataset(LENGTHS), epochs=2, verbose=0)


    @pytest.mark.max_compilations(5)
    def test_within():
        _fit()


    @pytest.mark.max_compilations(4)
    def test_over():
        _fit()


    @pytest.mark.max_compilations(2, fail_fast=True)
    def test_fail_fast():
        _fit()


    def test_counts(xla_compilations):
        _fit()
        assert xla_compilations.limit is None
        assert xla_compilations.count == 5
        assert [c.step for c in xla_compilations.compilations] == [0, 1, 2, 4, 6]


    @pytest.mark.max_compilations(9)
    def test_fixture_is_the_markers_budget(xla_compilations):
        assert xla_compilations.limit == 9


    def test_unmarked_runs_without_a_budget():
        from keras_xla_guard import _model_hooks

        _seq_model(True)
        assert _model_hooks._users == 0 and "train_on_batch" not in vars(keras.Model)


    @pytest.fixture
    def fitted():
        model = _seq_model(True)
        model.fit(_seq_dataset(LENGTHS), epochs=1, verbose=0)
        return model


    @pytest.mark.max_compilations(0)
    def test_a_fixtures_fit_is_not_counted(fitted):
        pass


    def test_the_fixture_counts_the_body_not_the_fixtures_set_up_after_it(xla_compilations, fitted):
        assert xla_compilations.count == 0


    @pytest.mark.max_compilations(0)
    def test_a_fit_of_a_model_a_fixture_fitted_cannot_be_counted(fitted):
        fitted.fit(_seq_dataset(LENGTHS), epochs=1, verbose=0)
""")

# Markers on a module and a class apply to each of their tests; the closest one is the limit.
_SCOPED = textwrap.dedent("""
    import pytest
    from _fit_helpers import LENGTHS, _seq_dataset, _seq_model

    pytestmark = pytest.mark.max_compilations(4)


    def _fit():
        _seq_model(True).fit(_seq_dataset(LENGTHS), epochs=1, verbose=0)


    def test_the_module_marker_applies():
        _fit()


    class TestGrouped:
        pytestmark = pytest.mark.max_compilations(5)

        def test_the_class_marker_is_closer(self):
            _fit()

        @pytest.mark.max_compilations(3)
        def test_the_functions_marker_is_closest(self, xla_compilations):
            assert xla_compilations.limit == 3
""")


@pytest.fixture(scope="module")
def frameworks_loaded() -> None:
    """TensorFlow and Keras imported before `pytester` snapshots `sys.modules`.

    At its teardown pytester takes out of `sys.modules` every module imported
    since its snapshot: TensorFlow imported first inside an in-process run
    would be imported a second time by the next test in this process, which
    aborts it (`PyExceptionRegistry::Init() already called`, SIGABRT; seen
    with tests/test_budget.py next in the same worker).
    """
    import keras  # noqa: F401
    import tensorflow  # noqa: F401


@pytest.mark.slow
@pytest.mark.compat
def test_the_marker_fails_a_test_over_budget_with_every_compilation_and_passes_one_within(
    frameworks_loaded, pytester
):
    """An inner session: within budget passes, over budget fails with the listing, fail_fast stops fit; module and class markers apply, the closest wins."""
    pytester.syspathinsert(REPO / "tests")
    pytester.makepyfile(test_fits=_FITS, test_scoped=_SCOPED)
    result = pytester.runpytest("-p", PLUGIN, "--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8, failed=4)
    outcomes = {
        "::".join(r.nodeid.split("::")[1:]): r.outcome
        for r in result.reprec.getreports("pytest_runtest_logreport")
        if r.when == "call"
    }
    assert outcomes == {
        "test_the_module_marker_applies": "failed",
        "TestGrouped::test_the_class_marker_is_closer": "passed",
        "TestGrouped::test_the_functions_marker_is_closest": "passed",
        "test_within": "passed",
        "test_over": "failed",
        "test_fail_fast": "failed",
        "test_counts": "passed",
        "test_fixture_is_the_markers_budget": "passed",
        "test_unmarked_runs_without_a_budget": "passed",
        # Only the body is counted: the fixture's 5 compilations are not the test's.
        "test_a_fixtures_fit_is_not_counted": "passed",
        "test_the_fixture_counts_the_body_not_the_fixtures_set_up_after_it": "passed",
        # Those the fixture compiled may be the body's: the marker cannot count, so it fails.
        "test_a_fit_of_a_model_a_fixture_fitted_cannot_be_counted": "failed",
    }
    text = result.stdout.str()
    assert (
        "E   keras_xla_guard.errors.RecompilationLimitError: keras-xla-guard: 5 XLA compilation(s) "
        "inside max_compilations(4), 1 more than it allows. Each one, with what changed and the fix:"
    ) in text
    assert "      5. train function, epoch 0, step 6: x['tokens']: int32[8,13], y: float32[8,1]" in text
    # test_over and the module-marked test, each over 4. Only the tracebacks' `E` lines are counted:
    # the short summary repeats the message as far as the terminal is wide (COLUMNS).
    failures = [
        line
        for line in text.splitlines()
        if line.startswith("E   ") and "inside max_compilations(4), 1 more than it allows" in line
    ]
    assert len(failures) == 2
    # The failure is the budget's verdict: the plugin's and the budget's own frames are not shown.
    assert "budget.check()" not in text and "pytest_pyfunc_call" not in text
    assert "XLA compilation 3 inside max_compilations(2) goes over it (fail_fast=True)" in text
    assert (
        "E   keras_xla_guard.errors.CompilationsUnknownError: keras-xla-guard: max_compilations(0) could not "
        "count the XLA compilations inside it: "
    ) in text


_BAD_MARKERS = textwrap.dedent("""
    import pytest


    def test_runs_first():
        pass


    @pytest.mark.max_compilations(-1)
    def test_bad_limit():
        pass


    @pytest.mark.max_compilations(2, fail_fast="no")
    def test_truthy_fail_fast():
        pass


    @pytest.mark.max_compilations(1, 2)
    def test_two_limits():
        pass


    class TestScoped:
        pytestmark = pytest.mark.max_compilations(limit=3)

        def test_limit_as_a_keyword(self):
            pass
""")


@pytest.mark.parametrize("strict", [False, True])
def test_a_bad_marker_stops_the_session_at_collection_naming_each_test(pytester, strict):
    """Bad marker arguments fail at collection, before any test runs, with or without --strict-markers."""
    pytester.makepyfile(test_markers=_BAD_MARKERS)
    flags = ["--strict-markers"] if strict else []
    result = pytester.runpytest_subprocess("-p", PLUGIN, "-p", "no:cacheprovider", *flags)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.assert_outcomes()
    assert result.stderr.lines[-6:-1] == [
        "ERROR: keras-xla-guard: bad max_compilations marker(s); each takes (limit, *, fail_fast=False), "
        "limit an integer >= 0 or None, fail_fast True or False:",
        "test_markers.py::test_bad_limit: @pytest.mark.max_compilations(-1): `limit` must be an integer >= 0 "
        "or None. Received: limit=-1",
        "test_markers.py::test_truthy_fail_fast: @pytest.mark.max_compilations(2, fail_fast='no'): "
        "`fail_fast` must be True or False. Received: fail_fast='no'",
        "test_markers.py::test_two_limits: @pytest.mark.max_compilations(1, 2): it takes one positional "
        "argument, the limit, and the keyword fail_fast only",
        "test_markers.py::TestScoped::test_limit_as_a_keyword: @pytest.mark.max_compilations(limit=3): it "
        "takes one positional argument, the limit, and the keyword fail_fast only",
    ]
    assert "test_runs_first" not in result.stdout.str()


def test_importing_the_plugin_imports_neither_tensorflow_nor_keras():
    """`import keras_xla_guard.pytest_plugin` (what pytest does in every session) loads no framework."""
    code = (
        "import sys, keras_xla_guard.pytest_plugin\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'keras', 'tf_keras', 'jax')))\n"
        "print(sorted(m for m in sys.modules if m.startswith('keras_xla_guard')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.splitlines()
    assert out == ["[]", "['keras_xla_guard', 'keras_xla_guard._version', 'keras_xla_guard.pytest_plugin']"]


def test_a_session_that_uses_no_budget_imports_no_framework(pytester):
    """A real pytest process with the plugin loaded and tests that use neither marker nor fixture."""
    pytester.makepyfile(
        test_plain=textwrap.dedent("""
        import sys

        def test_nothing_heavy_is_imported():
            heavy = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras', 'jax')]
            assert heavy == []
    """)
    )
    result = pytester.runpytest_subprocess("-p", PLUGIN, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_plugin_is_a_pytest11_entry_point_named_after_its_module():
    """setup.cfg ships the plugin to pytest (`pytest11`), under the name `-p` would register it by."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    entries = dict(line.split(" = ") for line in cfg["options.entry_points"]["pytest11"].strip().splitlines())
    assert entries == {PLUGIN: PLUGIN}
