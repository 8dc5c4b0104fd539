"""Thin, safe control of the process-wide profiler, whichever backend runs it.

TensorFlow (and JAX) allow one profiler session per process; the backend
(`keras_xla_guard.backend`) starts and stops it, this module decides who may.
One session is a guard's at a time, and it knows its owner (the guard that
started it) and the thread it started on:

- a guard never stops a session it did not start: while another guard's
  session runs, `start()` raises `ProfilerBusyError` naming it, and the
  engine reports that window `skipped`; a profiler the user or
  `keras.callbacks.TensorBoard(profile_batch=...)` started is refused the
  same way by the backend;
- a session is *stale*, and `stop_stale_session()` stops it with a
  warning, only when its run is provably over: its own stop was
  interrupted (e.g. Ctrl-C inside TensorFlow's stop), the thread that
  started it has ended, or its owner has been garbage-collected. A live
  guard's open window is never stale, on any thread;
- a session someone else stopped before its owner did never reads as a
  measurement: the owner's `stop()` raises `SessionLostError`.

The backend's stop (which writes the trace) runs on a helper thread that
finishes it whatever the caller does: a signal is only ever handled on the
main thread, so no `KeyboardInterrupt` can land inside the framework's own
stop and leave its profiler half-stopped, and the caller waits at most
`STOP_TIMEOUT_S` (a stop still running then goes on in the background and
frees the profiler when it ends; meanwhile the session counts as running).

Each session makes the backend write into a private staging directory and
then moves the run into `<log_dir>/plugins/profile/` under a name no other
run has. The profiler names runs by the second they start in, so two windows
in one second would otherwise share (and overwrite) one directory; and a
trace appearing in the staging directory before we stop tells us that
someone else stopped our session, so the profiler then running is not ours.
"""

from __future__ import annotations

import atexit
import os
import shutil
import threading
import uuid
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keras_xla_guard.errors import ProfilerBusyError, ProfilerNotRunningError, XlaGuardError, XlaGuardWarning
from keras_xla_guard.trace.xplane import TRACE_SUFFIX

if TYPE_CHECKING:
    from keras_xla_guard.backend import Backend

__all__ = [
    "STAGING_DIR",
    "STOP_TIMEOUT_S",
    "ProfilerSession",
    "SessionLostError",
    "StopTimeoutError",
    "stop_stale_session",
]

_lock = threading.Lock()
_active: ProfilerSession | None = None
# Prefix of each session's own staging directory, directly under the log dir
# so that moving a finished run is a rename on one file system. Never a
# shared parent: processes sharing a log dir would remove it under each
# other's feet (one's last session ending while another creates its own).
STAGING_DIR = ".xla_guard_staging"
# Longest wait for the backend's stop: the export of a large trace takes seconds
# (0.7 s of a 0.9 s window for a tiny JAX fit), a hung disk forever.
STOP_TIMEOUT_S = 120.0


class SessionLostError(XlaGuardError):
    """Our profiler session was stopped by someone else before we stopped it."""


class StopTimeoutError(XlaGuardError):
    """The backend's stop did not finish in time; it goes on in the background."""


def _profile_root(log_dir: Path) -> Path:
    return log_dir / "plugins" / "profile"


def _run_dirs(log_dir: Path) -> list[Path]:
    root = _profile_root(log_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir())


