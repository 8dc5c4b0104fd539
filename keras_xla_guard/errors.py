"""Exceptions raised by keras-xla-guard.

Every error the package raises on purpose derives from `XlaGuardError`, so a
caller can catch the whole family with one clause.
"""

from __future__ import annotations

__all__ = [
    "XlaGuardError",
    "BackendError",
    "CompilationsUnknownError",
    "MissingDependencyError",
    "ProfilerBusyError",
    "ProfilerNotRunningError",
    "RecompilationLimitError",
    "RunFileError",
    "TraceError",
    "TraceNotFoundError",
    "TraceParseError",
    "TraceTooLargeError",
    "XlaGuardWarning",
]


class XlaGuardError(Exception):
    """Base class of every error raised by keras-xla-guard."""


class BackendError(XlaGuardError, RuntimeError):
    """Keras runs on a backend keras-xla-guard has no implementation for."""


class CompilationsUnknownError(XlaGuardError, RuntimeError):
    """A compilation budget (`max_compilations`) could not count the compilations inside it.

    The input signatures of a run inside the block could not be recorded,
    or a `fit`, `evaluate` or `predict` call could not be observed; the
    message says which and why. A budget that cannot count never passes.
    """


class MissingDependencyError(XlaGuardError, ImportError):
    """An optional dependency is missing, e.g. matplotlib for the HTML report (`html` extra)."""


class ProfilerBusyError(XlaGuardError):
    """Another profiler session is already running in this process."""


class ProfilerNotRunningError(XlaGuardError):
    """No profiler session is running to stop (a backend's stop found none).

    Raised by a `keras_xla_guard.backend` implementation to the profiler
    session, which turns it into a `failed` window; it never reaches training.
    """


class RecompilationLimitError(XlaGuardError, RuntimeError):
    """More XLA compilations happened than `max_compilations` allows.

    Raised by a guard with `on_violation="raise"` when one epoch goes over
    its `max_compilations` (it stops training on purpose), and by a
    compilation budget, `with keras_xla_guard.max_compilations(n):`, when
    the block goes over `n` (its message lists every compilation with what
    changed and the fix).
    """


class RunFileError(XlaGuardError, ValueError):
    """A run file (`xla_guard_reports.json`) cannot be read.

    Not JSON, nested or sized beyond any run file, of a newer layout, or a
    field of the wrong type; the message names the file and the field.
    """


class TraceError(XlaGuardError):
    """A trace file or directory cannot be analyzed."""


class TraceNotFoundError(TraceError, FileNotFoundError):
    """No `*.xplane.pb` trace exists at the given path."""


class TraceParseError(TraceError):
    """The file is not a readable XSpace protobuf (empty, truncated, garbage)."""


class TraceTooLargeError(TraceError):
    """The trace file is larger than the configured size cap."""


class XlaGuardWarning(UserWarning):
    """Something inside the guard failed; training goes on without it."""
