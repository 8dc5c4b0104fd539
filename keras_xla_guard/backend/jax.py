"""The JAX backend: `jax.profiler` with the Python tracer off, its step marker, its cache.

Keras 3 models on `KERAS_BACKEND=jax` run on this one. JAX is imported
inside each call, never when this module is imported. Every JAX API used
here is public and checked before use against the oldest JAX declared
(`MIN_JAX`): where one is missing, one `XlaGuardWarning` names the JAX
version and what is lost, and the figure it would give is `None`.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from keras_xla_guard.backend._base import StepProbe
from keras_xla_guard.backend.jax_cache import JaxPersistentCache, jax_persistent_cache
from keras_xla_guard.errors import ProfilerBusyError, ProfilerNotRunningError, XlaGuardWarning

__all__ = ["MIN_JAX", "JaxBackend", "python_tracer_off"]

# The oldest JAX the guard declares (setup.cfg's `jax` extra, `make test-jax-compat`):
# the first with `jax.profiler.ProfileOptions` and `start_trace(profiler_options=...)`.
MIN_JAX = "0.6.2"
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(f"keras-xla-guard: {message}", XlaGuardWarning, stacklevel=3)


def python_tracer_off() -> Any:
    """`jax.profiler.ProfileOptions` with the Python tracer off, or `None` where JAX has none.

    JAX's profiler records every Python call by default: a profiled window
    of a tiny Keras fit measured 5.1 MB of trace with it and 370 KB without
    (issue 31), and the calls it records are not what the guard reads.

    Returns:
        The options; `None` (warned once) on a JAX without `ProfileOptions`
        or without `start_trace(profiler_options=...)`.
    """
    import jax

    options_type = getattr(jax.profiler, "ProfileOptions", None)
    takes = "profiler_options" in inspect.signature(jax.profiler.start_trace).parameters
    if options_type is None or not takes:
        _warn_once(
            "profile_options",
            (
                f"jax {jax.__version__} has no jax.profiler.ProfileOptions / start_trace(profiler_options=...) "
                f"(JAX {MIN_JAX}+): profiled windows run with JAX's Python tracer on, which makes traces "
                "about 10x larger and slows the window down"
            ),
        )
        return None
    options = options_type()
    options.python_tracer_level = 0
    return options


class JaxBackend:
    """`Backend` over JAX's public profiler, step marker, monitoring and cache settings.

    Example:

    ```python
    from keras_xla_guard.backend import get

    jax_backend = get("jax")
    jax_backend.start_trace("logs/trace")
    with jax_backend.step_trace(0):
        ...  # one training step
    jax_backend.stop_trace()
    ```
    """

    name = "jax"
    # Without TensorFlow there is no tf.data: the padding fix is pad_to_buckets on the examples.
    input_pipeline = "examples"
    stop_call = "jax.profiler.stop_trace()"

    def version(self) -> str:
        """`"jax 0.10.2"`: the JAX this process runs."""
        import jax

        return f"jax {jax.__version__}"

    def start_trace(self, log_dir: str) -> None:
        """Starts `jax.profiler`'s session with the Python tracer off, writing into `log_dir`.

        Raises:
            ProfilerBusyError: If a profiler session is running (JAX's
                `RuntimeError("Profile has already been started...")`).
        """
        import jax

        options = python_tracer_off()
        try:
            if options is None:
                jax.profiler.start_trace(log_dir)
            else:
                jax.profiler.start_trace(log_dir, profiler_options=options)
        except RuntimeError as e:
            if "already" not in str(e):
                raise
            raise ProfilerBusyError(
                f"another profiler session is already running in this process; JAX said: {e}"
            ) from None

    def stop_trace(self) -> None:
        """Stops the session and writes its trace (`jax.profiler.stop_trace`).

        When writing the trace fails (a full disk), JAX raises before it
        forgets its session, and would refuse every later start: the
        session is forgotten here instead (`seam.jax_internals.free_profiler`),
        so the profiler is free again whatever the export did.

        Raises:
            ProfilerNotRunningError: If no session runs (JAX's
                `RuntimeError("No profile started")`).
            Exception: What JAX raised writing the trace.
        """
        import jax

        try:
            jax.profiler.stop_trace()
        except RuntimeError as e:
            if "No profile started" in str(e):
                raise ProfilerNotRunningError(f"no profiler session is running; JAX said: {e}") from None
            self._free_after_failed_stop()
            raise
        except BaseException:
            self._free_after_failed_stop()
            raise

    def _free_after_failed_stop(self) -> None:
        from keras_xla_guard.seam.jax_internals import free_profiler

        reason = free_profiler()
        if reason is not None:
            import jax

            _warn_once(
                "free_profiler",
                (
                    f"jax {jax.__version__}: writing a trace failed and JAX's profiler could not be reset "
                    f"({reason}); JAX refuses every later profiling window in this process"
                ),
            )

    def step_trace(self, step: int) -> AbstractContextManager[Any]:
        """`jax.profiler.StepTraceAnnotation("train", step_num=step)`, not yet entered.

        The same `train` event with a `step_num` stat that TensorFlow's
        marker writes, so the trace analysis finds steps the same way.
        """
        import jax

        annotation: AbstractContextManager[Any] = jax.profiler.StepTraceAnnotation("train", step_num=step)
        return annotation

    def xla_mode(self, jit_compile: bool) -> str | None:
        """`"jit_compile"` when Keras jits the step (`model.jit_compile`, the JAX default); else `None`.

        With `jit_compile=False` (or `run_eagerly`) Keras' JAX trainer calls
        the step op by op: each op is then its own small program.
        """
        return "jit_compile" if jit_compile else None

    def persistent_cache(self, env: Mapping[str, str] | None = None) -> JaxPersistentCache | None:
        """JAX's persistent compilation cache (`jax_compilation_cache_dir`; see `backend.jax_cache`)."""
        return jax_persistent_cache(env)

    def watch_compiles(self, callback: Callable[[str, str, float], None]) -> Callable[[], None] | None:
        """Calls `callback(phase, name, seconds)` for each compile phase JAX reports, from now on.

        From `jax.monitoring` (see `backend.jax_compiles`): phases
        `"trace"`, `"lower"`, `"compile"` and `"cache_hit"`.

        Returns:
            The function that stops the calls; `None` (warned once) on a JAX
            without `jax.monitoring`'s duration listeners.
        """
        from keras_xla_guard.backend import jax_compiles

        return jax_compiles.subscribe(callback)

    def owns(self, fn: Callable[..., Any]) -> bool:
        """Whether `fn` is a `jax.jit` function (its type is jaxlib's or JAX's)."""
        return type(fn).__module__.split(".", 1)[0] in ("jax", "jaxlib")

    def step_probe(self, fn: Callable[..., Any], names: tuple[str, ...]) -> StepProbe:
        """The call key `jax.jit` compiles by, read from each call (see `backend.jax_steps`)."""
        from keras_xla_guard.backend.jax_steps import step_probe

        return step_probe(fn, names)
