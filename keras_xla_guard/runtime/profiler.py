"""Thin, safe control of the process-wide profiler, whichever backend runs it.

TensorFlow (and JAX) allow one profiler session per process; the backend
(`keras_xla_guard.backend`) starts and stops it, this module decides when. This module remembers
whether *we* started the running session, so that a guard never stops a
profiler someone else started (e.g. `keras.callbacks.TensorBoard`), and so a
session we left running (an exception escaped `model.fit` before our
`on_train_end`, or interrupted TensorFlow's own stop) is stopped at the next
guard's train begin or at interpreter exit.

Each session makes TensorFlow write into a private staging directory and
then moves the run into `<log_dir>/plugins/profile/` under a name no other
run has. TensorFlow names runs by the second they start in, so two windows
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
from pathlib import Path
from typing import TYPE_CHECKING

from keras_xla_guard.errors import ProfilerBusyError, ProfilerNotRunningError, XlaGuardError, XlaGuardWarning
from keras_xla_guard.trace.xplane import TRACE_SUFFIX

if TYPE_CHECKING:
    from keras_xla_guard.backend import Backend

__all__ = ["STAGING_DIR", "ProfilerSession", "SessionLostError", "stop_stale_session"]

_lock = threading.Lock()
_active: "ProfilerSession | None" = None
# Prefix of each session's own staging directory, directly under the log dir
# so that moving a finished run is a rename on one file system. Never a
# shared parent: processes sharing a log dir would remove it under each
# other's feet (one's last session ending while another creates its own).
STAGING_DIR = ".xla_guard_staging"


class SessionLostError(XlaGuardError):
    """Our profiler session was stopped by someone else before we stopped it."""


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
        run_name: Suffix of the run directory's name, after TensorFlow's
            timestamp (`<timestamp>_<run_name>`). A run of the same name
            already there gets a counter (`_2`, `_3`, ...) appended, so
            every session has its own directory. Defaults to `"run"`.
        backend: The `Backend` whose profiler runs. Defaults to `None`:
            TensorFlow's (`keras_xla_guard.backend.get("tensorflow")`).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        run_name: str = "run",
        *,
        backend: Backend | None = None,
    ) -> None:
        if backend is None:
            from keras_xla_guard.backend import get

            backend = get("tensorflow")
        self.backend = backend
        self.log_dir = Path(log_dir)
        self.run_name = run_name
        self.running = False
        self.trace_files: list[Path] = []
        self._stop_begun = False
        self._staging = self.log_dir / f"{STAGING_DIR}-{run_name}-{uuid.uuid4().hex[:12]}"

    def start(self) -> None:
        """Starts the profiler.

        Raises:
            ProfilerBusyError: If another profiler session is running,
                another guard's included.
        """
        global _active
        with _lock:
            if _active is not None and _active.running:
                raise ProfilerBusyError(
                    "another keras-xla-guard profiling window is running in this process "
                    f"(log_dir={os.fspath(_active.log_dir)!r}); one profiler runs "
                    "at a time"
                )
            self._staging.mkdir(parents=True, exist_ok=True)
            try:
                self.backend.start_trace(str(self._staging))
            except BaseException:
                self._discard_staging()
                raise
            self.running = True
            _active = self

    def stop(self) -> list[Path]:
        """Stops the profiler and returns the trace files it wrote.

        If the backend's stop is interrupted (e.g. `KeyboardInterrupt`), the
        session stays marked running, so a later `stop()` or
        `stop_stale_session()` tries again.

        Returns:
            The new `.xplane.pb` files (one per host), possibly empty if
            TensorFlow wrote nothing.

        Raises:
            SessionLostError: If someone else stopped this session (the
                profiler running now, if any, is left alone).
            Exception: What the backend raised when writing the trace failed
                (e.g. a full disk); the backend has ended the session then.
        """
        with _lock:
            if not self.running:
                return self.trace_files
            # A trace already staged is our session's, written by someone
            # else's stop() - unless our own earlier stop() wrote it and was
            # interrupted before TensorFlow forgot the session.
            interrupted = self._stop_begun
            if not interrupted and self._staged_runs():
                raise self._lost()
            self._stop_begun = True
            try:
                self.backend.stop_trace()
            except ProfilerNotRunningError:
                if not interrupted:
                    raise self._lost() from None
            except Exception:
                # The backend drops its session when writing the trace fails.
                self._forget()
                self._discard_staging()
                raise
            self._forget()
            self.trace_files = self._publish()
            return self.trace_files

    def _lost(self) -> SessionLostError:
        self._forget()
        self._discard_staging()
        return SessionLostError(
            "the profiler session was stopped by someone else inside the window "
            "(e.g. tf.profiler.experimental.stop() in another callback); the profiler "
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


def stop_stale_session() -> bool:
    """Stops a profiler session a guard started and nobody stopped.

    Returns:
        Whether a stale session was stopped.
    """
    session = _active
    if session is None or not session.running:
        return False
    warnings.warn(
        "keras-xla-guard: stopping a profiler session left running by an "
        "interrupted training (an exception escaped before the guard could "
        "stop it).",
        XlaGuardWarning,
        stacklevel=2,
    )
    try:
        session.stop()
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
