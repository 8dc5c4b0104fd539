"""Scoped wrappers of Keras models' `fit`, `evaluate` and `predict`, for compilation budgets.

A compilation budget must see the fits inside it although the user passes
no callback. While at least one budget is open (in any thread), the Keras
model classes (`keras.Model`, and `tf_keras.Model` once tf_keras is in use)
carry a wrapper of each public entry point. A call from a thread with an
open budget gets a signature-only `XlaGuardCallback` (no profiler, no
files, no console; one per model, reused by its later calls so that a
function Keras keeps compiled is not counted again) appended to its
`callbacks`, unless one of the user's is already there; a call from any
other thread goes straight to Keras. `train_on_batch`, `test_on_batch` and
`predict_on_batch` take no callbacks, so nothing can read their batches: a
call of one on a model that compiles with XLA leaves the budgets' count
unknown (they then cannot pass) instead of a silent 0. The wrappers are
removed when the last budget closes, and a class attribute someone else
set meanwhile is left alone.

These are public Keras methods: nothing here is a private internal.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from keras_xla_guard.errors import RecompilationLimitError
from keras_xla_guard.runtime import budget

__all__ = ["acquire", "release", "wrapped_classes"]

_ENTRY_POINTS = ("fit", "evaluate", "predict")
# They take no callbacks: a budget can only say that it missed them.
_UNOBSERVED = ("train_on_batch", "test_on_batch", "predict_on_batch")
_lock = threading.Lock()
_users = 0
_undo: list[Callable[[], None]] = []
_wrapped: list[type] = []
# Model -> its budget guard, kept while the model lives: a later call of the
# model, in this budget or the next, reuses the engine that saw its functions.
_guards: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def acquire() -> None:
    """A budget opens: wraps the model classes' entry points if no budget had."""
    global _users
    with _lock:
        if _users == 0:
            try:
                for cls in _model_classes():
                    for name in (*_ENTRY_POINTS, *_UNOBSERVED):
                        _undo.append(_wrap(cls, name))
                    _wrapped.append(cls)
            except BaseException:
                _unwrap()
                raise
        _users += 1


def release() -> None:
    """A budget closes: the last one puts every entry point back."""
    global _users
    with _lock:
        _users -= 1
        if _users == 0:
            _unwrap()


def wrapped_classes() -> tuple[type, ...]:
    """The model classes whose entry points are wrapped now."""
    with _lock:
        return tuple(_wrapped)


def _unwrap() -> None:
    undo = list(_undo)
    _undo.clear()
    _wrapped.clear()
    for step in reversed(undo):
        step()


def _model_classes() -> list[type]:
    """Keras 3's `Model` (importing Keras), and tf_keras' when tf_keras is in use."""
    classes = []
    if "keras" in sys.modules or importlib.util.find_spec("keras") is not None:
        classes.append(importlib.import_module("keras").Model)
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes")
    if "tf_keras" in sys.modules or (legacy and importlib.util.find_spec("tf_keras") is not None):
        model = importlib.import_module("tf_keras").Model
        if model not in classes:
            classes.append(model)
    return classes


