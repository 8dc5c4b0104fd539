"""Scoped wrappers of Keras models' `fit`, `evaluate` and `predict`: budgets and guards' exits.

Keras calls no callback when an exception (a callback's, a `KeyboardInterrupt`,
a `SystemExit`) leaves `fit` outside its steps: measured on Keras 3 on
TensorFlow and on JAX (`tests/test_exits.py`, `tests/on_jax/test_exits.py`),
an exception from a callback's `on_epoch_end` is followed by no
`on_train_end`. So while a guard can run or a budget is open, the Keras
model classes (`keras.Model`, and `tf_keras.Model` once tf_keras is in
use) carry a wrapper of each public entry point, and the guard running in
a call registers (`on_exit`) what must happen when the call ends, however
it ends: the wrapper's `finally` runs it with SIGINT/SIGTERM held
(`_interrupts.InterruptGate`), so the profiler is stopped and Keras' own
functions are put back before a Ctrl-C goes on up. Outside that `finally`
the wrapper lets signals through as Keras would.

Budgets: a compilation budget must see the fits inside it although the
user passes no callback. A call from a thread with an open budget gets a
signature-only `XlaGuardCallback` (no profiler, no files, no console; one
per model, reused by its later calls so that a function Keras keeps
compiled is not counted again) appended to its `callbacks`, unless one of
the user's is already there; a call from any other thread goes straight to
Keras. `train_on_batch`, `test_on_batch` and `predict_on_batch` take no
callbacks, so nothing can read their batches: while a budget is open, a
call of one on a model that compiles with XLA leaves the budgets' count
unknown (they then cannot pass) instead of a silent 0.

The `*_on_batch` wrappers are removed when the last budget closes. The
entry points stay wrapped from the import of `XlaGuardCallback` on: a
guard made inline, `model.fit(..., callbacks=[XlaGuardCallback()])`, is
made after `model.fit` was looked up, so wrapping at its creation would
miss the very call it guards; with no guard and no budget in a call the
wrapper only passes it on. A class attribute someone else set meanwhile is
left alone. These are public Keras methods: nothing here is a private
internal.
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
from types import CodeType, FunctionType
from typing import Any, cast

from keras_xla_guard._interrupts import InterruptGate
from keras_xla_guard.errors import RecompilationLimitError
from keras_xla_guard.runtime import budget

__all__ = ["acquire", "on_exit", "register_guard", "release", "wrapped_classes"]

_ENTRY_POINTS = ("fit", "evaluate", "predict")
# They take no callbacks: a budget can only say that it missed them.
_UNOBSERVED = ("train_on_batch", "test_on_batch", "predict_on_batch")
# A finalizer may run on any thread, inside a collection triggered while the lock is held.
_lock = threading.RLock()
_users = 0
_holders = 0
_undo: dict[tuple[type, str], Callable[[], None]] = {}
_wrapped: list[type] = []
# Model -> its budget guard, kept while the model lives: a later call of the
# model, in this budget or the next, reuses the engine that saw its functions.
_guards: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
# XlaGuardCallback, once its module registered it (it imports this one).
_guard_type: Any = None
# Each thread's running fit/evaluate/predict calls, innermost last.
_calls = threading.local()
# The wrapper's own code, where a signal waits for its `finally` to finish (see `_interrupts`).
_SHIELDED: set[CodeType] = set()


class _Call:
    """One running `fit`, `evaluate` or `predict` of a model, and what must happen when it ends."""

    def __init__(self, model: Any, name: str) -> None:
        self.model = model
        self.name = name
        self.error: BaseException | None = None
        self.exits: list[Callable[[BaseException | None], None]] = []
        # Entered when a guard registers its exit, left after the exits ran.
        self.gate: InterruptGate | None = None


def acquire() -> None:
    """A budget opens: wraps the model classes' entry points, and the `*_on_batch` methods."""
    global _users
    with _lock:
        _users += 1
        _sync()


def release() -> None:
    """A budget closes: the last one puts every method back that no live guard needs."""
    global _users
    with _lock:
        _users -= 1
        _sync()


def register_guard(guard_type: type) -> None:
    """The Keras callback's class: the guard a budget adds to a call, and what tells it when calls end.

    Registered when `XlaGuardCallback`'s module is imported (budgets import
    it first); the entry points stay wrapped from then on, while the class
    lives.
    """
    global _holders, _guard_type
    with _lock:
        _guard_type = guard_type
        _holders += 1
        _sync()
    weakref.finalize(guard_type, _let_go)


