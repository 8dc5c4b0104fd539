"""`XlaGuardCallback`: the Keras adapter over `XlaGuardEngine`."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import keras

from keras_xla_guard.analysis import DEFAULT_TOP_K
from keras_xla_guard.engine import DEFAULT_LOG_DIR, XlaGuardEngine
from keras_xla_guard.errors import BackendError
from keras_xla_guard.report import CoverageReport
from keras_xla_guard.schedule import DEFAULT_MAX_STEPS, DEFAULT_SKIP_STEPS
from keras_xla_guard.xplane import DEFAULT_MAX_TRACE_BYTES

__all__ = ["XlaGuardCallback", "check_backend"]


def check_backend() -> None:
    """Raises `BackendError` unless Keras runs on TensorFlow.

    Raises:
        BackendError: With another Keras backend.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return
    extra = ""
    if backend == "jax":
        extra = (
            " With JAX every training step is already compiled by XLA "
            "(jax.jit), so there is no XLA coverage to guard."
        )
    raise BackendError(
        "keras-xla-guard measures TensorFlow's XLA and needs the TensorFlow "
        f"backend, but Keras runs on backend={backend!r}.{extra} Set "
        "KERAS_BACKEND=tensorflow before importing Keras to use it."
    )


class XlaGuardCallback(keras.callbacks.Callback):
    """Measures how much of `model.fit`'s op time really runs under XLA.

    The callback starts TensorFlow's profiler for a window of steps in the
    selected epochs, analyzes each trace on a background thread, and writes
    scalars (`xla_guard/...`), a Custom Scalars layout and a text table of the
    ops that fell back to plain TF kernels to TensorBoard. Traces stay in
    `<log_dir>/plugins/profile/` where TensorBoard's Profile tab finds them.
    Nothing inside the guard can break training: failures become
    `XlaGuardWarning`s and the window is reported as failed.

    Args:
        log_dir: Directory for traces and summaries. Defaults to
            `"logs/xla_guard"`.
        profile_epochs: Epoch indices (0-based, as Keras counts) to profile:
            an int, an iterable of ints or a range. Defaults to `None`:
            epoch 1 (the first one after compilation), or epoch 0 when
            `fit` runs a single epoch, unless `profile_every` is given.
        profile_every: Also profile every N-th epoch. Defaults to `None`.
        skip_steps: Steps at the start of each profiled epoch to leave out
            (iterator start-up, compilation). Defaults to `2`.
        max_steps: Most steps profiled per window, bounding trace size;
            `None` profiles the whole epoch. Defaults to `20`.
        top_k: How many plain TF ops each report lists. Defaults to `10`.
        write_summaries: Write TensorBoard summaries. Defaults to `True`.
        async_analysis: Analyze traces off the training thread. Defaults
            to `True`.
        max_trace_bytes: Traces larger than this are not analyzed.
            Defaults to 1 GiB.
        verbose: 1 prints each report at the end of training, 0 is silent.
            Defaults to `1`.

    Raises:
        ValueError: If an argument is invalid.
        BackendError: If Keras does not run on the TensorFlow backend.

    Example:

    ```python
    import numpy as np
    import keras
    from keras_xla_guard import XlaGuardCallback

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile("adam", "mse", jit_compile=True)
    x, y = np.random.rand(512, 8), np.random.rand(512, 1)
    guard = XlaGuardCallback(log_dir="logs/xla_guard", profile_epochs=(1,))
    model.fit(x, y, epochs=3, callbacks=[guard], verbose=0)
    print(guard.reports[1].xla_time_fraction)
    ```
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] = DEFAULT_LOG_DIR,
        profile_epochs: int | Iterable[int] | None = None,
        profile_every: int | None = None,
        skip_steps: int = DEFAULT_SKIP_STEPS,
        max_steps: int | None = DEFAULT_MAX_STEPS,
        top_k: int = DEFAULT_TOP_K,
        write_summaries: bool = True,
        async_analysis: bool = True,
        max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
        verbose: int = 1,
    ) -> None:
        super().__init__()
        check_backend()
        self.engine = XlaGuardEngine(
            log_dir=log_dir,
            profile_epochs=profile_epochs,
            profile_every=profile_every,
            skip_steps=skip_steps,
            max_steps=max_steps,
            top_k=top_k,
            write_summaries=write_summaries,
            async_analysis=async_analysis,
            max_trace_bytes=max_trace_bytes,
            verbose=verbose,
        )
        self.engine.note_providers.append(self._jit_notes)
        self._original_train_function: Any = None
        self._wrapped_train_function: Any = None

    @property
    def reports(self) -> dict[int, CoverageReport]:
        """Reports keyed by 0-based epoch index (complete after `fit`)."""
        return self.engine.reports

    @property
    def log_dir(self) -> str:
        """The directory holding traces and TensorBoard summaries."""
        return os.fspath(self.engine.log_dir)

    def _jit_notes(self, report: CoverageReport) -> list[str]:
        model = self.model
        if model is None or report.xla_time_s > 0 or report.non_xla_op_time_s == 0:
            return []
        jit = getattr(model, "jit_compile", None)
        if jit is False:
            return [
                "XLA is not requested: model.jit_compile is False (Keras resolves "
                "jit_compile='auto' to False on CPU-only machines and under a "
                "distribution strategy); pass jit_compile=True to compile()"
            ]
        if jit:
            return [
                "model.jit_compile is True but no XLA execution was recorded in "
                "this window; check the TensorFlow log for compilation errors"
            ]
        return []

    # Keras hooks. on_train_batch_end is deliberately not implemented: doing
    # so would turn off Keras' asynchronous batch-end dispatch for everyone.

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        spe = getattr(self.model, "steps_per_execution", 1) or 1
        self.engine.steps_per_call = int(spe)
        params = self.params or {}
        self.engine.train_begin(epochs=params.get("epochs"), initial_epoch=0)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.engine.epoch_begin(epoch, steps=(self.params or {}).get("steps"))
        self._sync_wrapper()

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.engine.step_begin(batch)
        self._sync_wrapper()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.engine.epoch_end(epoch)
        self._sync_wrapper()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.engine.train_end()
        self._sync_wrapper()

    def _sync_wrapper(self) -> None:
        """Wraps `model.train_function` only while the profiler runs.

        Keras 3 does not call `on_train_end` when an exception escapes a
        step; the wrapper stops the profiler on that path (KeyboardInterrupt
        included) and re-raises the user's exception unchanged. Outside the
        window the original function is restored, so unprofiled steps pay
        nothing.
        """
        model = self.model
        if model is None:
            return
        if self.engine.profiling and self._wrapped_train_function is None:
            original = getattr(model, "train_function", None)
            if original is None:
                return
            engine = self.engine

            def train_function(*args: Any, **kwargs: Any) -> Any:
                try:
                    return original(*args, **kwargs)
                except BaseException:
                    engine.abort()
                    raise

            model.train_function = train_function
            self._original_train_function = original
            self._wrapped_train_function = train_function
        elif not self.engine.profiling and self._wrapped_train_function is not None:
            if getattr(model, "train_function", None) is self._wrapped_train_function:
                model.train_function = self._original_train_function
            self._original_train_function = None
            self._wrapped_train_function = None
