"""pytest plugin: a recompilation budget per test, `@pytest.mark.max_compilations(n)`.

Installed as a `pytest11` entry point, so pytest loads it in every session
of every project that installs keras-xla-guard. Importing it imports
neither TensorFlow nor Keras (only pytest, which is running, and the
package's version table); the budget is imported when a test uses the
marker or the fixture. docs/budgets.md.

- `@pytest.mark.max_compilations(2)` (or `(2, fail_fast=True)`): the test
  fails with `RecompilationLimitError`, listing every compilation and its
  fix, when its body causes more than 2 XLA compilations; and with
  `CompilationsUnknownError` when they could not be counted.
- The `xla_compilations` fixture: the test's `CompilationBudget` (the
  marker's, or one that only counts), to assert on `count` and
  `compilations`.

Only the test function's body is counted, not its fixtures' setup: a
fixture that trains a model does so before the budget opens. A marker with
bad arguments (`max_compilations(-1)`, `fail_fast="no"`, a second
positional) stops the session at collection, naming each test and the
value, before any test runs.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

__all__ = [
    "FIXTURE",
    "MARKER",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_pyfunc_call",
    "xla_compilations",
]

MARKER = "max_compilations"
FIXTURE = "xla_compilations"
_BUDGET = pytest.StashKey[Any]()


def pytest_configure(config: pytest.Config) -> None:
    """Registers the marker (so `--strict-markers` knows it)."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(limit, *, fail_fast=False): fail the test when its body causes more than `limit` "
        "XLA compilations, listing each with its reason (keras-xla-guard, docs/budgets.md)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Checks every `max_compilations` marker once collected: a bad one stops the session now.

    Raises:
        pytest.UsageError: Naming each test whose marker has bad arguments,
            and why, before any test runs.
    """
    from keras_xla_guard._checks import check_bool, check_int

    errors = []
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is None:
            continue
        # The budget's own checks, without importing it (or a framework) at collection.
        extra = sorted(set(marker.kwargs) - {"fail_fast"})
        try:
            if len(marker.args) != 1 or extra:
                raise ValueError(
                    "it takes one positional argument, the limit, and the keyword fail_fast only"
                )
            check_int("limit", marker.args[0], minimum=0, allow_none=True)
            check_bool("fail_fast", marker.kwargs.get("fail_fast", False))
        except ValueError as e:
            errors.append(f"{item.nodeid}: @pytest.mark.{MARKER}{_call_text(marker)}: {e}")
    if errors:
        raise pytest.UsageError(
            f"keras-xla-guard: bad {MARKER} marker(s); each takes (limit, *, fail_fast=False), limit an "
            "integer >= 0 or None, fail_fast True or False:\n" + "\n".join(errors)
        )


def _call_text(marker: pytest.Mark) -> str:
    args = [repr(a) for a in marker.args] + [f"{k}={v!r}" for k, v in marker.kwargs.items()]
    return f"({', '.join(args)})"


def _budget_of(item: pytest.Item) -> Any:
    """The test's `CompilationBudget`: made once, from its marker or counting only."""
    budget = item.stash.get(_BUDGET, None)
    if budget is None:
        from keras_xla_guard.budget import max_compilations

        marker = item.get_closest_marker(MARKER)
        if marker is None:
            budget = max_compilations(None)
        else:
            budget = max_compilations(*marker.args, **marker.kwargs)
        item.stash[_BUDGET] = budget
    return budget


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, Any, None]:
    """Runs a test that has the marker or the fixture inside its budget."""
    __tracebackhide__ = True
    marked = pyfuncitem.get_closest_marker(MARKER) is not None
    if not marked and FIXTURE not in pyfuncitem.fixturenames:
        yield
        return
    budget = _budget_of(pyfuncitem)
    budget.__enter__()
    outcome = yield
    budget._close()
    if not marked or outcome.excinfo is not None:
        return
    try:
        budget.check()
    except Exception as error:  # handed to pytest as the test's failure
        force = getattr(outcome, "force_exception", None)
        if force is None:
            # pluggy < 1.1: an exception raised here is the call's.
            raise
        force(error)


@pytest.fixture(name=FIXTURE)
def xla_compilations(request: pytest.FixtureRequest) -> Any:
    """The test's `CompilationBudget`: read `count` and `compilations` in the test.

    With `@pytest.mark.max_compilations(n)` it is that budget; without, one
    that only counts (`limit=None`). It counts the test function's body.

    Example:

    ```python
    def test_fit_compiles_once_per_bucket(xla_compilations):
        model.fit(bucketed_dataset, epochs=2)
        assert xla_compilations.count == 3
    ```
    """
    return _budget_of(request.node)
