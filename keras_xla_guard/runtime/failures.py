"""A guard failure in the user's words: what failed, what it costs, the fix; one warning per run.

A failure that repeats (a full disk fails every epoch's trace and every
epoch's summaries) is still one cause: the engine warns about each
distinct failure once per run (`FailureLog`), and each later epoch's report
still says why it was not measured. The words name what the user sees (the
TensorBoard summaries, the run file, an epoch's profiling window), never
an internal hook or class.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable
from pathlib import Path

from keras_xla_guard.runtime.profiler import SessionLostError, StopTimeoutError

__all__ = [
    "FailureLog",
    "cause",
    "directory_fix",
    "hook_failure",
    "incomplete_reason",
    "sink_failure",
    "trace_failure",
]

# What the guard was doing when one of the engine's hooks failed.
_DOING = {
    "step_begin": "at a training step",
    "epoch_begin": "when an epoch began",
    "epoch_end": "when an epoch ended",
    "validation_begin": "when validation began",
    "_begin_run": "when training began",
    "_begin_call": "when an evaluate or predict call began",
    "call_end": "when an evaluate or predict call ended",
    "train_end": "when training ended",
}
# Words of errors that come from the file system, whatever the framework wraps them in
# (TensorFlow's ResourceExhaustedError, JAX's JaxRuntimeError: RESOURCE_EXHAUSTED).
_FILE_SYSTEM = (
    "no space left",
    "resource_exhausted",
    "permission denied",
    "read-only file system",
    "not a directory",
    "no such file or directory",
    "quota",
)


def doing(hook: str) -> str:
    """`"at a training step"`: when the guard's `hook` runs, in the user's words."""
    return _DOING.get(hook, "while following the training")


def cause(error: BaseException) -> str:
    """The error as the user reads it: its type and its first line."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def from_file_system(error: BaseException) -> bool:
    """Whether `error` is about a file or directory (full, read-only, missing)."""
    return isinstance(error, OSError) or any(word in str(error).lower() for word in _FILE_SYSTEM)


def directory_fix(directory: str | os.PathLike[str]) -> str:
    """The fix for a directory the guard cannot write."""
    return (
        f"make {os.fspath(directory)!r} a writable local directory with free space, or pass another log_dir"
    )


def sink_words(sink: object) -> str:
    """What a sink writes, as the user knows it: its `what`, else its class name."""
    what = getattr(sink, "what", None)
    return what if isinstance(what, str) else f"the output {type(sink).__name__}"


def sink_directory(sink: object) -> Path | None:
    """The directory a sink writes into, where it has one."""
    directory = getattr(sink, "directory", None) or getattr(sink, "log_dir", None)
    return Path(directory) if isinstance(directory, (str, os.PathLike)) else None


def hook_failure(hook: str, error: BaseException, epoch: int | None, directory: Path) -> tuple[str, str]:
    """A guard hook that raised: `(reason for the epoch's report, warning)`."""
    reason = f"failed {doing(hook)}: {cause(error)}"
    cost = (
        f"epoch {epoch} is not measured (its report says failed)" if epoch is not None else "nothing is lost"
    )
    fix = (
        directory_fix(directory)
        if from_file_system(error)
        else "this is a keras-xla-guard bug: please report it with this warning"
    )
    return reason, f"{reason}: {cost}. Training continues. To fix: {fix}."


def trace_failure(epoch: int, error: BaseException, directory: Path) -> tuple[str, str, Hashable]:
    """A window whose trace could not be had: `(reason for its report, warning, what kind of failure)`.

    The kind is the error's type for the guard's own errors (the session
    someone else stopped, a stop that did not finish), else that writing
    the trace failed, with the error's type.
    """
    if isinstance(error, (SessionLostError, StopTimeoutError)):
        reason, fix, kind = str(error), "", type(error).__name__
    else:
        reason = f"writing the trace failed: {cause(error)}"
        fix = f" To fix: {directory_fix(directory)}."
        kind = f"trace {type(error).__name__}"
    return reason, f"epoch {epoch} is not measured: {reason}. Training continues.{fix}", kind


def incomplete_reason(steps: int, error: BaseException | None) -> str:
    """Why a window training left is no measurement, naming what stopped it."""
    said = ""
    if error is not None:
        # The first line says what; one ending in ":" only heads a trace.
        first = next(iter(str(error).strip().splitlines()), "").strip()
        said = f" ({type(error).__name__}{f': {first[:200]}' if first and not first.endswith(':') else ''})"
    return (
        f"the profiling window did not complete: training stopped inside it, {steps} step(s) in{said}; "
        "its partial trace is not a measurement"
    )


def sink_failure(sink: object, method: str, error: BaseException) -> str:
    """An output that could not be written: the warning."""
    directory = sink_directory(sink)
    if not isinstance(getattr(sink, "what", None), str):
        fix = f"{type(sink).__name__}.{method} raised it: fix that sink"
    elif directory is not None and from_file_system(error):
        fix = directory_fix(directory)
    else:
        fix = "this is a keras-xla-guard bug: please report it with this warning"
    return (
        f"could not write {sink_words(sink)}: {cause(error)}. This run's figures are missing there "
        f"(guard.reports still has them). Training continues. To fix: {fix}."
    )


class FailureLog:
    """Which failures a run has warned about, so that each distinct one is said once.

    Example:

    ```python
    failures = FailureLog()
    if failures.first(("trace", "OSError")):
        warnings.warn("...")
    ```
    """

    def __init__(self) -> None:
        self._said: set[Hashable] = set()
        self._lock = threading.Lock()

    def reset(self) -> None:
        """A new run: every failure may be said again."""
        with self._lock:
            self._said.clear()

    def first(self, key: Hashable) -> bool:
        """Whether the failure `key` is new to this run (then it counts as said)."""
        with self._lock:
            if key in self._said:
                return False
            self._said.add(key)
            return True
