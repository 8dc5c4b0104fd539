"""Thin, safe control of TensorFlow's process-wide profiler.

TensorFlow allows one profiler session per process. This module remembers
whether *we* started the running session, so that a guard never stops a
profiler someone else started (e.g. `keras.callbacks.TensorBoard`), and so a
session we left running (an exception escaped `model.fit` before our
`on_train_end`) is stopped at the next opportunity or at interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
from pathlib import Path

from keras_xla_guard.errors import ProfilerBusyError, XlaGuardWarning
from keras_xla_guard.xplane import TRACE_SUFFIX

__all__ = ["ProfilerSession", "stop_stale_session"]

_lock = threading.Lock()
_active: "ProfilerSession | None" = None


def _profile_root(log_dir: Path) -> Path:
    return log_dir / "plugins" / "profile"


def _run_dirs(log_dir: Path) -> set[Path]:
    root = _profile_root(log_dir)
    if not root.is_dir():
        return set()
    return {p for p in root.iterdir() if p.is_dir()}


class ProfilerSession:
    """One start/stop of the TF profiler writing into `log_dir`.

    Args:
        log_dir: Directory the trace goes to, in TensorBoard's layout
            (`<log_dir>/plugins/profile/<run>/<host>.xplane.pb`).
        run_name: Name for the run directory; TensorFlow's timestamp name
            is renamed to it so two windows within one second do not share
            (and overwrite) one directory. Defaults to keeping TF's name.
    """

    def __init__(self, log_dir: str | os.PathLike[str], run_name: str | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.run_name = run_name
        self.running = False
        self.trace_files: list[Path] = []
        self._before: set[Path] = set()

    def start(self) -> None:
        """Starts the profiler.

        Raises:
            ProfilerBusyError: If another profiler session is running.
        """
        import tensorflow as tf

        global _active
        stop_stale_session()
        with _lock:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._before = _run_dirs(self.log_dir)
            try:
                tf.profiler.experimental.start(str(self.log_dir))
            except tf.errors.AlreadyExistsError as e:
                raise ProfilerBusyError(
                    "another profiler session is already running in this "
                    "process (e.g. keras.callbacks.TensorBoard(profile_batch=...)); "
                    f"TensorFlow said: {e.message}"
                ) from None
            self.running = True
            _active = self

    def stop(self) -> list[Path]:
        """Stops the profiler and returns the trace files it wrote.

        Returns:
            The new `.xplane.pb` files (one per host), possibly empty if
            TensorFlow wrote nothing.
        """
        import tensorflow as tf

        global _active
        with _lock:
            if not self.running:
                return self.trace_files
            self.running = False
            if _active is self:
                _active = None
            try:
                tf.profiler.experimental.stop()
            except tf.errors.UnavailableError:
                return []
            new_runs = sorted(_run_dirs(self.log_dir) - self._before)
            files: list[Path] = []
            for run in new_runs:
                if self.run_name:
                    run = self._rename(run)
                files.extend(sorted(run.glob("*" + TRACE_SUFFIX)))
            self.trace_files = files
            return files

    def _rename(self, run: Path) -> Path:
        target = run.parent / f"{run.name}_{self.run_name}"
        if target.exists():
            return run
        try:
            run.rename(target)
        except OSError:
            return run
        return target


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

