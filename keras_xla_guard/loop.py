"""`XlaGuard`: the guard for custom training loops, without `model.fit`.

A thin adapter over `XlaGuardEngine`, like the Keras callback: the user's
loop marks epochs with `guard.epoch(epoch)` and the guard counts steps by
wrapping the train step with `guard.watch(train_step)`. The wrapper runs in
Python around the call, so the compiled function itself is never changed.
Neither Keras nor TensorFlow is imported here.
"""

from __future__ import annotations

import functools
import inspect
import os
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from keras_xla_guard import backend as backends
from keras_xla_guard._adapter import GuardAdapter, model_op_layers
from keras_xla_guard._checks import check_int, check_model
from keras_xla_guard._interrupts import InterruptGate
from keras_xla_guard.errors import XlaGuardWarning
from keras_xla_guard.runtime.config import DEFAULT_LOG_DIR, GuardConfig, config_args_doc
from keras_xla_guard.runtime.engine import xla_mode_of
from keras_xla_guard.trace.report import CoverageReport

__all__ = ["WatchedFunction", "XlaGuard"]

# Epoch ends in a row at which a watched step held more compiled programs than before:
# recompiles that pile up executables (google/flax#5548) rather than a few shapes.
_GROWTH_EPOCHS = 3

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _positional_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    """Names of `fn`'s positional parameters, to name inputs in explanations."""
    target = getattr(fn, "python_function", fn)
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params if p.kind in _POSITIONAL)


@dataclass(frozen=True)
class WatchedFunction:
    """What a run saw of one step `XlaGuard.watch` wrapped.

    Attributes:
        name: The step's name (`fn.__name__`).
        calls: Calls inside `guard.epoch(...)` blocks.
        compilations: Programs compiled during those calls, where the
            backend counts them (JAX); `None` on TensorFlow.
        executables: Compiled programs the step holds now (a `jax.jit`
            function's cache); `None` where unknown.
        reached_xla: Whether the step ran through XLA: it compiled a
            program or holds one; `None` where the backend cannot tell.
    """

    name: str
    calls: int
    compilations: int | None
    executables: int | None
    reached_xla: bool | None