def _wrap(cls: type, name: str) -> Callable[[], None]:
    """Wraps `cls.<name>`; returns what puts it back."""
    own = name in vars(cls)
    before = vars(cls).get(name)
    original = getattr(cls, name)

    if name in _UNOBSERVED:

        @functools.wraps(original)
        def entry(self: Any, *args: Any, **kwargs: Any) -> Any:
            if budget.active_ledgers():
                _report_unobserved(self, name)
            return original(self, *args, **kwargs)

    else:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def entry(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not budget.active_ledgers():
                return original(self, *args, **kwargs)
            args, kwargs, guard = _with_guard(self, name, signature, args, kwargs)
            try:
                return original(self, *args, **kwargs)
            except RecompilationLimitError as stop:
                # A budget stopped the call on purpose (fail_fast): its message is the
                # whole story, and the ~20 frames from fit down to the budget (Keras'
                # loop, the guard's feed) are machinery. pytest hides this frame too.
                __tracebackhide__ = True
                raise stop.with_traceback(None) from None  # a budget stopped it: the message says why
            finally:
                if guard is not None:
                    # The guard outlives the call (a later call of the model reuses it), not the model.
                    guard.set_model(None)

    setattr(cls, name, entry)

    def undo() -> None:
        if vars(cls).get(name) is not entry:
            return
        if own:
            setattr(cls, name, before)
        else:
            delattr(cls, name)

    return undo


def _with_guard(
    model: Any, name: str, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
    """The call's arguments with the budget's guard among its callbacks, and that guard.

    The guard is `None` when the call already has an `XlaGuardCallback`
    (the user's, or the budget's own when `fit` runs its validation through
    `evaluate` with its `CallbackList`). Never raises: a call the budget
    cannot observe goes on unchanged, and the open budgets are told why
    (they then cannot pass).
    """
    from keras_xla_guard.callback import XlaGuardCallback

    try:
        bound = signature.bind(model, *args, **kwargs)
    except TypeError:
        # Keras raises its own error for these arguments.
        return args, kwargs, None
    try:
        callbacks = bound.arguments.get("callbacks")
        # Keras' CallbackList keeps the callbacks it was given in `callbacks`.
        listed = list(getattr(callbacks, "callbacks", callbacks) or ())
        if any(isinstance(c, XlaGuardCallback) for c in listed):
            # That guard reports to the budget itself.
            return args, kwargs, None
        if callbacks is not None and not isinstance(callbacks, (list, tuple)):
            raise TypeError(f"its callbacks are a {type(callbacks).__name__}; pass a list")
        guard = _guard_for(model)
        bound.arguments["callbacks"] = [*listed, guard]
    except Exception as e:  # noqa: BLE001 - the user's call must go on
        budget.report_unavailable(
            f"{type(model).__name__}.{name}() could not be observed: {type(e).__name__}: {e}"
        )
        return args, kwargs, None
    return bound.args[1:], bound.kwargs, guard


def _report_unobserved(model: Any, name: str) -> None:
    """Tells the open budgets that `model.<name>()` may compile with XLA uncounted.

    Without XLA (no `jit_compile`, no auto-clustering) it compiles nothing,
    and 0 is the true count. Never raises: the user's call must go on.
    """
    from keras_xla_guard import backend

    try:
        mode = backend.select(model).xla_mode(getattr(model, "jit_compile", False) is True)
    except Exception:  # noqa: BLE001 - a model no backend runs: say it was missed
        mode = "unknown"
    if mode is None:
        return
    budget.report_unavailable(
        f"{type(model).__name__}.{name}() was called, which takes no callbacks, so no guard could read "
        "its batches; count with fit/evaluate/predict, or a custom loop's XlaGuard-watched step"
    )


def _guard_for(model: Any) -> Any:
    """The model's signature-only guard: input signatures only, nothing written."""
    from keras_xla_guard.callback import XlaGuardCallback

    with _lock:
        guard = _guards.get(model)
        if guard is not None:
            return guard
        guard = _guards[model] = XlaGuardCallback(
            profile_epochs=(), write_summaries=False, verbose=0, max_compilations=None
        )
    _note_built_functions(model, guard)
    return guard


def _note_built_functions(model: Any, guard: Any) -> None:
    """Tells the budgets which of the model's functions Keras built before its guard existed.

    Their compilations until the model is compiled again (a new function)
    may have happened before the budget: uncertain, never counted as sure.
    """
    from keras_xla_guard import seam
    from keras_xla_guard.signatures.tracker import FUNCTIONS

    model_ref = weakref.ref(model)
    name = type(model).__name__
    for function in FUNCTIONS:
        program = seam.keras_function(model, function)
        if program is None:
            continue
        program_ref = _ref(program)

        def reason(function: str = function, program_ref: Callable[[], Any] = program_ref) -> str | None:
            current = model_ref()
            if current is None or seam.keras_function(current, function) is not program_ref():
                return None
            return (
                f"{name}'s {function} function was built before a budget first saw the model (by a call "
                "outside any budget: fit, evaluate, predict, warm_up, ...), so which signatures it had "
                "compiled is unknown; build the model inside the block, or open a budget around its first "
                "call"
            )

        budget.note_unseen_history(guard.engine, function, reason)


def _ref(value: Any) -> Callable[[], Any]:
    """A weak reference to `value` where it allows one."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value
