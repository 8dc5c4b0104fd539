"""`max_compilations`: a budget of XLA compilations for a block of code, e.g. a test.

```python
with keras_xla_guard.max_compilations(2):
    model.fit(dataset, epochs=3)
```

No callback, no profiler: inside the block every `fit`, `evaluate` and
`predict` of a Keras model gets a signature-only guard (`_model_hooks.py`),
and every guard that runs in the block (that one, the user's own
`XlaGuardCallback`, a custom loop's `XlaGuard`) reports each compilation it
counts to the block's ledger (`runtime/budget.py`). On exit the block
raises `RecompilationLimitError` listing every compilation with what
changed and the fix, if there were more than allowed. docs/budgets.md.
"""

from __future__ import annotations

from types import TracebackType

from keras_xla_guard import _model_hooks
from keras_xla_guard._interrupts import InterruptGate
from keras_xla_guard.errors import CompilationsUnknownError, RecompilationLimitError
from keras_xla_guard.runtime.budget import BudgetCompilation, CompilationLedger, enter_ledger, leave_ledger

__all__ = ["BudgetCompilation", "CompilationBudget", "max_compilations"]


class CompilationBudget:
    """A budget of XLA compilations for a `with` block; made by `max_compilations`.

    While the block runs, each XLA compilation of a Keras model's `fit`,
    `evaluate` and `predict`, and of a custom loop's `XlaGuard`-watched
    step, run in the thread that entered it is counted with its reason, with
    no profiler. On TensorFlow it counts what the guard predicts from input
    signatures: one compilation per input signature new to a function Keras
    (or the loop) compiles with XLA; a function not compiled with XLA counts
    none. On JAX it counts the compilations of Keras' steps that JAX reports
    (`jax.monitoring`), each paired with the new input signature of its
    step, or listed as one no new signature caused; a program loaded from
    JAX's persistent compilation cache counts too (marked as loaded), so
    the verdict does not depend on a warm cache.

    Args:
        limit: Most compilations the block may cause; `None` only counts.
        fail_fast: Raise `RecompilationLimitError` from the step whose
            compilation goes over `limit` (PyTorch's
            `set_stance("fail_on_recompile")`, with the reason), instead of
            at the end of the block; on JAX once that step's batch is read
            (the next step, or the epoch's end for its last step). Defaults to `False`: the error at the
            end lists every compilation, so one run shows every cause.

    Raises:
        ValueError: If `limit` is not an int >= 0 or `None`.
    """

    def __init__(self, limit: int | None, *, fail_fast: bool = False) -> None:
        self._ledger = CompilationLedger(limit, fail_fast=fail_fast)
        self._entered = False
        self._hooked = True
        self._open = False

    @property
    def limit(self) -> int | None:
        """Most compilations allowed; `None` when the budget only counts."""
        return self._ledger.limit

    @property
    def fail_fast(self) -> bool:
        """Whether the compilation that goes over `limit` raises at once."""
        return self._ledger.fail_fast

    @property
    def compilations(self) -> tuple[BudgetCompilation, ...]:
        """Every compilation counted so far, in order, each with its reason."""
        return self._ledger.compilations

    @property
    def count(self) -> int | None:
        """How many compilations were counted; `None` when some could not be (see `unknown`)."""
        return None if self._ledger.unknown is not None else len(self._ledger.compilations)

    @property
    def unknown(self) -> str | None:
        """Why compilations in the block could not all be counted; `None` when they were."""
        return self._ledger.unknown

    @property
    def exceeded(self) -> bool:
        """Whether more compilations than `limit` were counted."""
        return self._ledger.exceeded

    def message(self) -> str:
        """Every compilation counted so far, with what changed, why and the fix."""
        return self._ledger.message()

    def check(self) -> None:
        """Raises if the budget is exceeded or could not count; the block's end calls it.

        Raises:
            RecompilationLimitError: If more compilations than `limit` were
                counted; the message lists each with its reason.
            CompilationsUnknownError: If compilations could not be counted
                (and those counted fit the budget).
        """
        # pytest shows the message, not this frame (the test's failure is the budget's verdict).
        __tracebackhide__ = True
        unknown = self._ledger.unknown
        if self._ledger.exceeded:
            more = f"\nMore may have happened uncounted: {unknown}." if unknown else ""
            raise RecompilationLimitError(self._ledger.message() + more)
        if unknown is not None:
            raise CompilationsUnknownError(
                f"keras-xla-guard: max_compilations({self.limit}) could not count the XLA compilations "
                f"inside it: {unknown}. A budget that cannot count does not pass (docs/budgets.md)."
            )

    def __enter__(self) -> CompilationBudget:
        if self._entered:
            raise RuntimeError("A CompilationBudget is entered once; make a new one with max_compilations().")
        self._entered = True
        try:
            # The guard the budget adds to each call (it registers itself with the hooks).
            import keras_xla_guard.callback  # noqa: F401
        except ImportError:
            # No Keras can run in this process (none installed, or its configured backend is
            # missing: Keras on TensorFlow in a JAX-only venv): only watched custom-loop steps count.
            self._hooked = False
        with InterruptGate() as gate:
            # A Ctrl-C here would leave Keras wrapped with no budget to unwrap it.
            gate.hold()
            if self._hooked:
                _model_hooks.acquire()
            enter_ledger(self._ledger)
            self._open = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # The block's own exception goes on unchanged; only a block that ended normally is checked.
        __tracebackhide__ = True
        self._close()
        if exc is None:
            self.check()

    def _close(self) -> None:
        """Stops counting and puts Keras back (the last budget open); never checks."""
        with InterruptGate() as gate:
            gate.hold()
            if self._open:
                self._open = False
                leave_ledger(self._ledger)
                if self._hooked:
                    _model_hooks.release()

    def __repr__(self) -> str:
        counted = self.count if self.count is not None else "unknown"
        return f"<CompilationBudget limit={self.limit} counted={counted}>"


def max_compilations(limit: int | None, *, fail_fast: bool = False) -> CompilationBudget:
    """A budget of XLA compilations for a `with` block, e.g. a test.

    Inside the block, no callback needed: each `fit`, `evaluate` and
    `predict` of a Keras model (Keras 3 and tf_keras) gets a signature-only
    guard (no profiler, nothing written; a guard the call already has
    reports instead), and a custom loop's `XlaGuard`-watched step reports
    itself. Each XLA compilation is counted with its function, epoch and
    step, its input signature, what changed against the closest earlier
    signature and the fix: predicted from new input signatures on
    TensorFlow, as JAX reports it on JAX (docs/budgets.md). Only calls in the thread that entered the block
    count; blocks nest (an outer block counts the inner ones' too).

    Args:
        limit: Most compilations the block may cause; `0` for none (e.g.
            a second `fit` on shapes the first one compiled), `None` to
            count only.
        fail_fast: Raise at the step whose compilation goes over `limit`
            instead of when the block ends. Defaults to `False`: the error
            at the end lists every compilation of the block, so one run
            shows every cause and the bucket advice covers every length.

    Returns:
        The `CompilationBudget`; `with` it. Its `compilations` and `count`
        stay readable after the block.

    Raises:
        ValueError: If `limit` is not an int >= 0 or `None`.

    Example:

    ```python
    import keras_xla_guard

    with keras_xla_guard.max_compilations(2):
        model.fit(dataset, epochs=3)
    # RecompilationLimitError on exit when more than 2 XLA compilations happened:
    #   1. train function, epoch 0, step 0: x['tokens']: int32[8,5], y: float32[8,1] ...
    ```
    """
    return CompilationBudget(limit, fail_fast=fail_fast)
