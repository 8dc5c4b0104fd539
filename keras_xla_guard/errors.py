"""Exceptions raised by keras-xla-guard.

Every error the package raises on purpose derives from `XlaGuardError`, so a
caller can catch the whole family with one clause.
"""

from __future__ import annotations

__all__ = [
    "XlaGuardError",
    "BackendError",
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
    """An epoch caused more XLA compilations than `max_compilations` allows.

    Raised only with `on_violation="raise"`; it stops training on purpose.
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