class _WatchedStep:
    """A train step wrapped by `XlaGuard.watch`.

    Calls go straight to the wrapped callable after one Python-side step
    mark; attributes the wrapper does not define (`get_concrete_function`,
    `experimental_get_tracing_count`, ... of a `tf.function`; `lower` of a
    `jax.jit`) are read from the wrapped callable.
    """

    def __init__(self, guard: XlaGuard, fn: Callable[..., Any], probe: backends.StepProbe) -> None:
        functools.update_wrapper(self, fn, updated=())
        self._guard = guard
        self._names = _positional_names(fn)
        self._name = str(getattr(fn, "__name__", None) or type(fn).__name__)
        self._probe = probe
        self._calls = 0
        self._compiled = 0
        # Compiled programs held at each epoch's end (the jit cache size), for the growth warning.
        self._held: list[int] = []
        self._growth_warned = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        guard = self._guard
        if guard._epoch is None:
            return self.__wrapped__(*args, **kwargs)
        before = guard._before_step(self, args, kwargs)
        try:
            return self.__wrapped__(*args, **kwargs)
        finally:
            guard._after_step(self, before)

    def _read(self, pair: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
        reader = self._probe.signature
        assert reader is not None
        return reader(*pair)

    def summary(self, counted: bool) -> WatchedFunction:
        """This step's `WatchedFunction`; `counted`: whether the backend counts compilations."""
        held = self._probe.executables()
        compiled = self._compiled if counted else None
        reached = None if compiled is None else bool(compiled or held)
        return WatchedFunction(self._name, self._calls, compiled, held, reached)

    def _inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, as signatures name them."""
        names = self._names
        inputs = {names[i] if i < len(names) else f"args[{i}]": value for i, value in enumerate(args)}
        inputs.update(kwargs)
        return inputs

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        # Lets `@guard.watch` decorate a method like a plain function would.
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_guard", "_probe"):
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"<keras_xla_guard watched step {self.__wrapped__!r}>"


class _EpochScope:
    """Context manager returned by `XlaGuard.epoch`.

    Inside the block signals pass as usual; one that lands in `__exit__`
    (or comes while it stops the profiler) waits until the epoch is ended or
    its window stopped, then goes on up (`_interrupts.InterruptGate`).
    """

    def __init__(self, guard: XlaGuard, epoch: int, steps: int | None) -> None:
        self._guard = guard
        self.epoch = epoch
        self.steps = steps
        self._gate = InterruptGate(shield=[_EpochScope.__exit__.__code__], keep_first=False)

    def __enter__(self) -> _EpochScope:
        self._gate.__enter__()
        try:
            self._guard._enter_epoch(self.epoch, self.steps)
        except BaseException as e:
            self._gate.__exit__(type(e), e, e.__traceback__)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        self._gate.hold()
        try:
            self._guard._exit_epoch(self.epoch, failed=exc is not None)
        finally:
            self._gate.__exit__(exc_type, exc, tb)
        # Never swallow the user's exception: it propagates as raised.
        return False


@config_args_doc
class XlaGuard(GuardAdapter):
    """Measures how much of a custom training loop's op time runs under XLA.

    The same guard as `XlaGuardCallback`, for loops that call their own
    train step (a `tf.function(jit_compile=True)`, or on JAX a `jax.jit`
    step: Flax NNX's `nnx.jit`, Keras' `stateless_call` inside `jax.jit`)
    instead of `model.fit`. Wrap the step with `watch()` and run each epoch
    inside `with guard.epoch(epoch):`. In the selected epochs the guard
    starts the framework's profiler for a window of steps, marks every step for XProf,
    analyzes the trace on a background thread and writes the same reports
    and TensorBoard output (`xla_guard/...` scalars, a Custom Scalars layout
    and a text table) as the callback. In every epoch, profiled or not, it
    records each step's concrete input signature (shapes and dtypes of the
    call's arguments), counts the XLA compilations they cause and explains
    which input and dimension varied. On JAX the compilations are JAX's own
    (`jax.monitoring`), and a signature is the key `jax.jit` compiles by:
    pytree paths, weak types, static arguments and the function object
    (docs/jax.md). Nothing inside the guard can break training: its own
    failures become `XlaGuardWarning`s.

    Args:
        {config_args}
        config: A `GuardConfig` to use instead of the keyword arguments
            above (the same one can serve `XlaGuardCallback`). Defaults to
            `None`.
        strategy: The `tf.distribute.Strategy` the loop trains under.
            Under `MultiWorkerMirroredStrategy` with two or more workers
            each worker profiles into `<log_dir>/<task_type>_<task_id>/`
            and saves its reports there (`xla_guard_reports.json`), and the
            chief writes every worker's figures to TensorBoard in
            `<log_dir>` after each profiled epoch (docs/multiworker.md);
            `guard.worker` then holds the worker's `WorkerInfo`. Defaults
            to `None`: the strategy whose `scope()` is active when the
            first epoch begins, else the cluster in `TF_CONFIG`.
        model: The Keras model the loop trains, if it trains one: a built
            `keras.Model` (or `tf_keras.Model`) instance. Its
            advice then names the layer each op without an XLA kernel sits
            in, and a result `keras_xla_guard.compare` saved in `log_dir`
            counts as evidence only when it measured this model (same
            class and parameter count); one of another model is set aside
            with an `XlaGuardWarning`. Each op of a report's op table is
            given its layer (`OpStat.layer`), as under the callback.
            Defaults to `None`: a saved result is quoted with the model it
            measured, unmatched, and ops have no layer.
        backend: `"tensorflow"` or `"jax"`: the framework the watched steps
            run on. Defaults to `None`: the one whose compiled function the
            first watched step is (a `tf.function`, a `jax.jit`), else the
            one framework the process imported, else Keras' backend.

    Raises:
        ValueError: If an argument is invalid.

    Example:

    ```python
    import tensorflow as tf
    from keras_xla_guard import XlaGuard

    w = tf.Variable(tf.zeros((8, 1)))
    x = tf.random.normal((512, 8))
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(32)

    @tf.function(jit_compile=True)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((x @ w - y) ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    with XlaGuard(log_dir="logs/xla_guard", profile_epochs=(1,)) as guard:
        step = guard.watch(train_step)
        for epoch in range(3):
            with guard.epoch(epoch):
                for x_batch, y_batch in dataset:
                    loss = step(x_batch, y_batch)
    print(guard.reports[1].xla_time_fraction)
    ```
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] = DEFAULT_LOG_DIR,
        *,
        config: GuardConfig | None = None,
        strategy: Any = None,
        model: Any = None,
        backend: str | None = None,
        **fields: Any,
    ) -> None:
        if strategy is not None and not hasattr(strategy, "extended"):
            raise ValueError(
                f"`strategy` must be a tf.distribute.Strategy or None. Received: strategy={strategy!r}"
            )
        if backend is not None and backend not in backends.BACKENDS:
            raise ValueError(
                f"`backend` must be one of {list(backends.BACKENDS)} or None. Received: backend={backend!r}"
            )
        check_model("model", model)
        self._backend = backends.get(backend) if backend is not None else None
        self._init_guard(
            "XlaGuard", config, {"log_dir": log_dir, **fields}, notes=[self._jit_notes], backend=self._backend
        )
        # One flag per watched step: whether it runs compiled by XLA.
        self._watched_jit: list[bool] = []
        self._watched: list[_WatchedStep] = []
        # Whether the backend of the last run counted its compilations (JAX).
        self._counts_compiles = False
        self._running = False
        self._epoch: int | None = None
        self._step = 0
        self._inputs: Any = None
        self._strategy = strategy
        self._model = model
        self._compare_set_aside = False

    @property
    def stop_requested(self) -> bool:
        """Whether `on_violation="stop"` asks the loop to end training."""
        return self.engine.stop_requested

    def observe(self, dataset: Any) -> Any:
        """Returns `dataset` with a `map` that records every batch's input signature.

        For loops whose watched step does not receive the batch as its
        arguments (e.g. it pulls from an iterator itself, or gets
        per-replica values from `strategy.run`): the signatures are then
        read from the batches the dataset produces, one per watched step,
        instead of from the step's arguments.

        Args:
            dataset: The `tf.data.Dataset` of training batches.

        Returns:
            A dataset yielding the same batches in the same order.

        Raises:
            ValueError: If `dataset` is not a `tf.data.Dataset`.

        Example:

        ```python
        dataset = guard.observe(dataset)
        for epoch in range(3):
            with guard.epoch(epoch):
                for x_batch, y_batch in dataset:
                    step(x_batch, y_batch)
        ```
        """
        from keras_xla_guard.signature_feed import SignatureFeed

        if self._inputs is None:
            self._inputs = SignatureFeed(self.engine)
        return self._inputs.observe(dataset)

    def watch(self, fn: Callable[..., Any], jit_compile: bool | None = None) -> Callable[..., Any]:
        """Wraps a train step so that each call counts as one training step.

        The wrapper marks the step for the profiler (TensorFlow's
        `Trace("train", step_num=..., _r=1)` region or JAX's
        `StepTraceAnnotation`, only inside a profiling window) and then calls `fn` with
        the same arguments. It works in Python around the call: nothing is
        added to a compiled function, the return value and any exception
        pass through unchanged, and `fn`'s name, docstring and attributes
        (e.g. `get_concrete_function` of a `tf.function`) stay reachable.
        Each call also records the concrete input signature of its
        arguments (named after `fn`'s parameters). Call it from Python, not
        from inside another `tf.function` (there it would run only while
        tracing). Calls outside `with guard.epoch(...)` are passed through
        unmarked. Watch the step before the first epoch: whether it runs
        under XLA decides, for the whole run, whether new signatures count
        as XLA compilations (and `max_compilations` applies).

        Args:
            fn: The train step: a `tf.function`, a `jax.jit` function, or
                any callable (one that calls jitted code counts that code's
                compilations on JAX).
            jit_compile: Whether `fn` runs compiled by XLA. Defaults to
                `None`: read from a `tf.function`'s `jit_compile` (always
                `True` on JAX, where every array op runs through XLA); pass
                `True` for a Python step that calls a
                `tf.function(jit_compile=True)` itself (e.g. through
                `strategy.run`).

        Returns:
            The wrapped step; call it instead of `fn`. Watching an already
            watched step of this guard returns it unchanged.

        Raises:
            ValueError: If `fn` is not callable or `jit_compile` is not a
                bool or `None`.

        Example:

        ```python
        import jax

        step = guard.watch(jax.jit(train_step))  # counts JAX's compilations per call
        ```
        """
        if isinstance(fn, _WatchedStep) and fn._guard is self:
            return fn
        if not callable(fn):
            raise ValueError(f"`fn` must be a callable train step. Received: fn={fn!r}")
        if jit_compile is not None and not isinstance(jit_compile, bool):
            raise ValueError(
                f"`jit_compile` must be True, False or None. Received: jit_compile={jit_compile!r}"
            )
        if self._backend is None:
            self._backend = backends.for_step(fn)
        probe = self._backend.step_probe(fn, _positional_names(fn))
        self._watched_jit.append(probe.jit_compile if jit_compile is None else jit_compile)
        watched = _WatchedStep(self, fn, probe)
        self._watched.append(watched)
        return watched

    @property
    def watched(self) -> tuple[WatchedFunction, ...]:
        """What the run saw of each watched step, in the order they were watched.

        A step that ran but `reached_xla` is `False` compiled nothing and
        holds no compiled program: its calls ran outside XLA (a warning
        says so when the run ends).
        """
        return tuple(w.summary(self._counts_compiles) for w in self._watched)

    def epoch(self, epoch: int, steps: int | None = None) -> _EpochScope:
        """Marks one epoch of the loop; use it as a context manager.

        Entering it starts the epoch (and, in a selected epoch, arms the
        profiling window); leaving it ends the epoch and hands the trace to
        analysis. If an exception leaves the block, the profiler is stopped
        and the exception propagates unchanged.

        Args:
            epoch: 0-based epoch index.
            steps: Steps the epoch will run, if known. With fewer steps than
                `skip_steps`, the window then starts at step 0. Defaults to
                `None`.

        Returns:
            A context manager for the epoch's `with` block.

        Raises:
            ValueError: If `epoch` or `steps` is invalid.
        """
        check_int("epoch", epoch, minimum=0)
        check_int("steps", steps, minimum=1, allow_none=True)
        return _EpochScope(self, epoch, steps)

    def close(self, timeout: float | None = None) -> None:
        """Ends the run: stops the profiler, waits for analyses, flushes.

        Prints the reports when `verbose=1`. Calling it again does nothing;
        a later `epoch()` starts a new run with the same guard.

        Args:
            timeout: Seconds to wait for pending analyses. Defaults to no
                limit.
        """
        if not self._running:
            return
        self._running = False
        self._epoch = None
        self._warn_never_compiled()
        self._end_engine_run(timeout)

    def __enter__(self) -> XlaGuard:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is not None:
            self.engine.abort()
        self.close()
        return False

    # ------------------------------------------------------------ internals

    def _enter_epoch(self, epoch: int, steps: int | None) -> None:
        if self._epoch is not None:
            raise RuntimeError(
                f"`guard.epoch({epoch})` was entered inside `guard.epoch({self._epoch})`; "
                "epochs cannot be nested."
            )
        if not self._running:
            self._running = True
            if self._backend is not None:
                self.engine.use_backend(self._backend)
            for watched in self._watched:
                watched._calls = watched._compiled = 0
                watched._held.clear()
            self._begin_engine_run(
                self._strategy,
                xla_mode=xla_mode_of(any(self._watched_jit), self.engine.backend),
                op_layers=model_op_layers(self._model) if self._model is not None else None,
            )
            self._counts_compiles = self.engine.compilations_seen is not None
            if self._inputs is not None:
                self._inputs.use_observed()
        self._epoch = epoch
        self._step = 0
        self.engine.epoch_begin(epoch, steps=steps)
        if self._inputs is not None:
            self._inputs.begin_epoch(epoch)

    def _exit_epoch(self, epoch: int, failed: bool) -> None:
        self._epoch = None
        if failed:
            self.engine.abort()
        else:
            if self._inputs is not None:
                self._inputs.end_epoch()
            self.engine.epoch_end(epoch)
            self._check_executables(epoch)

    def _before_step(
        self, watched: _WatchedStep, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> int | None:
        """Marks the step and reads its inputs; the run's compilations so far (`None`: not counted)."""
        engine = self.engine
        step, self._step = self._step, self._step + 1
        engine.step_begin(step)
        # Before the inputs: their signature then waits for the step's counted compilation.
        engine.inside_step(True)
        try:
            if self._inputs is not None:
                self._inputs.step(step)
            elif watched._probe.signature is None:
                engine.observe_inputs(watched._inputs(args, kwargs), step=step)
            else:
                engine.observe_inputs((args, kwargs), step=step, read=watched._read)
        except BaseException:
            # A budget's `RecompilationLimitError`: the step will not run.
            engine.inside_step(False)
            raise
        return engine.compilations_seen

    def _after_step(self, watched: _WatchedStep, before: int | None) -> None:
        engine = self.engine
        engine.inside_step(False)
        watched._calls += 1
        if before is not None:
            watched._compiled += (engine.compilations_seen or 0) - before

    def _check_executables(self, epoch: int) -> None:
        """Warns once per step whose compiled programs grew at each of the last epochs' ends."""
        for watched in self._watched:
            held = watched._probe.executables()
            if held is None or watched._calls == 0:
                continue
            watched._held.append(held)
            last = watched._held[-(_GROWTH_EPOCHS + 1) :]
            growing = len(last) == _GROWTH_EPOCHS + 1 and all(a < b for a, b in zip(last, last[1:]))
            if growing and not watched._growth_warned:
                watched._growth_warned = True
                warnings.warn(
                    f"keras-xla-guard: {watched._name} holds {held} compiled programs after epoch {epoch}, "
                    f"more at each of the last {_GROWTH_EPOCHS} epochs' ends ({', '.join(map(str, last))}): "
                    "every new input signature or static argument keeps one more executable alive, "
                    "and their memory grows until the step is deleted. guard.compilations names the "
                    "signatures; pad them to a few sizes or make the varying argument non-static.",
                    XlaGuardWarning,
                    stacklevel=4,
                )

    def _warn_never_compiled(self) -> None:
        """Warns for each watched step that ran but never reached XLA (JAX, where compilations are counted)."""
        for summary in self.watched:
            if summary.reached_xla is False and summary.calls:
                warnings.warn(
                    f"keras-xla-guard: the watched step {summary.name} never reached XLA: its "
                    f"{summary.calls} call(s) compiled no program and it holds none, so its work ran "
                    "outside XLA (NumPy or Python). Its 0 compilations say nothing about recompilation; "
                    "wrap the step in jax.jit to compile it.",
                    XlaGuardWarning,
                    stacklevel=4,
                )

    def _saved_compare(self) -> Any:
        """The result `compare` saved in the log dir, unless it measured another model than `model`."""
        from keras_xla_guard.output.runfile import find_compare

        try:
            compare = find_compare(self.config.log_dir)
        except (OSError, ValueError):
            return None
        if compare is None or self._model is None:
            return compare
        from keras_xla_guard.comparison.report import same_model

        match, measured, here = same_model(compare, self._model)
        if match:
            return compare
        if not self._compare_set_aside:
            # Once per guard: every profiled window reads the log dir again.
            self._compare_set_aside = True
            warnings.warn(
                f"keras-xla-guard: the compare result in {self.log_dir!r} measured another model "
                f"({measured}; this loop trains {here}): it is not used as evidence. Run compare on this "
                "model, or give each model its own log_dir.",
                XlaGuardWarning,
                stacklevel=2,
            )
        return None

    def _jit_notes(self, report: CoverageReport) -> list[str]:
        """Why no XLA ran in a window, with advice its evidence supports (`diagnose/advice.py`)."""
        figures = report.measured()
        if figures.xla_time_s > 0 or figures.non_xla_op_time_s == 0 or not self._watched_jit:
            return []
        if any(self._watched_jit) and self.engine.xla_mode == "jit_compile":
            return [
                "the watched train step runs compiled by XLA but no XLA execution was "
                "recorded in this window; check the framework's log for compilation errors"
            ]
        from keras_xla_guard.diagnose.advice import (
            JitEvidence,
            blocked_verdict,
            jit_off_verdict,
            measure_first,
        )
        from keras_xla_guard.diagnose.explain import blocker_names, trace_blockers

        compare = self._saved_compare()
        autoclustering = self.engine.xla_mode == "autoclustering"
        # The window's own trace says where the step ran: the CPU's measured slowdowns
        # are no evidence for a step on an accelerator.
        accelerator = report.time_base == "device"
        evidence = JitEvidence(
            blockers=blocker_names(trace_blockers(report, self._model)),
            autoclustering=autoclustering,
            compare=compare,
            accelerator=accelerator,
            device="XLA_GPU_JIT" if accelerator else "XLA_CPU_JIT",
        )
        switch = "train_step = tf.function(train_step, jit_compile=True)"
        if not autoclustering:
            what = "XLA is not requested: the watched train step is not a tf.function(jit_compile=True)."
            return [jit_off_verdict(evidence, what, switch).as_note()]
        blocked = blocked_verdict(evidence, switch)
        return ([blocked.as_note()] if blocked is not None else []) + [
            "auto-clustering is requested (tf.config.optimizer.get_jit()) but no XLA "
            "cluster ran in this window; on a CPU-only machine it also needs "
            "TF_XLA_FLAGS=--tf_xla_cpu_global_jit before TensorFlow is imported. "
            "keras_xla_guard.doctor() in this process diagnoses the switches"
            + (
                ""
                if blocked is not None
                else ". tf.function(jit_compile=True) on the train step needs neither switch. "
                f"{measure_first(accelerator)}"
            )
        ]
