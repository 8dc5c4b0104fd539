"""Holding Ctrl-C off while a model's state is being changed and put back.

Python runs a signal's handler in the main thread between two bytecodes of
whatever runs there; the default SIGINT handler raises `KeyboardInterrupt`
at that point. Raised in the middle of a loop that writes variables back,
it leaves some written and some not; raised inside TensorFlow's own Python
code (tracing a function), it can leave TensorFlow's bookkeeping broken for
the rest of the process (`ag_ctx.ControlStatusCtx`'s stack, measured by
`benchmarks/stress_warmup_interrupt.py`).

`InterruptGate` takes over SIGINT and SIGTERM (when their handlers are
Python functions) for the length of a `with` block:

- until `hold()`, a signal is kept until the caller's next `check()`, a
  point where stopping is clean; a second signal before that point is
  passed on at once (the user insists: a hung read must stay
  interruptible);
- after `hold()`, every signal is kept and passed on, once, when the block
  ends;
- a signal that comes while a *shielded* function runs its own code (not a
  callee) is always kept, so that nothing can be raised between the start
  of a `finally` block and its `hold()` call.

With `keep_first=False` the gate lets signals through at once until
`hold()` (Ctrl-C stops the work as usual) and keeps only those that land in
a shielded frame: the form that spans a whole `fit` call, whose `finally`
then holds every signal while it puts the guard's state back. `held`
runs one function with every signal held (the profiler's start and stop).
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Iterable
from types import CodeType, FrameType, TracebackType
from typing import Any, ParamSpec, TypeVar

__all__ = ["InterruptGate", "held"]

_SIGNALS = ("SIGINT", "SIGTERM")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class InterruptGate:
    """Keeps SIGINT/SIGTERM until the next `check()`, and after `hold()` until the `with` block ends.

    Outside the main thread (where Python delivers no signal) it does nothing.

    Args:
        shield: Code objects of functions in whose own frames a signal is
            kept rather than passed on. Defaults to none (the gate's own
            methods are always shielded).
        keep_first: Keep a first signal until the next `check()` (a safe
            point). `False` passes every signal on at once until `hold()`,
            except one landing in a shielded frame, which waits for the
            next `check()` or the block's end. Defaults to `True`.

    Example:

    ```python
    with InterruptGate(shield=[warm.__code__]) as gate:
        try:
            for batch in batches:
                train_step(batch)
                gate.check()  # a Ctrl-C pressed during the step raises here
        finally:
            gate.hold()
            restore_all()
    # A Ctrl-C pressed during restore_all() raises KeyboardInterrupt here.
    ```
    """

    def __init__(self, shield: Iterable[CodeType] = (), *, keep_first: bool = True) -> None:
        own = (
            InterruptGate.hold,
            InterruptGate.check,
            InterruptGate._on_signal,
            InterruptGate._deliver,
            InterruptGate.__exit__,
        )
        self._shield = {*shield, *(f.__code__ for f in own)}
        self._previous: dict[int, Any] = {}
        self._pending: list[tuple[int, FrameType | None]] = []
        self._holding = False
        self._keep_first = keep_first
        self._closed = False

    def __enter__(self) -> InterruptGate:
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in _SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            handler = signal.getsignal(signum)
            # SIG_DFL / SIG_IGN / a handler set outside Python: nothing here raises.
            if callable(handler):
                self._previous[signum] = handler
                signal.signal(signum, self._on_signal)
        return self

    def hold(self) -> None:
        """Keeps every signal from now on until the `with` block ends."""
        self._holding = True

    def check(self) -> None:
        """Passes on a kept signal (a safe point to stop), unless holding."""
        if not self._holding and self._pending:
            self._deliver(None)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._holding = True
        for signum, handler in self._previous.items():
            # A handler someone installed inside the block stays; it may call ours, which then forwards.
            if signal.getsignal(signum) == self._on_signal:
                signal.signal(signum, handler)
        self._closed = True
        self._deliver(exc_type)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._closed:
            self._previous[signum](signum, frame)
            return
        shielded = frame is not None and frame.f_code in self._shield
        if self._holding or shielded or (self._keep_first and not self._pending):
            self._pending.append((signum, frame))
            return
        if not self._keep_first:
            self._previous[signum](signum, frame)
            return
        # A second signal before the next check(): passed on now, for both.
        self._pending.clear()
        self._previous[signum](signum, frame)

    def _deliver(self, leaving_with: type[BaseException] | None) -> None:
        """Passes each kept signal on once, to the handler it had before."""
        pending, self._pending = self._pending, []
        delivered: set[int] = set()
        for signum, frame in pending:
            if signum in delivered:
                continue
            delivered.add(signum)
            handler = self._previous[signum]
            # A KeyboardInterrupt already on its way out says what a second one would.
            if (
                leaving_with is not None
                and issubclass(leaving_with, KeyboardInterrupt)
                and handler is signal.default_int_handler
            ):
                continue
            handler(signum, frame)


def held(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Runs `function` with SIGINT/SIGTERM held; one that came meanwhile is passed on after it returns.

    For short steps that must not stop halfway (the profiler's start and
    stop with the bookkeeping that records them): a `KeyboardInterrupt`
    is raised once the step is done, from the caller's point of view as
    if the signal came just after it.
    """

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with InterruptGate() as gate:
            gate.hold()
            return function(*args, **kwargs)

    return wrapper
