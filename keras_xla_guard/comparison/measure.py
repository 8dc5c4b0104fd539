"""The measurement of `compare`: each mode's compile pass, timed pass and peak memory.

Every mode trains its own clone of the model (same initial weights, same
optimizer, loss and metrics) on the same batches. A mode runs in two passes:

1. a *compile pass*, under the profiler: one step per distinct input
   signature, so that every program the compared batches need is compiled
   and the compilations are counted (and timed) in a real trace; its peak
   memory is measured over the same span;
2. the *timed pass*, without the profiler, from the same initial state
   again: every compared batch, each step timed on the wall clock. Every
   step runs an already compiled program, so their median is the steady
   step time, free of profiler overhead. In one process the modes' timed
   passes are interleaved chunk by chunk (`measure_side_by_side`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import resource
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from keras_xla_guard.comparison.core import one_time_costs, steady_step_time
from keras_xla_guard.comparison.report import ModeFigures
from keras_xla_guard.signatures.signature import Signature

__all__ = [
    "AUTOCLUSTERING_CPU_FLAG",
    "TIMED_CHUNKS",
    "autoclustering_ready",
    "autoclustering_refusal",
    "measure_mode",
    "measure_side_by_side",
]

AUTOCLUSTERING_CPU_FLAG = "--tf_xla_cpu_global_jit"
# In-process, the modes' timed steps alternate in this many chunks.
TIMED_CHUNKS = 5


def _clone(model: Any, mode: str) -> Any:
    """A clone of `model` with its weights and compile arguments, in `mode`."""
    import keras

    if not getattr(model, "compiled", False):
        raise ValueError(
            "compare needs a compiled model (it trains clones with the same "
            "optimizer, loss and metrics). Received: a model that was not compiled"
        )
    clone = keras.models.clone_model(model)
    clone.set_weights(model.get_weights())
    # The optimizer comes back from its config: a fresh one, never the user's.
    # compile(), not compile_from_config(): that would build the optimizer
    # here, and a user's run builds it inside its first fit, in startup.
    config = keras.saving.deserialize_keras_object(model.get_compile_config())
    config["jit_compile"] = mode == "jit_compile"
    clone.compile(**config)
    return clone


def _values(variables: Sequence[Any]) -> list[Any]:
    return [v.numpy() for v in variables]


def _assign(variables: Sequence[Any], values: list[Any]) -> None:
    for variable, value in zip(variables, values):
        variable.assign(value)


def _gpu(tf: Any) -> str | None:
    return "GPU:0" if tf.config.list_physical_devices("GPU") else None


def _proc_status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _max_rss_bytes() -> int:
    # Linux reports kilobytes, macOS bytes.
    scale = 1 if os.uname().sysname == "Darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


class _PeakMemory:
    """Peak memory growth over a span: device peak on a GPU, host RSS on CPU.

    On Linux the host's high-water mark is reset at the start (writing 5 to
    /proc/self/clear_refs), so a second mode in one process gets its own
    peak over the RSS at its start. Elsewhere it is the growth of the
    process-lifetime peak (`ru_maxrss`), which a fresh process per mode
    (the CLI) keeps clean.
    """

    def __init__(self, tf: Any) -> None:
        self._tf = tf
        self.device = _gpu(tf)
        self.kind = "device" if self.device else "host_rss"
        self._base = 0
        self._reset = False

    def start(self) -> None:
        if self.device:
            self._tf.config.experimental.reset_memory_stats(self.device)
            return
        rss = _proc_status_bytes("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")
            self._reset = rss is not None
        except OSError:
            self._reset = False
        self._base = rss if self._reset and rss is not None else _max_rss_bytes()

    def peak(self) -> int | None:
        if self.device:
            return int(self._tf.config.experimental.get_memory_info(self.device)["peak"])
        peak = _proc_status_bytes("VmHWM") if self._reset else None
        return max(0, (_max_rss_bytes() if peak is None else peak) - self._base)


def autoclustering_ready(tf: Any) -> bool:
    """Whether auto-clustering can run in this process (a GPU, or the CPU flag set)."""
    return _gpu(tf) is not None or AUTOCLUSTERING_CPU_FLAG in os.environ.get("TF_XLA_FLAGS", "")


def autoclustering_refusal() -> ValueError:
    """The error for auto-clustering where this process cannot run it."""
    return ValueError(
        "mode 'autoclustering' on a CPU-only machine needs "
        f"TF_XLA_FLAGS={AUTOCLUSTERING_CPU_FLAG} set before TensorFlow starts, which this "
        "process did not have; measuring it here would measure plain TensorFlow. Run "
        "`keras-xla-guard compare module:function --modes plain jit_compile autoclustering` "
        "(each mode in its own process), or start Python with that variable set. "
        "Received: modes including 'autoclustering'"
    )


def _count_compilations(files: list[Path]) -> tuple[int, float, float, tuple[str, ...]]:
    """Compilations, their wall and thread time, and the trace files, of a profiled pass."""
    from keras_xla_guard.errors import TraceNotFoundError
    from keras_xla_guard.trace.analysis import analyze_trace
    from keras_xla_guard.trace.compile_wall import compile_wall_s

    if not files:
        raise TraceNotFoundError("the profiler wrote no trace for the compile pass")
    report = analyze_trace(files[0].parent)
    wall = sum(compile_wall_s(f) for f in files)
    # analyze_trace measures the thread-summed compile time of every trace it reads.
    assert report.compile_thread_time_s is not None
    return report.measured().compilations, wall, report.compile_thread_time_s, report.trace_paths


def _element(batch: tuple[Any, Any, Any]) -> tuple[Any, ...]:
    """`(x, y, sample_weight)` without trailing `None`s, as a dataset yields it."""
    parts = list(batch)
    while len(parts) > 1 and parts[-1] is None:
        parts.pop()
    return tuple(parts)


def _spec(batches: Sequence[tuple[Any, Any, Any]]) -> Any:
    """One element spec for all batches: `None` in every dimension that varies.

    Both passes of a mode use it, so `fit` traces its step once and the
    timed pass reuses every program the compile pass compiled.
    """
    import keras
    import tensorflow as tf

    elements = [keras.tree.flatten(_element(b)) for b in batches]
    specs = []
    for leaves in zip(*elements):
        shapes = [leaf.shape for leaf in leaves]
        dims = [d if all(s[i] == d for s in shapes) else None for i, d in enumerate(shapes[0])]
        specs.append(tf.TensorSpec(dims, leaves[0].dtype))
    return keras.tree.pack_sequence_as(_element(batches[0]), specs)


def _dataset(batches: Sequence[tuple[Any, Any, Any]], spec: Any) -> Any:
    """A tf.data pipeline yielding `batches`, with the element spec `spec`."""
    import tensorflow as tf

    elements = [_element(b) for b in batches]
    ds = tf.data.Dataset.from_generator(lambda: iter(elements), output_signature=spec)
    return ds.apply(tf.data.experimental.assert_cardinality(len(elements))).prefetch(2)


def _step_timer(keras: Any) -> Any:
    """A callback timing each step of `fit` and recording that step's loss."""

    class StepTimer(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []
            self.losses: list[float] = []
            self.optimizer_state: list[Any] = []
            self.ended_at = 0.0
            self._start = 0.0

        def on_train_begin(self, logs: Any = None) -> None:
            # fit has built the optimizer, and no step has run yet.
            self.optimizer_state = _values(self.model.optimizer.variables)

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            # Without the reset, fit's loss is the mean over the steps so far.
            self.model.reset_metrics()
            self._start = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            # Reading the loss waits for the step to finish.
            loss = float((logs or {})["loss"])
            self.times.append(time.perf_counter() - self._start)
            self.losses.append(loss)

        def on_train_end(self, logs: Any = None) -> None:
            # fit's own teardown after this (dropping its iterator, a garbage
            # collection) varies by seconds from run to run; not the run's cost.
            self.ended_at = time.perf_counter()

    return StepTimer()


def _fit(clone: Any, dataset: Any) -> Any:
    """One epoch of `fit` over `dataset`; returns its step timer."""
    import keras

    timer = _step_timer(keras)
    clone.fit(dataset, epochs=1, verbose=0, callbacks=[timer])
    return timer


@contextlib.contextmanager
def _jit_for(tf: Any, mode: str) -> Iterator[None]:
    """Auto-clustering on for `"autoclustering"`, off otherwise; restored after.

    It is process-wide: on only while that mode's functions are built and
    run, and off for the others even if the caller had switched it on.
    """
    previous = tf.config.optimizer.get_jit()
    tf.config.optimizer.set_jit("autoclustering" if mode == "autoclustering" else False)
    try:
        yield
    finally:
        tf.config.optimizer.set_jit(previous or False)


@dataclasses.dataclass
class _ModeRun:
    """One mode's clone, its compile-pass figures and its timed steps so far."""

    mode: str
    clone: Any
    spec: Any
    signatures: int
    compile_pass_s: float
    compile_steps_s: list[float]
    compilations: int
    compile_time_s: float
    compile_thread_time_s: float
    trace_paths: tuple[str, ...]
    peak_memory_bytes: int | None
    memory_kind: str
    times: list[float] = dataclasses.field(default_factory=list)
    losses: list[float] = dataclasses.field(default_factory=list)


def _compile_pass(
    model: Any, batches: Sequence[tuple[Any, Any, Any]], mode: str, log_dir: str | os.PathLike[str]
) -> _ModeRun:
    """Clones the model for `mode` and runs its profiled compile pass.

    The clone is left where the compile pass started (weights and optimizer
    state), ready for the timed steps. Peak memory is that of this pass:
    building the clone, compiling, training one step per signature.
    """
    import tensorflow as tf

    from keras_xla_guard.runtime.profiler import ProfilerSession

    if mode == "autoclustering" and not autoclustering_ready(tf):
        raise autoclustering_refusal()
    first_of: dict[Signature, int] = {}
    for i, batch in enumerate(batches):
        first_of.setdefault(Signature.of(batch), i)
    spec = _spec(batches)
    # Whatever an earlier mode left behind is freed now, not mid-measurement.
    gc.collect()
    memory = _PeakMemory(tf)
    memory.start()
    with _jit_for(tf, mode):
        clone = _clone(model, mode)
        initial = _values(clone.variables)
        session = ProfilerSession(log_dir, run_name=mode)
        session.start()
        try:
            start = time.perf_counter()
            compile_pass = _fit(clone, _dataset([batches[i] for i in first_of.values()], spec))
            compile_pass_s = compile_pass.ended_at - start
            # Read before the profiler stops: serialising its trace and the guard's
            # analysis of it are the guard's memory, not the mode's.
            peak = memory.peak()
        finally:
            files = session.stop()
        compilations, compile_time_s, compile_thread_s, trace_paths = _count_compilations(files)
        _assign(clone.variables, initial)
        _assign(clone.optimizer.variables, compile_pass.optimizer_state)
    return _ModeRun(
        mode,
        clone,
        spec,
        len(first_of),
        compile_pass_s,
        compile_pass.times,
        compilations,
        compile_time_s,
        compile_thread_s,
        trace_paths,
        peak,
        memory.kind,
    )


def _timed_steps(run: _ModeRun, batches: Sequence[tuple[Any, Any, Any]]) -> None:
    """Trains `run`'s clone on `batches` (all compiled already), timing each step."""
    import tensorflow as tf

    with _jit_for(tf, run.mode):
        timer = _fit(run.clone, _dataset(batches, run.spec))
    run.times.extend(timer.times)
    run.losses.extend(timer.losses)


def _figures(run: _ModeRun) -> ModeFigures:
    step_time = steady_step_time(run.times)
    startup, per_signature = one_time_costs(
        run.compile_pass_s, run.compile_steps_s, step_time, run.compile_time_s
    )
    return ModeFigures(
        mode=run.mode,
        steps=len(run.times),
        step_time_s=step_time,
        step_times_s=tuple(run.times),
        startup_s=startup,
        signature_cost_s=per_signature,
        compilations=run.compilations,
        compile_time_s=run.compile_time_s,
        compile_thread_time_s=run.compile_thread_time_s,
        distinct_signatures=run.signatures,
        peak_memory_bytes=run.peak_memory_bytes,
        memory_kind=run.memory_kind,
        losses=tuple(run.losses),
        trace_paths=run.trace_paths,
    )


def measure_mode(
    model: Any, batches: Sequence[tuple[Any, Any, Any]], mode: str, log_dir: str | os.PathLike[str]
) -> ModeFigures:
    """Trains a clone of `model` in `mode` on `batches` and measures it.

    Args:
        model: A compiled Keras 3 model; left untouched.
        batches: `(x, y, sample_weight)` batches, as `take_batches` makes.
        mode: `"plain"`, `"jit_compile"` or `"autoclustering"`.
        log_dir: Where the compile pass's trace goes
            (`<log_dir>/plugins/profile/<run>_<mode>/`).

    Returns:
        The mode's `ModeFigures`.

    Raises:
        ValueError: For `"autoclustering"` on a CPU-only process started
            without `TF_XLA_FLAGS=--tf_xla_cpu_global_jit`.
        ProfilerBusyError: If another profiler is running.
    """
    run = _compile_pass(model, batches, mode, log_dir)
    _timed_steps(run, batches)
    return _figures(run)


def measure_side_by_side(
    model: Any, batches: Sequence[tuple[Any, Any, Any]], modes: Sequence[str], log_dir: str | os.PathLike[str]
) -> list[ModeFigures]:
    """Measures several modes in one process, their timed steps interleaved.

    Each mode's compile pass runs in turn; then the timed steps go in
    consecutive chunks of `ceil(len(batches) / TIMED_CHUNKS)` batches (at
    most `TIMED_CHUNKS` chunks), every mode training on a chunk before
    the next chunk starts (the order of the modes alternating), so that a
    change in the machine's load falls on every mode alike and the step
    time ratios stay fair on a busy machine.

    Args:
        model: A compiled Keras 3 model; left untouched.
        batches: The compared batches.
        modes: The modes, validated.
        log_dir: `<log_dir>/<mode>` receives each mode's trace.

    Returns:
        One `ModeFigures` per mode, in order.
    """
    runs = [_compile_pass(model, batches, mode, Path(log_dir) / mode) for mode in modes]
    size = math.ceil(len(batches) / TIMED_CHUNKS)
    for i, start in enumerate(range(0, len(batches), size)):
        for run in runs if i % 2 == 0 else runs[::-1]:
            _timed_steps(run, batches[start : start + size])
    return [_figures(run) for run in runs]
