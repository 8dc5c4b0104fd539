"""The TensorFlow backend: TF's profiler, its step marker, its XLA switches.

Keras 3 on TensorFlow, tf_keras, and custom loops of `tf.function`s all run
on this one. TensorFlow is imported inside each call, never when this
module is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from keras_xla_guard.backend._base import StepProbe
from keras_xla_guard.backend.xla_cache import PersistentCache, persistent_cache
from keras_xla_guard.errors import ProfilerBusyError, ProfilerNotRunningError

__all__ = ["TensorFlowBackend"]


class TensorFlowBackend:
    """`Backend` over TensorFlow's public profiler and XLA switches.

    Example:

    ```python
    from keras_xla_guard.backend import get

    tf_backend = get("tensorflow")
    tf_backend.start_trace("logs/trace")
    with tf_backend.step_trace(0):
        ...  # one training step
    tf_backend.stop_trace()
    ```
    """

    name = "tensorflow"
    # Its users batch with tf.data: the padding fix is a tf.data call.
    input_pipeline = "tf.data"
    stop_call = "tf.profiler.experimental.stop()"

    def version(self) -> str:
        """`"tensorflow 2.21.0"`: the TensorFlow this process runs."""
        import tensorflow as tf

        return f"tensorflow {tf.__version__}"

    def start_trace(self, log_dir: str) -> None:
        """Starts `tf.profiler.experimental`'s session, writing into `log_dir`.

        Raises:
            ProfilerBusyError: If any profiler session is running (TensorFlow's
                `AlreadyExistsError`), e.g. `keras.callbacks.TensorBoard(profile_batch=...)`.
        """
        import tensorflow as tf

        try:
            tf.profiler.experimental.start(log_dir)
        except tf.errors.AlreadyExistsError as e:
            raise ProfilerBusyError(
                "another profiler session is already running in this "
                "process (e.g. keras.callbacks.TensorBoard(profile_batch=...)); "
                f"TensorFlow said: {e.message}"
            ) from None

    def stop_trace(self) -> None:
        """Stops the session and writes its trace (`tf.profiler.experimental.stop`).

        Raises:
            ProfilerNotRunningError: If no session runs (TensorFlow's
                `UnavailableError`).
            Exception: What TensorFlow raised writing the trace (e.g. a full
                disk); TensorFlow has ended the session then.
        """
        import tensorflow as tf

        try:
            tf.profiler.experimental.stop()
        except tf.errors.UnavailableError as e:
            raise ProfilerNotRunningError(
                f"no profiler session is running; TensorFlow said: {e.message}"
            ) from None

    def step_trace(self, step: int) -> AbstractContextManager[Any]:
        """`tf.profiler.experimental.Trace("train", step_num=step, _r=1)`, not yet entered."""
        import tensorflow as tf

        # `_r=1` makes XProf's step-time tools recognise the region as a step
        # (the form TensorFlow's profiler guide gives for custom loops).
        trace: AbstractContextManager[Any] = tf.profiler.experimental.Trace("train", step_num=step, _r=1)
        return trace

    def xla_mode(self, jit_compile: bool) -> str | None:
        """`"jit_compile"` when asked; else `"autoclustering"` when `tf.config.optimizer.get_jit()` is on."""
        if jit_compile:
            return "jit_compile"
        # Auto-clustering is a switch of the TF runtime: without TensorFlow loaded
        # nobody can have set it, and importing it here would cost seconds.
        tf = sys.modules.get("tensorflow")
        if tf is not None and tf.config.optimizer.get_jit():
            return "autoclustering"
        return None

    def persistent_cache(self, env: Mapping[str, str] | None = None) -> PersistentCache | None:
        """TensorFlow's XLA persistent cache, from `TF_XLA_FLAGS` (see `backend.xla_cache`)."""
        return persistent_cache(env)

    def watch_compiles(self, callback: Callable[[str, str, float], None]) -> Callable[[], None] | None:
        """`None`: TensorFlow reports compilations only in a profiler trace."""
        return None

    def owns(self, fn: Callable[..., Any]) -> bool:
        """Whether `fn` is a `tf.function` (its type is TensorFlow's)."""
        return type(fn).__module__.split(".", 1)[0] == "tensorflow"

    def step_probe(self, fn: Callable[..., Any], names: tuple[str, ...]) -> StepProbe:
        """A `tf.function`'s `jit_compile`; signatures by the generic walk over the arguments."""
        from keras_xla_guard.seam.tf_internals import tf_function_jit_compile

        return StepProbe(jit_compile=tf_function_jit_compile(fn), jitted=self.owns(fn))