class ProfilerSession:
    """One start/stop of the profiler writing into `log_dir`.

    Args:
        log_dir: Directory the trace goes to, in TensorBoard's layout
            (`<log_dir>/plugins/profile/<run>/<host>.xplane.pb`).
        run_name: Suffix of the run directory's name, after the profiler's
            timestamp (`<timestamp>_<run_name>`). A run of the same name
            already there gets a counter (`_2`, `_3`, ...) appended, so
            every session has its own directory. Defaults to `"run"`.
        backend: The `Backend` whose profiler runs. Defaults to `None`:
            TensorFlow's (`keras_xla_guard.backend.get("tensorflow")`).
        owner: The guard this session belongs to (held weakly): while it
            lives and the thread that started the session runs, nobody else
            stops the session. Defaults to `None` (only the thread counts).

    Example:

    ```python
    session = ProfilerSession("logs/xla_guard", run_name="epoch1")
    session.start()
    ...  # the steps to measure
    trace_files = session.stop()
    ```
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        run_name: str = "run",
        *,
        backend: Backend | None = None,
        owner: Any = None,
    ) -> None:
        if backend is None:
            from keras_xla_guard.backend import get

            backend = get("tensorflow")
        self.backend = backend
        self.log_dir = Path(log_dir)
        self.run_name = run_name
        self.running = False
        self.trace_files: list[Path] = []
        self._owner = None if owner is None else weakref.ref(owner)
        self._thread: threading.Thread | None = None
        self._stop_begun = False
        self._stopper: _Stopper | None = None
        # Why someone other than the owner stopped this session, if they did.
        self._stopped_by: str | None = None
        self._staging = self.log_dir / f"{STAGING_DIR}-{run_name}-{uuid.uuid4().hex[:12]}"

    def start(self) -> None:
        """Starts the profiler.

        Raises:
            ProfilerBusyError: If another profiler session is running:
                another guard's (named by its log dir and thread), the
                user's or another callback's.
        """
        global _active
        with _lock:
            if _active is not None and _active.running:
                raise ProfilerBusyError(
                    "another keras-xla-guard profiling window is running in this process "
                    f"({_active.holder}); one profiler runs at a time"
                )
            self._staging.mkdir(parents=True, exist_ok=True)
            try:
                self.backend.start_trace(str(self._staging))
            except BaseException:
                self._discard_staging()
                raise
            self.running = True
            self._stop_begun = False
            self._stopped_by = None
            self._thread = threading.current_thread()
            _active = self

    @property
    def holder(self) -> str:
        """Who holds this session, for messages: its log dir and the thread it started on."""
        thread = self._thread.name if self._thread is not None else "none"
        return f"log_dir={os.fspath(self.log_dir)!r}, started on thread {thread!r}"

    def stale_reason(self) -> str | None:
        """Why this running session's run is over, or `None` while its run may go on.

        Returns:
            `"its stop was interrupted"`, `"the thread that started it (...)
            has ended"` or `"the guard that started it is gone"`; `None` when
            none holds (a live guard's open window).
        """
        if not self.running:
            return None
        if self._stop_begun:
            return "its stop was interrupted"
        if self._thread is not None and not self._thread.is_alive():
            return f"the thread that started it ({self._thread.name!r}) has ended"
        if self._owner is not None and self._owner() is None:
            return "the guard that started it is gone"
        return None

    def stop(self, timeout: float | None = STOP_TIMEOUT_S) -> list[Path]:
        """Stops the profiler and returns the trace files it wrote.

        The backend's stop runs on a helper thread (see the module
        docstring), which frees the profiler even if the caller stops
        waiting. If the backend's stop itself raises something other than
        an `Exception`, the session stays marked running, so a later
        `stop()` or `stop_stale_session()` tries again.

        Args:
            timeout: Seconds to wait for the backend's stop. Defaults to
                `STOP_TIMEOUT_S`; `None` waits as long as it takes.

        Returns:
            The new `.xplane.pb` files (one per host), possibly empty if
            the profiler wrote nothing.

        Raises:
            SessionLostError: If someone else stopped this session (the
                profiler running now, if any, is left alone), including
                `stop_stale_session()` before the window ended: its trace
                does not cover the window.
            StopTimeoutError: If the backend's stop took longer than
                `timeout`; it finishes in the background.
            Exception: What the backend raised when writing the trace failed
                (e.g. a full disk); the backend's profiler is free then.
        """
        with _lock:
            if not self.running:
                if self._stopped_by is not None:
                    raise SessionLostError(
                        f"the profiler session was {self._stopped_by} before the window "
                        "ended, so its trace does not cover the window's steps"
                    )
                return self.trace_files
            stopper = self._stopper
            if stopper is None or stopper.finished:
                # A trace already staged is our session's, written by someone
                # else's stop() - unless our own earlier stop() wrote it and was
                # interrupted before the backend forgot the session.
                interrupted = self._stop_begun
                if not interrupted and self._staged_runs():
                    raise self._lost()
                self._stop_begun = True
                stopper = self._stopper = _Stopper(self, interrupted)
                stopper.start()
        return stopper.result(timeout)

    def _stop_for_another(self, why: str) -> None:
        """Stops a stale session on behalf of whoever needs the profiler.

        A window still open (its owner never began stopping it) is marked,
        so the owner's own `stop()` reports it lost instead of measured.
        """
        if not self._stop_begun:
            self._stopped_by = f"stopped by keras-xla-guard as stale ({why})"
        self.stop()

    def _lost(self) -> SessionLostError:
        self._forget()
        self._discard_staging()
        return SessionLostError(
            "the profiler session was stopped by someone else inside the window "
            f"(e.g. {self.backend.stop_call} in another callback); the profiler "
            "running now, if any, is not ours and was left alone"
        )

    def _forget(self) -> None:
        global _active
        self.running = False
        if _active is self:
            _active = None

    def _staged_runs(self) -> list[Path]:
        return [run for run in _run_dirs(self._staging) if any(run.glob("*" + TRACE_SUFFIX))]

    def _publish(self) -> list[Path]:
        """Moves the staged run(s) to their own directory under the log dir."""
        root = _profile_root(self.log_dir)
        root.mkdir(parents=True, exist_ok=True)
        files: list[Path] = []
        for run in _run_dirs(self._staging):
            target = root / f"{run.name}_{self.run_name}"
            count = 1
            while target.exists():
                count += 1
                target = root / f"{run.name}_{self.run_name}_{count}"
            run.rename(target)
            files.extend(sorted(target.glob("*" + TRACE_SUFFIX)))
        self._discard_staging()
        return files

    def _discard_staging(self) -> None:
        shutil.rmtree(self._staging, ignore_errors=True)


class _Stopper(threading.Thread):
    """Runs one session's backend stop and publishes its trace, to the end, off the caller's thread."""

    def __init__(self, session: ProfilerSession, interrupted: bool) -> None:
        super().__init__(name=f"keras_xla_guard-stop-{session.run_name}", daemon=True)
        self._session = session
        self._interrupted = interrupted
        self._files: list[Path] = []
        self._error: BaseException | None = None
        self.finished = False

    def run(self) -> None:
        session = self._session
        try:
            try:
                session.backend.stop_trace()
            except ProfilerNotRunningError:
                if not self._interrupted:
                    with _lock:
                        raise session._lost() from None
            except Exception:
                # The backend's profiler is free again (each backend makes sure).
                with _lock:
                    session._forget()
                session._discard_staging()
                raise
            with _lock:
                session._forget()
            self._files = session.trace_files = session._publish()
        except BaseException as e:  # noqa: BLE001 - handed to the caller of stop()
            self._error = e
        finally:
            self.finished = True

    def result(self, timeout: float | None) -> list[Path]:
        """Waits up to `timeout` seconds; the trace files, or what the stop raised."""
        self.join(timeout)
        if self.is_alive():
            raise StopTimeoutError(
                f"the profiler's stop did not finish within {timeout:g} s (writing the trace to "
                f"{os.fspath(self._session.log_dir)!r}: a slow or hung disk?); it goes on in the "
                "background and frees the profiler when it ends"
            )
        if self._error is not None:
            raise self._error
        return self._files


def stop_stale_session() -> bool:
    """Stops the guards' running profiler session if its run is provably over.

    Only a stale session is stopped (see `ProfilerSession.stale_reason`):
    another guard's open window, on this thread or another, is left alone.

    Returns:
        Whether a stale session was stopped.
    """
    session = _active
    why = session.stale_reason() if session is not None else None
    if session is None or why is None:
        return False
    warnings.warn(
        "keras-xla-guard: stopping a profiler session left running by an "
        f"interrupted training ({why}; {session.holder}).",
        XlaGuardWarning,
        stacklevel=2,
    )
    try:
        session._stop_for_another(why)
    except Exception:  # noqa: BLE001 - best effort; the session is abandoned
        pass
    return True


def _stop_at_exit() -> None:
    session = _active
    if session is not None and session.running:
        try:
            session.stop()
        except Exception:  # noqa: BLE001 - interpreter is going away
            pass


atexit.register(_stop_at_exit)
