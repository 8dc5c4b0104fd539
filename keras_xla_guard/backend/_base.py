"""The backend interface: what the guard needs from the framework that runs the step.

Keras gives each backend one module with a fixed function set
(`keras/src/backend/<name>/tensorboard.py`: `start_trace`, `stop_trace`,
`start_batch_trace`, `stop_batch_trace`); httpx writes its extension point
as one class (`httpx/_transports/base.py`). `Backend` is both: the fixed set
of calls the engine, the profiler session and the adapters make, written
as a `Protocol` that each `backend/<name>.py` implements. Nothing outside
this package calls a framework's profiler, its XLA switches or its
compilation-cache flags.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from keras_xla_guard.backend.xla_cache import PersistentCache

if TYPE_CHECKING:
    from keras_xla_guard.signatures.signature import Signature

__all__ = ["Backend", "StepProbe"]


def _unknown() -> int | None:
    return None


@dataclass(frozen=True)
class StepProbe:
    """What a backend can tell about one custom-loop step `XlaGuard.watch` wraps.

    Attributes:
        jit_compile: Whether the step runs compiled by XLA (a
            `tf.function(jit_compile=True)`; on JAX every array op does).
        signature: Reads one call's input signature `(args, kwargs) ->
            Signature` the way the framework keys its compiled programs
            (JAX: pytree paths, weak types, static arguments, the function
            object); `None`: the guard's generic walk over the arguments.
        executables: The number of compiled programs the step holds now
            (JAX's jit cache), `None` where unknown.
        jitted: Whether the step itself is the framework's compiled
            function (`jax.jit`, `tf.function`), not a Python callable
            that may call one.
    """

    jit_compile: bool
    signature: Callable[[tuple[Any, ...], dict[str, Any]], Signature] | None = None
    executables: Callable[[], int | None] = _unknown
    jitted: bool = False


@runtime_checkable
class Backend(Protocol):
    """The calls keras-xla-guard makes into the framework that runs the train step.

    One implementation per framework, in `keras_xla_guard/backend/<name>.py`,
    chosen by `keras_xla_guard.backend.select` (from the model or
    `keras.backend.backend()`) or `keras_xla_guard.backend.get(name)`.
    An implementation imports its framework inside its methods, never at
    module import, and maps the framework's own errors to the package's:
    the callers (`runtime/profiler.py`, `runtime/engine.py`, the adapters)
    only see the names below and `keras_xla_guard.errors`.

    The profiler contract is the one both TensorFlow and JAX keep: one
    profiler session per process, started with a directory and stopped
    without arguments, writing TensorBoard's layout
    `<log_dir>/plugins/profile/<timestamp>/<host>.xplane.pb`.
    `runtime.profiler.ProfilerSession` stages, names and publishes those
    runs and decides whose session it is; a backend only starts and stops.

    How the JAX backend (`jax.py`) fits, call by call, with no caller changed:

    - `start_trace(log_dir)`: `jax.profiler.start_trace(log_dir,
      profiler_options=...)` with a `jax.profiler.ProfileOptions` whose
      `python_tracer_level` is 0 (the Python tracer is on by default);
      its `RuntimeError("Profile has already been started...")` becomes
      `ProfilerBusyError`.
    - `stop_trace()`: `jax.profiler.stop_trace()`; its
      `RuntimeError("No profile started")` becomes `ProfilerNotRunningError`.
    - `step_trace(step)`: `jax.profiler.StepTraceAnnotation("train",
      step_num=step)`, the step marker XProf's step tools read.
    - `xla_mode(jit_compile)`: `"jit_compile"` when Keras jits the step
      (`model.jit_compile`, on by default under JAX), else `None`.
    - `persistent_cache()`: `jax.config.jax_compilation_cache_dir` (and
      `jax_persistent_cache_min_compile_time_secs`) as a `PersistentCache`.
    - `watch_compiles(callback)`: `jax.monitoring`'s compile-phase events
      (TensorFlow has no such stream: `None`).
    - `name`, `version()`: `"jax"`, `"jax 0.10.2"`.
    - `input_pipeline`: `"examples"`: the recompilation fix pads the
      examples with `pad_to_buckets` (no TensorFlow), not with `tf.data`.

    Attributes:
        name: The Keras backend name this implements, as
            `keras.backend.backend()` spells it (`"tensorflow"`).
        input_pipeline: What the guard's padding fix is written for
            (`signatures.buckets.INPUT_PIPELINES`): `"tf.data"`, or
            `"examples"` for a backend whose users may have no TensorFlow.
        stop_call: The framework's own call that stops its profiler, as a
            user would write it (`"tf.profiler.experimental.stop()"`), for
            messages about a session someone else stopped.
    """

    name: str
    input_pipeline: str
    stop_call: str

    def version(self) -> str:
        """The framework and its version, e.g. `"tensorflow 2.21.0"`."""
        ...

    def start_trace(self, log_dir: str) -> None:
        """Starts the process-wide profiler, writing into `log_dir` when stopped.

        Args:
            log_dir: The directory the trace goes to, in TensorBoard's layout.

        Raises:
            ProfilerBusyError: If a profiler session is already running in
                this process (anyone's), with the framework's own words.
        """
        ...

    def stop_trace(self) -> None:
        """Stops the running profiler session and writes its trace.

        Raises:
            ProfilerNotRunningError: If no profiler session is running
                (someone else stopped it).
            Exception: What the framework raised when writing the trace
                failed (e.g. `OSError` on a full disk); the session is over
                then.
        """
        ...

    def step_trace(self, step: int) -> AbstractContextManager[Any]:
        """A region marking one training step in the trace (not yet entered).

        Args:
            step: The step number XProf shows.

        Returns:
            A context manager; entering and leaving it bounds the step.
        """
        ...

    def xla_mode(self, jit_compile: bool) -> str | None:
        """How a train step is compiled: `"jit_compile"`, `"autoclustering"` or `None`.

        Args:
            jit_compile: Whether the step itself asks for XLA
                (`model.jit_compile`, a `tf.function(jit_compile=True)`).

        Returns:
            The mode the step runs in; `None` when XLA compiles nothing.
        """
        ...

    def persistent_cache(self, env: Mapping[str, str] | None = None) -> PersistentCache | None:
        """The persistent compilation cache this process uses, if any.

        Args:
            env: The environment to read. Defaults to `None` (`os.environ`).

        Returns:
            The cache settings, or `None` when no cache is configured.
        """
        ...

    def step_probe(self, fn: Callable[..., Any], names: tuple[str, ...]) -> StepProbe:
        """What this framework can tell about a custom loop's step `fn`.

        Args:
            fn: The step `XlaGuard.watch` wraps.
            names: `fn`'s positional parameter names, to name the inputs.

        Returns:
            Its `StepProbe`.
        """
        ...

    def owns(self, fn: Callable[..., Any]) -> bool:
        """Whether `fn` is this framework's compiled function (a `tf.function`, a `jax.jit`)."""
        ...

    def watch_compiles(self, callback: Callable[[str, str, float], None]) -> Callable[[], None] | None:
        """Reports every compilation of the process as it happens, where the framework can.

        Args:
            callback: Called with `(phase, name, seconds)` for each phase
                of each compilation (`"trace"`, `"lower"`, `"compile"`,
                `"cache_hit"`), on the compiling thread.

        Returns:
            The function that stops the calls; `None` when the framework
            reports no compilations as they happen (then only profiled
            windows count them).
        """
        ...
