"""The Keras adapter of `compare`: trains clones of a model in each mode.

Every mode trains its own clone of the model (same initial weights, same
optimizer, loss and metrics) on the same batches, taken once from the data.
A mode runs in two passes:

1. a *compile pass*, under the TF profiler: one step per distinct input
   signature, so that every program the compared batches need is compiled
   and the compilations are counted (and timed) in a real trace;
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
import itertools
import json
import math
import os
import resource
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from keras_xla_guard._checks import check_int
from keras_xla_guard.comparison.core import (
    build_report,
    one_time_costs,
    steady_step_time,
    validate_modes,
)
from keras_xla_guard.comparison.report import CompareReport, ModeFigures

__all__ = ["AUTOCLUSTERING_CPU_FLAG", "Batches", "autoclustering_ready", "autoclustering_refusal",
           "compare", "measure_mode", "measure_side_by_side", "planned_run", "signature", "take_batches",
           "write_summaries"]

AUTOCLUSTERING_CPU_FLAG = "--tf_xla_cpu_global_jit"
# Beside the guard's own runs (`<log_dir>/plugins/profile`, its event files).
COMPARE_SUBDIR = "compare"
# In-process, the modes' timed steps alternate in this many chunks.
TIMED_CHUNKS = 5


@dataclasses.dataclass(frozen=True)
class Batches:
    """The compared batches and what the data says about the planned run.

    Attributes:
        batches: `(x, y, sample_weight)` tuples of NumPy arrays (nested as
            the model's inputs are), one per compared step.
        steps_per_epoch: Batches in one pass over the data; `None` when the
            data's length is unknown (a generator, infinite data).
        epoch_signatures: Distinct signatures over one pass of the data;
            `None` when its length is unknown.
    """

    batches: list[tuple[Any, Any, Any]]
    steps_per_epoch: int | None
    epoch_signatures: int | None


def signature(batch: Any) -> tuple[tuple[tuple[int, ...], str], ...]:
    """The input signature of a batch: shape and dtype of every array in it."""
    import keras

    return tuple((tuple(leaf.shape), str(leaf.dtype))
                 for leaf in keras.tree.flatten(batch) if leaf is not None)


def _numpy_batch(element: Any) -> tuple[Any, Any, Any]:
    import keras
    import numpy as np

    unpacked = keras.utils.unpack_x_y_sample_weight(element)
    return keras.tree.map_structure(lambda a: None if a is None else np.asarray(a), tuple(unpacked))


def _cycle(kept: list[Any], steps: int) -> list[Any]:
    """`steps` batches: the kept ones, repeated as further epochs would."""
    return [kept[i % len(kept)] for i in range(steps)]


def _from_iterable(elements: Any, steps: int, known_length: int | None) -> Batches:
    """Takes `steps` batches; reads finite data to its end to count its signatures.

    Data of unknown length is read one batch past `steps`: if that batch
    exists, the data's length and signatures stay unknown.
    """
    kept: list[Any] = []
    signatures: set[Any] = set()
    count, more = 0, False
    for element in elements:
        if count >= steps and known_length is None:
            more = True
            break
        batch = _numpy_batch(element)
        if count < steps:
            kept.append(batch)
        signatures.add(signature(batch))
        count += 1
    if not kept:
        raise ValueError("The data yielded no batch. Received: data of 0 batches")
    if more:
        return Batches(_cycle(kept, steps), None, None)
    return Batches(_cycle(kept, steps), count, len(signatures))


def take_batches(x: Any, y: Any = None, *, batch_size: int | None = None, steps: int = 50) -> Batches:
    """Takes the compared batches from anything `fit` takes, once.

    Args:
        x: NumPy arrays or tensors (nested as the model's inputs), a
            `tf.data.Dataset`, a `keras.utils.PyDataset`, or a generator
            or iterator of batches.
        y: Targets, only with arrays. Defaults to `None`.
        batch_size: Batch size, only with arrays. Defaults to `32` there.
        steps: How many batches to take; data with fewer batches is
            cycled, as further epochs would. Defaults to `50`.

    Returns:
        The `Batches`. Finite data is read through one whole pass to count
        its signatures (only shapes are kept past `steps`).

    Raises:
        ValueError: On `y` or `batch_size` with a dataset or generator, on
            empty data or data `fit` does not take.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    check_int("steps", steps, minimum=1)
    if isinstance(x, (tf.data.Dataset, keras.utils.PyDataset)) or hasattr(x, "__next__"):
        if y is not None or batch_size is not None:
            raise ValueError("`y` and `batch_size` are only for array inputs; a dataset or "
                             f"generator yields whole batches. Received: y={type(y).__name__}, "
                             f"batch_size={batch_size!r}")
        if isinstance(x, tf.data.Dataset):
            cardinality = int(x.cardinality())
            return _from_iterable(x.as_numpy_iterator(), steps, cardinality if cardinality >= 0 else None)
        if isinstance(x, keras.utils.PyDataset):
            n = x.num_batches
            return _from_iterable((x[i] for i in (range(n) if n is not None else itertools.count())),
                                  steps, n)
        return _from_iterable(x, steps, None)
    leaves = keras.tree.flatten(x)
    if not leaves or not all(hasattr(leaf, "shape") and len(leaf.shape) > 0 for leaf in leaves):
        raise ValueError("`x` must be arrays or tensors, a tf.data.Dataset, a "
                         f"keras.utils.PyDataset or a generator. Received: x={type(x).__name__}")
    check_int("batch_size", batch_size, minimum=1, allow_none=True)
    size = 32 if batch_size is None else batch_size
    n = int(leaves[0].shape[0])
    if n == 0:
        raise ValueError(f"`x` holds no samples. Received: x with shape {tuple(leaves[0].shape)}")
    per_epoch = math.ceil(n / size)
    arrays = keras.tree.map_structure(lambda a: None if a is None else np.asarray(a), (x, y))

    def batch(i: int) -> tuple[Any, Any, Any]:
        part = slice(i * size, min(n, (i + 1) * size))
        bx, by = keras.tree.map_structure(lambda a: None if a is None else a[part], arrays)
        return (bx, by, None)

    kept = [batch(i) for i in range(min(steps, per_epoch))]
    # Only the last batch of a pass can be shorter.
    signatures = {signature(kept[0]), signature(batch(per_epoch - 1))}
    return Batches(_cycle(kept, steps), per_epoch, len(signatures))


def _clone(model: Any, mode: str) -> Any:
    """A clone of `model` with its weights and compile arguments, in `mode`."""
    import keras

    if not getattr(model, "compiled", False):
        raise ValueError("compare needs a compiled model (it trains clones with the same "
                         "optimizer, loss and metrics). Received: a model that was not compiled")
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
    return report.compilations, wall, report.compile_thread_time_s, report.trace_paths


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


def _compile_pass(model: Any, batches: Sequence[tuple[Any, Any, Any]], mode: str,
                  log_dir: str | os.PathLike[str]) -> _ModeRun:
    """Clones the model for `mode` and runs its profiled compile pass.

    The clone is left where the compile pass started (weights and optimizer
    state), ready for the timed steps. Peak memory is that of this pass:
    building the clone, compiling, training one step per signature.
    """
    import tensorflow as tf

    from keras_xla_guard.runtime.profiler import ProfilerSession

    if mode == "autoclustering" and not autoclustering_ready(tf):
        raise autoclustering_refusal()
    first_of: dict[Any, int] = {}
    for i, batch in enumerate(batches):
        first_of.setdefault(signature(batch), i)
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
        finally:
            files = session.stop()
        compilations, compile_time_s, compile_thread_s, trace_paths = _count_compilations(files)
        _assign(clone.variables, initial)
        _assign(clone.optimizer.variables, compile_pass.optimizer_state)
    return _ModeRun(mode, clone, spec, len(first_of), compile_pass_s, compile_pass.times,
                    compilations, compile_time_s, compile_thread_s, trace_paths,
                    memory.peak(), memory.kind)


def _timed_steps(run: _ModeRun, batches: Sequence[tuple[Any, Any, Any]]) -> None:
    """Trains `run`'s clone on `batches` (all compiled already), timing each step."""
    import tensorflow as tf

    with _jit_for(tf, run.mode):
        timer = _fit(run.clone, _dataset(batches, run.spec))
    run.times.extend(timer.times)
    run.losses.extend(timer.losses)


def _figures(run: _ModeRun) -> ModeFigures:
    step_time = steady_step_time(run.times)
    startup, per_signature = one_time_costs(run.compile_pass_s, run.compile_steps_s, step_time,
                                            run.compile_time_s)
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


def measure_mode(model: Any, batches: Sequence[tuple[Any, Any, Any]], mode: str,
                 log_dir: str | os.PathLike[str]) -> ModeFigures:
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


def measure_side_by_side(model: Any, batches: Sequence[tuple[Any, Any, Any]],
                         modes: Sequence[str], log_dir: str | os.PathLike[str]) -> list[ModeFigures]:
    """Measures several modes in one process, their timed steps interleaved.

    Each mode's compile pass runs in turn; then the timed steps go in
    `TIMED_CHUNKS` consecutive chunks, every mode training on a chunk before
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
            _timed_steps(run, batches[start:start + size])
    return [_figures(run) for run in runs]


def planned_run(batches: Batches, steps: int, planned_epochs: int | None,
                planned_steps_per_epoch: int | None) -> tuple[int, int, str]:
    """The planned run's steps and signatures, and where the count came from.

    Args:
        batches: What `take_batches` found.
        steps: The compared steps.
        planned_epochs: Epochs planned; `None` for 1.
        planned_steps_per_epoch: Steps per epoch planned; `None` for the
            data's length, or `steps` when that is unknown.

    Returns:
        `(planned_steps, planned_signatures, signatures_counted_from)`.
    """
    epochs = planned_epochs or 1
    per_epoch = planned_steps_per_epoch or batches.steps_per_epoch or steps
    if batches.epoch_signatures is not None:
        return epochs * per_epoch, batches.epoch_signatures, "data"
    seen = len({signature(b) for b in batches.batches})
    return epochs * per_epoch, seen, "compared batches"


def write_summaries(report: CompareReport, log_dir: str | os.PathLike[str]) -> Path:
    """Writes the comparison to TensorBoard beside the guard's runs.

    One run per mode, `<log_dir>/compare/<mode>`, holds that mode's
    figures as scalars under `xla_guard/compare/` (the per-step loss and
    step time at their step; the rest at step 0), so TensorBoard overlays
    the modes; `<log_dir>/compare` holds the verdict and the figures table
    as text (`xla_guard/compare/verdict`), and the whole report as
    `compare_report.json`, which the guard's HTML report shows.

    Args:
        report: The report.
        log_dir: The guard's log dir.

    Returns:
        The `<log_dir>/compare` directory.
    """
    from keras_xla_guard.output.runfile import COMPARE_FILE
    from keras_xla_guard.output.tensorboard import (
        SummaryWriter,
        escape_markdown,
        markdown_table,
    )

    root = Path(log_dir) / COMPARE_SUBDIR
    for name, figures in report.modes.items():
        writer = SummaryWriter(root / name)
        try:
            writer.write_scalars({
                "compare/step_time_s": figures.step_time_s,
                "compare/compilations": figures.compilations,
                "compare/compile_time_s": figures.compile_time_s,
                "compare/startup_s": figures.startup_s,
                "compare/distinct_signatures": figures.distinct_signatures,
                "compare/projected_run_s": report.projected_run_s[name],
                "compare/final_loss": figures.final_loss,
                **({} if figures.peak_memory_bytes is None
                   else {"compare/peak_memory_bytes": figures.peak_memory_bytes}),
            }, step=0)
            for step, (loss, seconds) in enumerate(zip(figures.losses, figures.step_times_s)):
                writer.write_scalars({"compare/loss": loss, "compare/step_time_ms": seconds * 1e3},
                                     step=step)
        finally:
            writer.close()
    rows = [(name, f"{f.step_time_s * 1e3:.3f}", f.compilations, f"{f.compile_time_s:.3f}",
             f.distinct_signatures, f"{report.projected_run_s[name]:.3f}", f"{f.final_loss:.6g}")
            for name, f in report.modes.items()]
    table = markdown_table(("mode", "step ms", "compilations", "compile s", "signatures",
                            "projected run s", "final loss"), rows)
    writer = SummaryWriter(root)
    try:
        writer.write_text("compare/verdict", f"**{escape_markdown(report.verdict)}**\n\n{table}",
                          step=0)
    finally:
        writer.close()
    # The whole result, for the guard's HTML report (`output.runfile.find_compare`).
    (root / COMPARE_FILE).write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    return root


def compare(
    model: Any,
    x: Any,
    y: Any = None,
    *,
    batch_size: int | None = None,
    steps: int = 50,
    modes: Sequence[str] = ("plain", "jit_compile"),
    planned_epochs: int | None = None,
    planned_steps_per_epoch: int | None = None,
    log_dir: str | os.PathLike[str] | None = None,
) -> CompareReport:
    """Measures whether XLA pays for this model and data, mode by mode.

    Each mode trains its own clone of `model` (same initial weights, same
    optimizer configuration, loss and metrics) on the same `steps` batches,
    taken once from `x`. Compilations are counted in a real profiler trace;
    step times are the steady-state median of unprofiled steps. `model`
    itself is not trained and its `jit_compile` is not changed.

    Args:
        model: A compiled Keras 3 model (TensorFlow backend).
        x: Anything `fit` takes: arrays (with `y`), a `tf.data.Dataset`,
            a `keras.utils.PyDataset`, a generator.
        y: Targets for array inputs. Defaults to `None`.
        batch_size: Batch size for array inputs. Defaults to `32` there.
        steps: Batches each mode trains on. Defaults to `50`.
        modes: At least two of `"plain"`, `"jit_compile"`,
            `"autoclustering"`. Defaults to `("plain", "jit_compile")`.
            `"autoclustering"` on a CPU-only machine needs
            `TF_XLA_FLAGS=--tf_xla_cpu_global_jit` before TensorFlow starts
            (use the `keras-xla-guard compare` CLI, which runs each mode in
            its own process).
        planned_epochs: Epochs of the run to project. Defaults to `1`.
        planned_steps_per_epoch: Steps per epoch of that run. Defaults to
            the data's length (or `steps` when the data has no known end).
        log_dir: The guard's log dir: the compile passes' traces and the
            TensorBoard summaries go under `<log_dir>/compare/`. Defaults
            to `"logs/xla_guard"`.

    Returns:
        A `CompareReport`.

    Raises:
        ValueError: On a bad argument, an uncompiled model, or
            `"autoclustering"` where it cannot run (see `modes`).
        ProfilerBusyError: If another profiler is running.

    Example:

    ```python
    report = keras_xla_guard.compare(model, x_train, y_train, batch_size=64,
                                     planned_epochs=10)
    print(report.verdict)
    ```
    """
    started = time.perf_counter()
    modes = validate_modes(modes)
    check_int("steps", steps, minimum=1)
    check_int("planned_epochs", planned_epochs, minimum=1, allow_none=True)
    check_int("planned_steps_per_epoch", planned_steps_per_epoch, minimum=1, allow_none=True)
    check_int("batch_size", batch_size, minimum=1, allow_none=True)
    if log_dir is None:
        from keras_xla_guard.runtime.config import DEFAULT_LOG_DIR

        log_dir = DEFAULT_LOG_DIR
    import tensorflow as tf

    if "autoclustering" in modes and not autoclustering_ready(tf):
        raise autoclustering_refusal()
    data = take_batches(x, y, batch_size=batch_size, steps=steps)
    figures = measure_side_by_side(model, data.batches, modes, Path(log_dir) / COMPARE_SUBDIR)
    planned_steps, planned_signatures, counted_from = planned_run(
        data, steps, planned_epochs, planned_steps_per_epoch)
    report = build_report(figures, planned_steps=planned_steps, planned_signatures=planned_signatures,
                          signatures_counted_from=counted_from)
    report = dataclasses.replace(report, wall_s=time.perf_counter() - started)
    write_summaries(report, log_dir)
    return report