def _let_go() -> None:
    global _holders
    with _lock:
        _holders -= 1
        _sync()


def on_exit(model: Any, name: str, callback: Callable[[BaseException | None], None]) -> bool:
    """Runs `callback(error)` when the innermost running `model.<name>()` of this thread ends.

    `error` is the exception leaving the call, `None` when it returns. The
    callback runs with signals held and must not raise.

    Args:
        model: The model whose call it is.
        name: `"fit"`, `"evaluate"` or `"predict"`.
        callback: What to do then.

    Returns:
        Whether such a call is running (else nothing will call `callback`:
        the model's class is not wrapped).
    """
    for call in reversed(getattr(_calls, "stack", ())):
        if call.model is model and call.name == name:
            if call.gate is None:
                # From now to the call's end signals pass at once, except in the wrapper's own
                # frame, where one waits for the exits (a call with no guard pays none of this).
                call.gate = InterruptGate(shield=_SHIELDED, keep_first=False).__enter__()
            call.exits.append(callback)
            return True
    with _lock:
        # A Keras imported since (tf_keras): its class is wrapped for the next call.
        if _users or _holders:
            _sync()
    return False


def wrapped_classes() -> tuple[type, ...]:
    """The model classes whose entry points are wrapped now."""
    with _lock:
        return tuple(_wrapped)


def _sync() -> None:
    """Wraps what the open budgets and live guards need, and puts back the rest (with `_lock` held)."""
    if _users == 0 and _holders == 0:
        _unwrap()
        return
    wanted = (*_ENTRY_POINTS, *(_UNOBSERVED if _users else ()))
    try:
        for cls in _model_classes():
            for name in wanted:
                if (cls, name) not in _undo:
                    _undo[cls, name] = _wrap(cls, name)
            if cls not in _wrapped:
                _wrapped.append(cls)
    except BaseException:
        _unwrap()
        raise
    for key in [key for key in _undo if key[1] not in wanted]:
        _undo.pop(key)()


def _unwrap() -> None:
    undo = list(_undo.values())
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
            call = _Call(self, name)
            stack = _calls.__dict__.setdefault("stack", [])
            stack.append(call)
            guard = None
            try:
                if budget.active_ledgers():
                    args, kwargs, guard = _with_guard(self, name, signature, args, kwargs)
                return original(self, *args, **kwargs)
            except RecompilationLimitError as stop:
                call.error = stop
                # A budget stopped the call on purpose (fail_fast): its message is the
                # whole story, and the ~20 frames from fit down to the budget (Keras'
                # loop, the guard's feed) are machinery. pytest hides this frame too.
                __tracebackhide__ = True
                raise stop.with_traceback(None) from None  # a budget stopped it: the message says why
            except BaseException as e:
                call.error = e
                raise
            finally:
                # Once a guard registered (`on_exit`), a signal landing here was kept by its gate.
                if call.gate is not None:
                    call.gate.hold()
                _end(call, stack, guard)

        # functools.wraps types it as a wrapper; it is this function, with this code.
        _SHIELDED.add(cast(FunctionType, entry).__code__)

    setattr(cls, name, entry)

    def undo() -> None:
        if vars(cls).get(name) is not entry:
            return
        if own:
            setattr(cls, name, before)
        else:
            delattr(cls, name)

    return undo


def _end(call: _Call, stack: list[_Call], guard: Any) -> None:
    """A call ended: its exits run, newest first (the guards' cleanup), then a signal kept meanwhile
    goes on up (the call's own exception, if any, does not change)."""
    if call in stack:
        stack.remove(call)
    try:
        for exit_ in reversed(call.exits):
            try:
                exit_(call.error)
            except Exception:  # noqa: BLE001 - an exit must never replace the call's own outcome
                pass
        if guard is not None:
            # The guard outlives the call (a later call of the model reuses it), not the model.
            guard.set_model(None)
    finally:
        if call.gate is not None:
            error = call.error
            call.gate.__exit__(type(error) if error is not None else None, error, None)


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
    try:
        bound = signature.bind(model, *args, **kwargs)
    except TypeError:
        # Keras raises its own error for these arguments.
        return args, kwargs, None
    try:
        callbacks = bound.arguments.get("callbacks")
        # Keras' CallbackList keeps the callbacks it was given in `callbacks`.
        listed = list(getattr(callbacks, "callbacks", callbacks) or ())
        if any(isinstance(c, _guard_type) for c in listed):
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
    with _lock:
        guard = _guards.get(model)
        if guard is not None:
            return guard
        guard = _guards[model] = _guard_type(
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
