"""The guard engine: profiling windows, analysis, one record per epoch.

`XlaGuardEngine` knows nothing about Keras callbacks. Adapters (the Keras
callback `XlaGuardCallback`, the custom-loop guard `XlaGuard` in `loop.py`)
call `train_begin`, `epoch_begin`, `step_begin`,
`epoch_end` and `train_end`; the engine decides when the profiler runs,
analyzes each trace off the training thread, joins each epoch's figures
into one `EpochRecord` (`runtime/epochs.py`) and hands it to its
`ReportSink`s. It names no concrete output: the adapters pass the sinks
(`output/sinks.py`) and write the HTML page (`output/page.py`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from keras_xla_guard import backend as backends
from keras_xla_guard._checks import check_int
from keras_xla_guard._interrupts import held
from keras_xla_guard.backend import Backend
from keras_xla_guard.errors import ProfilerBusyError, RecompilationLimitError, XlaGuardWarning
from keras_xla_guard.runtime import budget, failures
from keras_xla_guard.runtime.compile_log import (
    WARM_UP,
    Compilation,
    CompileLog,
    EpochCompilations,
    predicted_compilations,
)
from keras_xla_guard.runtime.config import (
    DEFAULT_LOG_DIR,
    DEFAULT_MAX_COMPILATIONS,
    ON_VIOLATION_CHOICES,
    GuardConfig,
)
from keras_xla_guard.runtime.epochs import EpochAssembly, signed
from keras_xla_guard.runtime.policy import CompilationPolicy
from keras_xla_guard.runtime.profiler import ProfilerSession, stop_stale_session
from keras_xla_guard.runtime.sink import INCOMPLETE, CallRecord, EpochRecord, ReportSink
from keras_xla_guard.signatures.signature import Signature
from keras_xla_guard.signatures.tracker import FUNCTIONS, EpochSignatures, SignatureTracker
from keras_xla_guard.trace.analysis import analyze_xspace, combine_reports
from keras_xla_guard.trace.report import CoverageReport
from keras_xla_guard.trace.xplane import host_of, open_xspace

__all__ = [
    "DEFAULT_LOG_DIR",
    "DEFAULT_MAX_COMPILATIONS",
    "ON_VIOLATION_CHOICES",
    "NoteProvider",
    "OpLayers",
    "SinkFactory",
    "XlaGuardEngine",
    "xla_mode_of",
]

# Extra notes for a finished report (e.g. verdicts on why coverage is low).
NoteProvider = Callable[[CoverageReport], list[str]]
# Names the Keras layer of each op of a report's op table (None: unknown).
OpLayers = Callable[[Sequence[str]], Sequence["str | None"]]
# Builds a run's sinks from the config, fresh for each run.
SinkFactory = Callable[[GuardConfig], Sequence[ReportSink]]
_XLA_MODES = ("jit_compile", "autoclustering", None)
# The functions `call_begin` opens a call of (the train function's calls are epochs).
_CALL_FUNCTIONS = tuple(f for f in FUNCTIONS if f != "train")
# The analysis thread's name prefix: reading `reports` there must not wait
# for the analysis it is part of.
_THREAD_PREFIX = "keras_xla_guard"
_P = ParamSpec("_P")
_R = TypeVar("_R")
# Why a compilation the backend counted may have come without a new input signature (hedged).
_NO_NEW_SIGNATURE = (
    "why (not certain): no new input signature at this step, so another argument of the compiled "
    "{program} changed: e.g. the model state placed or sharded differently (Keras 3.10 on JAX 0.6 "
    "does so at a fit's first steps), a Python value baked into the program, or a retrace\n"
    'find out: jax.config.update("jax_explain_cache_misses", True) logs the argument that missed '
    "the cache"
)
_WARMED_NOTE = "warm_up compiled it ahead of the first epoch, so no batch of the run caused it"


def xla_mode_of(jit_compile: bool, backend: Backend | None = None) -> str | None:
    """How a train step is compiled: `"jit_compile"`, `"autoclustering"` or `None`.

    The one rule for the callback and the loop guard alike: the backend's
    (`Backend.xla_mode`).

    Args:
        jit_compile: Whether the step itself is compiled with XLA
            (`model.jit_compile`, a `tf.function(jit_compile=True)`).
        backend: The backend running the step. Defaults to `None`:
            TensorFlow's, where `"autoclustering"` means
            `tf.config.optimizer.get_jit()` requests it.

    Returns:
        The mode; `None` when XLA compiles nothing.
    """
    return (backend if backend is not None else backends.get("tensorflow")).xla_mode(jit_compile)


def _never_raises(
    method: Callable[Concatenate[XlaGuardEngine, _P], _R],
) -> Callable[Concatenate[XlaGuardEngine, _P], _R | None]:
    """Turns any exception inside a guard hook into a warning.

    The user's training must never fail because of the guard: on error the
    profiler is stopped, the current window is marked failed, and training
    continues.
    """

    @functools.wraps(method)
    def wrapper(self: XlaGuardEngine, *args: _P.args, **kwargs: _P.kwargs) -> _R | None:
        try:
            return method(self, *args, **kwargs)
        except RecompilationLimitError:
            # The one deliberate exception: the user asked for on_violation="raise".
            raise
        except Exception as e:  # noqa: BLE001 - by design, see docstring
            self._fail(method.__name__, e)
            return None

    return wrapper


def _program_ref(program: Any) -> Callable[[], Any]:
    """A reference to a compiled function that does not keep it alive (where it can)."""
    if program is None:
        return lambda: None
    try:
        return weakref.ref(program)
    except TypeError:
        return lambda: program


@dataclasses.dataclass
class _Function:
    """A test or predict function's signatures, kept while Keras keeps the same function."""

    program: Callable[[], Any]
    tracker: SignatureTracker

    def serves(self, program: Any, xla: bool) -> bool:
        """Whether a call of `program` continues this function (its compiled programs are cached)."""
        return program is not None and self.program() is program and self.tracker.xla == xla


@dataclasses.dataclass
class _OpenCall:
    """A test or predict call between `call_begin` and `call_end`."""

    call: int
    epoch: int | None
    unavailable: str | None = None
    # A call outside a run publishes through sinks of its own.
    sinks: list[ReportSink] | None = None
    # A call outside a run counts its compilations itself (JAX).
    log: CompileLog | None = None
    unwatch: Callable[[], None] | None = None


@dataclasses.dataclass
class _Window:
    epoch: int
    session: ProfilerSession
    first_step: int
    started: float
    next_step: int
    step_trace: Any = None
    # One past the last step the adapter saw finish (`step_end`); `None`
    # when it reports no ends.
    done_step: int | None = None


class XlaGuardEngine:
    """Profiles selected epochs and turns each trace into a `CoverageReport`.

    The engine behind `XlaGuardCallback` and `XlaGuard`, for other
    adapters. An adapter calls `train_begin`, `epoch_begin`, `step_begin`,
    `epoch_end` and `train_end` (and reports each step's inputs with
    `observe_inputs` or `observe_signature`); the engine decides when the
    profiler runs, analyzes each trace off the training thread, applies the
    compilation policy, and hands each epoch's complete `EpochRecord` to its
    `ReportSink`s once.

    Args:
        config: A `GuardConfig`; or pass its fields as keyword arguments.
            Defaults to `None`.
        sinks: Where figures go: a list of sinks for every run, or a
            callable `config -> sinks` called as each run begins (fresh
            sinks per run, e.g.
            `keras_xla_guard.output.sinks.default_sinks`: TensorBoard and
            the run file in `log_dir`, the console, as the callback and the
            loop guard use). Defaults to `None`: no sinks; the figures are
            in `reports` and `signatures`.
        notes: Callables `report -> list[str]` adding notes to each
            finished report (e.g. why coverage is low), called where the
            window is analyzed. Defaults to `()`.
        epoch_notes: Callables like `notes`, called once the epoch's
            signature figures are joined to its report (each compilation
            named with the new signature that caused it), on the thread
            that completes the epoch (often the training thread): keep
            them cheap and pure. Defaults to `()`.
        backend: The `Backend` whose profiler, step markers and cache
            flags the engine uses. Defaults to `None`: TensorFlow's (the
            backend of `tf.function` train steps); the Keras callback
            passes the one Keras runs on (`keras_xla_guard.backend.select`).
        **fields: `GuardConfig`'s fields as keyword arguments, instead of
            `config` (`log_dir`, `profile_epochs`, ...; see `GuardConfig`).

    Raises:
        ValueError: If an argument is invalid.

    Example:

    ```python
    from keras_xla_guard import XlaGuardEngine
    from keras_xla_guard.output.sinks import default_sinks

    engine = XlaGuardEngine(log_dir="logs/xla_guard", profile_epochs=(1,), sinks=default_sinks)
    engine.train_begin(epochs=3, xla_mode="jit_compile")
    for epoch in range(3):
        engine.epoch_begin(epoch, steps=10)
        for step in range(10):
            engine.step_begin(step)
            ...  # run the step
        engine.epoch_end(epoch)
    engine.train_end()
    print(engine.reports[1])
    ```
    """

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        sinks: Sequence[ReportSink] | SinkFactory | None = None,
        notes: Sequence[NoteProvider] = (),
        epoch_notes: Sequence[NoteProvider] = (),
        backend: Backend | None = None,
        **fields: Any,
    ) -> None:
        if config is None:
            config = GuardConfig(**fields)
        elif not isinstance(config, GuardConfig) or fields:
            raise ValueError(
                "XlaGuardEngine takes a GuardConfig or its fields as keyword arguments, not "
                f"both. Received: config={config!r}, fields={sorted(fields)}"
            )
        self.config = config
        self.backend = backend if backend is not None else backends.get("tensorflow")
        self._sinks: Sequence[ReportSink] | SinkFactory = (
            () if sinks is None else sinks if callable(sinks) else list(sinks)
        )
        self._notes = tuple(notes)
        self._epoch_notes = tuple(epoch_notes)
        self.schedule = config.schedule
        self._policy = CompilationPolicy(
            config.max_compilations, config.on_violation, megamorphic=self.backend.name == "tensorflow"
        )
        self._steps_per_call = 1
        self._xla_mode: str | None = None
        self._trace_dir = Path(config.log_dir)
        self._run_sinks: list[ReportSink] = []
        self._reports: dict[int, CoverageReport] = {}
        self._records: dict[int, EpochRecord] = {}
        self._epochs_open = EpochAssembly(self._add_epoch_notes)
        self._lock = threading.Lock()
        # Held from releasing an epoch's records to handing them to the sinks:
        # the analysis thread and the training thread both release, and a
        # sink must get epoch 1 before epoch 2 (TensorBoard reads a lower
        # step after a higher one as a restart and drops data).
        self._publish_lock = threading.RLock()
        self._window: _Window | None = None
        self._pending_epoch: int | None = None
        self._pending_start = 0
        self._first_epoch: int | None = None
        self._epochs: int | None = None
        self._epoch: int | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._futures: list[concurrent.futures.Future[None]] = []
        self.stop_requested = False
        self._violation: str | None = None
        self._ended = False
        self._tracker = SignatureTracker(input_pipeline=self.backend.input_pipeline)
        self._train_program: Callable[[], Any] = _program_ref(None)
        self._functions: dict[str, _Function] = {}
        self._open_calls: dict[str, _OpenCall] = {}
        self._call_counts: dict[str, int] = {}
        self._calls: list[CallRecord] = []
        self._unavailable_warned: set[str] = set()
        self._failures = failures.FailureLog()
        self._running = False
        self._in_epoch = False
        self._signature_stats: dict[int, EpochSignatures] = {}
        self._persistent_cache = self.backend.persistent_cache()
        self._signatures_unavailable: str | None = None
        self._not_profiled: str | None = None
        self._skip_first_step = False
        self._op_layers: OpLayers | None = None
        self._compile_log: CompileLog | None = None
        self._compiles_checked = 0
        self._unwatch: Callable[[], None] | None = None
        self._programs: dict[str, str] = {}
        # Whether an adapter reports its train steps' calls (`inside_step`): the compile
        # log then tells the train function's programs whatever their names.
        self._inside_steps = False
        # A compilation budget, where the backend counts its compilations (JAX):
        # each function's new input signatures waiting for their step's
        # compilation, the compilations waiting for their step's signature,
        # and the step each function's signatures have arrived up to.
        self._budget_signatures: dict[str, dict[int | None, budget.BudgetCompilation]] = {
            f: {} for f in FUNCTIONS
        }
        self._budget_rows: list[tuple[Compilation, int | None]] = []
        self._signed_through: dict[str, int] = {}
        # What `warm_up` compiled before the first epoch, where no backend counts it (TensorFlow).
        self._warmed: tuple[Compilation, ...] = ()

    @property
    def log_dir(self) -> Path:
        """The configured log directory (`config.log_dir`)."""
        # Already a Path (GuardConfig converts it), but typed as the str or path the field accepts.
        return Path(self.config.log_dir)

    @property
    def trace_dir(self) -> Path:
        """Where this run's traces go: `log_dir`, or a worker's own directory under it."""
        return self._trace_dir

    @property
    def xla_mode(self) -> str | None:
        """How this run's train step is compiled, as `train_begin` was told."""
        return self._xla_mode

    @property
    def epoch(self) -> int | None:
        """The epoch training is in (or last was in); `None` before the first one."""
        return self._epoch

    @property
    def violation(self) -> str | None:
        """The message of this run's last `max_compilations` violation, or `None`."""
        return self._violation

    @property
    def ended(self) -> bool:
        """Whether `train_end` has ended this run."""
        return self._ended

    # ------------------------------------------------------------------ API

    @property
    def reports(self) -> dict[int, CoverageReport]:
        """Reports keyed by 0-based epoch index.

        Reading this waits for trace analyses still running, so a report
        is there as soon as its epoch has ended.
        """
        if not threading.current_thread().name.startswith(_THREAD_PREFIX):
            self.wait()
        with self._lock:
            return dict(sorted(self._reports.items()))

    @property
    def profiling(self) -> bool:
        """Whether the profiler is running for this guard right now."""
        return self._window is not None

    @property
    def signatures(self) -> dict[int, EpochSignatures]:
        """Input-signature figures of every finished epoch with observed steps.

        Keyed by 0-based epoch index; present for every epoch, profiled or
        not (signature tracking needs no profiler).
        """
        with self._lock:
            return dict(sorted(self._signature_stats.items()))

    @property
    def calls(self) -> tuple[CallRecord, ...]:
        """Every finished call of the test and predict functions, in order.

        Validations inside `fit` (`epoch` set) and `evaluate`/`predict`
        calls outside it (`epoch` `None`); see `call_begin`.
        """
        with self._lock:
            return tuple(self._calls)

    @property
    def compilations(self) -> dict[int, EpochCompilations]:
        """Every finished epoch's compilations, keyed by epoch, profiled or not.

        Counted as they happened where the backend reports them (JAX's
        `jax.monitoring`, `source="counted"`); on TensorFlow, which reports
        none outside its profiler, one per new input signature of each
        function compiled with XLA (`source="signatures"`), with the compile
        time a profiled window measured. The callback's `warm_up` rows
        (`"warm_up"`) sit in the first epoch's.
        """
        with self._lock:
            return {e: r.compilations for e, r in sorted(self._records.items()) if r.compilations is not None}

    def set_programs(self, programs: dict[str, str]) -> None:
        """Names the compiled programs of the model's functions: `{"train_step": "train", ...}`.

        Compilations of other programs count as `"other"`.

        Args:
            programs: Program name (as the backend reports it) -> `"train"`,
                `"test"` or `"predict"`.
        """
        self._programs = dict(programs)
        if self._compile_log is not None:
            self._compile_log.set_programs(programs)

    def use_backend(self, backend: Backend) -> None:
        """Runs the next run on `backend` (a custom loop's step decides it when watched).

        Args:
            backend: The `Backend` whose profiler, step markers, cache and
                compile stream the next run uses.

        Raises:
            RuntimeError: If a run is going on.
        """
        if self._running:
            raise RuntimeError(f"the backend cannot change during a run. Received: backend={backend.name!r}")
        if backend is self.backend:
            return
        self.backend = backend
        self._policy = CompilationPolicy(
            self.config.max_compilations, self.config.on_violation, megamorphic=backend.name == "tensorflow"
        )
        self._tracker = SignatureTracker(input_pipeline=backend.input_pipeline)
        self._train_program = _program_ref(None)
        self._persistent_cache = backend.persistent_cache()

    @property
    def compilations_seen(self) -> int | None:
        """Compilations the backend reported in this run so far; `None` where it reports none (TensorFlow)."""
        log = self._compile_log
        return log.total if log is not None and self._unwatch is not None else None

    def inside_step(self, inside: bool) -> None:
        """The calling thread enters (`True`) or leaves a custom loop's watched train step.

        Where the backend counts compilations, every program compiled on
        this thread meanwhile is the train function's, whatever its name
        (a `jax.jit` step, or jitted code a Python step calls).
        """
        log = self._compile_log
        if log is not None:
            self._inside_steps = True
            log.inside("train" if inside else None)

    def observe_inputs(
        self, inputs: Any, step: int | None = None, *, read: Callable[[Any], Signature] | None = None
    ) -> None:
        """Records the concrete input signature of one training step.

        Cheap (a walk over the structure reading `.shape` and `.dtype`) and
        never raises into training, except `RecompilationLimitError` when
        `on_violation="raise"` and the epoch exceeds `max_compilations`.

        Args:
            inputs: The step's inputs: a nested structure of arrays or
                tensors (e.g. the arguments of a compiled function).
            step: 0-based step index within the epoch, if known.
            read: Reads the signature from `inputs` instead of
                `Signature.of` (a backend's `StepProbe.signature`).
                Defaults to `None`.

        Raises:
            RecompilationLimitError: See above.
        """
        try:
            signature = Signature.of(inputs) if read is None else read(inputs)
        except Exception as e:  # noqa: BLE001 - the guard must not break training
            self._warn(f"reading the input signature failed: {type(e).__name__}: {e}")
            return
        self.observe_signature(signature, step=step)

    def observe_signature(
        self, signature: Signature, step: int | None = None, count: int = 1, *, function: str = "train"
    ) -> None:
        """Records `count` consecutive steps of `function` run with `signature`.

        Args:
            signature: The steps' input signature.
            step: 0-based index of the first of them within the epoch (or
                the test or predict call).
            count: Number of steps. Defaults to `1`.
            function: `"train"`, or `"test"` / `"predict"` inside a call
                that `call_begin` opened. Defaults to `"train"`.

        Raises:
            RecompilationLimitError: With `on_violation="raise"`, when the
                epoch exceeds `max_compilations` (train steps only); or when
                a compilation goes over a `fail_fast` budget open in this
                thread (`keras_xla_guard.max_compilations`).
        """
        try:
            tracker = self._tracker if function == "train" else self._call_tracker(function)
            new = tracker.observe(signature, step=step, count=count)
            epoch = self._epoch if function == "train" else self._open_calls[function].epoch
            if self._counting_log(function) is None:
                if new and tracker.xla:
                    budget.report_compilation(self, function, tracker, signature, epoch=epoch, step=step)
            else:
                # The backend counts the compilations; this signature waits for its step's.
                if new:
                    pending = budget.pending_compilation(
                        self, function, tracker, signature, epoch=epoch, step=step
                    )
                    if pending is not None:
                        self._budget_signatures[function][step] = pending
                if step is not None:
                    self._signed_through[function] = step + count
                error = self._budget_collect()
                if error is not None:
                    raise error
                # The policy looks at the counted compilations when they change (`step_begin`).
                return
            if function != "train":
                return
            self._check_compilations()
        except RecompilationLimitError:
            raise
        except Exception as e:  # noqa: BLE001 - the guard must not break training
            self._warn(f"signature tracking failed: {type(e).__name__}: {e}")

    def signatures_unavailable(self, reason: str, *, function: str = "train") -> None:
        """Marks this run's input-signature figures of `function` unavailable; warns once.

        For `"train"`: from the current epoch on, the epochs' signature
        figures are `None` (never a partial count), `max_compilations` and
        the megamorphic warning are off, and reports, console and
        TensorBoard say why. For `"test"` or `"predict"`: the open call's
        figures are `None` and its `CallRecord` says why (one warning per
        function).

        Args:
            reason: What could not be recorded, naming the Keras version.
            function: The function whose batches could not be recorded.
                Defaults to `"train"`.
        """
        if function != "train":
            self._call_unavailable(function, reason)
            return
        if self._signatures_unavailable is not None:
            return
        self._signatures_unavailable = reason
        # Where the backend counts the compilations, the count stands; only their reasons are missing.
        if self._xla_mode is not None and self._counting_log("train") is None:
            budget.report_unavailable(reason)
        self._warn(
            f"input signatures are unavailable in this run: {reason}. Signature counts, "
            "expected compilations, max_compilations and the megamorphic warning are off "
            "(reported as unavailable, not 0). Pass the training dataset through "
            "guard.observe(dataset) to record it without Keras internals."
        )

    def call_begin(self, function: str, *, xla_mode: str | None = None, program: Any = None) -> None:
        """A call of the test or predict function begins.

        Inside an epoch of a run (between `epoch_begin` and `epoch_end`)
        the call is that epoch's validation and comes with the epoch's
        `EpochRecord.calls`; otherwise (`evaluate` or `predict` outside
        `fit`) `call_end` hands its `CallRecord` to the sinks' `write_call`,
        through fresh sinks when no run is going on. Steps of the call are
        reported with `observe_signature(..., function=function)`; the
        profiling window is closed first (a window holds train steps only).

        Each function keeps its own signatures across its calls while
        `program` is the same object: a signature a validation compiled is
        no compilation in a later `evaluate` (Keras caches its compiled
        test function); a new `program` (e.g. after `model.compile`) starts
        afresh.

        Args:
            function: `"test"` or `"predict"`.
            xla_mode: How the function is compiled, as for `train_begin`
                (`"jit_compile"`, `"autoclustering"` or `None`). Defaults
                to `None`.
            program: The framework's function object (Keras'
                `model.test_function`), compared by identity. Defaults to
                `None`: a new function at every call.

        Raises:
            ValueError: If `function` or `xla_mode` is invalid.
        """
        if function not in _CALL_FUNCTIONS:
            raise ValueError(
                f"`function` must be one of {_CALL_FUNCTIONS} (the train function's calls are "
                f"epochs). Received: function={function!r}"
            )
        if xla_mode not in _XLA_MODES:
            raise ValueError(f"`xla_mode` must be one of {_XLA_MODES}. Received: xla_mode={xla_mode!r}")
        self._begin_call(function, xla_mode, program)

    @_never_raises
    def _begin_call(self, function: str, xla_mode: str | None, program: Any) -> None:
        self._stop_window()
        state = self._functions.get(function)
        xla = xla_mode is not None
        if state is None or not state.serves(program, xla):
            state = self._functions[function] = _Function(
                _program_ref(program),
                SignatureTracker(xla=xla, function=function, input_pipeline=self.backend.input_pipeline),
            )
        call = self._call_counts.get(function, 0)
        self._call_counts[function] = call + 1
        epoch = self._epoch if self._running and self._in_epoch else None
        sinks = None
        if not self._running:
            sinks = list(self._sinks(self.config)) if callable(self._sinks) else list(self._sinks)
        opened = self._open_calls[function] = _OpenCall(call, epoch, sinks=sinks)
        if not self._running:
            log = CompileLog(self._programs)
            opened.unwatch = self.backend.watch_compiles(log.on_phase)
            opened.log = log if opened.unwatch is not None else None
        elif self._compile_log is not None:
            self._compile_log.at_call(None)
        self._budget_signatures[function].clear()
        self._signed_through.pop(function, None)
        state.tracker.begin_epoch(epoch)

    def awaits_signatures(self, function: str) -> bool:
        """Whether a compilation of `function` the backend counted waits for its step's input signature.

        An adapter that reads signatures every few steps reads them now,
        so that a compilation budget counts the compilation (and a
        `fail_fast` one raises) at the next step.

        Args:
            function: `"train"`, `"test"` or `"predict"`.
        """
        self._pull_compilations()
        return any(row.function == function for row, _ in self._budget_rows)

    def call_step(self, function: str, step: int) -> None:
        """A step (or multi-step call) of the open call of `function` begins.

        Optional: where the backend counts its compilations (JAX), it ties
        each compilation of the test or predict function to its step, so
        that a compilation budget names the step and its input signature.

        Args:
            function: `"test"` or `"predict"`.
            step: 0-based index of the step within the call.
        """
        opened = self._open_calls.get(function)
        if opened is None:
            return
        log = (
            opened.log if opened.log is not None else self._compile_log if self._unwatch is not None else None
        )
        if log is not None:
            log.at_call(step)

    @_never_raises
    def call_end(self, function: str) -> CallRecord | None:
        """The call of `function` that `call_begin` opened ends: its figures are published.

        Args:
            function: `"test"` or `"predict"`.

        Returns:
            The call's `CallRecord`; `None` when no call of `function` is
            open.
        """
        if function not in self._open_calls:
            return None
        # Before the call's figures close: its compilations get the call's explanations.
        error = self._budget_collect(final=function)
        record = self._finish_call(function)
        if error is not None:
            raise error
        return record

    def _finish_call(self, function: str) -> CallRecord:
        """Publishes the open call of `function`; its `CallRecord`."""
        opened = self._open_calls.pop(function)
        counted = None
        if opened.log is not None and opened.unwatch is not None:
            opened.unwatch()
            counted = opened.log.take(None)
        tracker = self._functions[function].tracker
        stats: EpochSignatures | None = tracker.end_epoch()
        if opened.unavailable is not None or (stats is not None and stats.steps == 0):
            stats = None
        if counted is None and opened.epoch is None and stats is not None:
            # The backend counts none (TensorFlow): one per new signature.
            counted = predicted_compilations(0, [stats])
        elif counted is not None and stats is not None:
            counted = signed(counted, [stats], self._steps_per_call)
        compiled = None
        if counted is not None:
            compiled = tuple(dataclasses.replace(row, epoch=None) for row in counted.rows)
        if stats is not None and tracker.xla:
            budget.report_epoch(self, function, stats)
        record = CallRecord(function, opened.call, opened.epoch, stats, opened.unavailable, compiled)
        with self._lock:
            self._calls.append(record)
            if opened.epoch is not None:
                self._epochs_open.add_call(opened.epoch, record)
                return record
        sinks = opened.sinks if opened.sinks is not None else self._run_sinks
        for sink in sinks:
            if hasattr(sink, "write_call"):
                self._to_sink(sink, "write_call", record)
        if opened.sinks is not None:
            for sink in opened.sinks:
                self._to_sink(sink, "close", {})
        return record

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until every submitted trace analysis has finished.

        Args:
            timeout: Seconds to wait at most. Defaults to no limit.
        """
        futures = list(self._futures)
        concurrent.futures.wait(futures, timeout=timeout)

    def train_begin(
        self,
        epochs: int | None = None,
        *,
        xla_mode: str | None = None,
        steps_per_call: int = 1,
        trace_dir: str | os.PathLike[str] | None = None,
        sinks: Sequence[ReportSink] | None = None,
        not_profiled: str | None = None,
        skip_first_step: bool = False,
        program: Any = None,
        op_layers: OpLayers | None = None,
    ) -> None:
        """Starts a training run.

        The run's first epoch (e.g. Keras' `initial_epoch`, which callbacks
        are not told) is the first one `epoch_begin` is called with.

        Args:
            epochs: Epoch index the run stops before (Keras' `epochs`), if
                known: the default schedule then picks an epoch that runs.
                Defaults to `None`.
            xla_mode: How the train step is compiled: `"jit_compile"`,
                `"autoclustering"` or `None` (see `xla_mode_of`); new input
                signatures count as XLA compilations unless `None`.
                Defaults to `None`.
            steps_per_call: Training steps one `step_begin` covers (Keras'
                `steps_per_execution`). Defaults to `1`.
            trace_dir: Where this run's traces go. Defaults to `None`:
                `config.log_dir`.
            sinks: Where this run's figures go. Defaults to `None`: the
                engine's `sinks`.
            not_profiled: Why this process runs no profiler in this run
                (e.g. a non-chief worker under `profile_workers="chief"`):
                each selected epoch is then reported `skipped` with this
                reason, its figures unmeasured; signatures and steps are
                still tracked. Defaults to `None`: profile as scheduled.
            skip_first_step: Never profile the run's first step, whatever
                `skip_steps` says. A multi-worker run forms its collective
                groups there, on other threads than the step's, and
                TensorFlow's profiler stop can abort the process on such
                events (docs/multiworker.md). Defaults to `False`.
            program: The framework's train function (Keras'
                `model.train_function`), compared by identity: a run of
                the same function as the previous run keeps its
                signatures, since its compiled programs are cached (a
                second `fit` of a model compiles nothing again). Defaults
                to `None`: every run starts afresh.
            op_layers: Maps the op names of a report's op table to the
                model's layers (`OpStat.layer`), e.g.
                `diagnose.scopes.op_layers` over the model's layer names.
                Defaults to `None`: layers unknown.

        Raises:
            ValueError: If `xla_mode` or `steps_per_call` is invalid.
        """
        if xla_mode not in _XLA_MODES:
            raise ValueError(f"`xla_mode` must be one of {_XLA_MODES}. Received: xla_mode={xla_mode!r}")
        check_int("steps_per_call", steps_per_call, minimum=1)
        self._begin_run(
            epochs,
            xla_mode,
            steps_per_call,
            trace_dir,
            sinks,
            not_profiled,
            skip_first_step,
            program,
            op_layers,
        )

    @_never_raises
    def _begin_run(
        self,
        epochs: int | None,
        xla_mode: str | None,
        steps_per_call: int,
        trace_dir: str | os.PathLike[str] | None,
        sinks: Sequence[ReportSink] | None,
        not_profiled: str | None,
        skip_first_step: bool,
        program: Any,
        op_layers: OpLayers | None,
    ) -> None:
        # This guard's window that an exception left open belongs to a run
        # that is over; another guard's session is stopped only when stale.
        self.abort()
        stop_stale_session()
        self._failures.reset()
        self._epochs = epochs
        self._first_epoch = None
        self._xla_mode = xla_mode
        self._steps_per_call = steps_per_call
        self._epochs_open.steps_per_call = steps_per_call
        self._not_profiled = not_profiled
        self._skip_first_step = skip_first_step
        self._trace_dir = Path(trace_dir) if trace_dir is not None else self.log_dir
        if sinks is not None:
            self._run_sinks = list(sinks)
        elif callable(self._sinks):
            self._run_sinks = list(self._sinks(self.config))
        else:
            self._run_sinks = list(self._sinks)
        xla = xla_mode is not None
        if program is None or self._train_program() is not program or self._tracker.xla != xla:
            self._tracker = SignatureTracker(xla=xla, input_pipeline=self.backend.input_pipeline)
        self._train_program = _program_ref(program)
        self._op_layers = op_layers
        self._running = True
        self._in_epoch = False
        self._persistent_cache = self.backend.persistent_cache()
        self._watch_compiles()
        self._budget_rows.clear()
        self._policy.reset()
        self._signatures_unavailable = None
        self.stop_requested = False
        self._violation = None
        self._ended = False

    @_never_raises
    def warm_up_begin(self) -> None:
        """`warm_up` starts compiling the model's steps, before the run's first epoch.

        The model's programs compiled until `warm_up_end` are the
        `"warm_up"` function's (never the train step's).
        """
        if self._compile_log is not None:
            self._compile_log.warming_up(True)

    @_never_raises
    def warm_up_end(self, signatures: Sequence[Signature], steps: Sequence[str] = ("train",)) -> None:
        """`warm_up` has compiled `steps` for `signatures` (`WarmUpReport`'s): none is new to the run.

        Where the backend counts no compilation (TensorFlow), each warmed
        signature of each step is one `"warm_up"` compilation of the first
        epoch's record, as fit's new signatures are.

        Args:
            signatures: The signatures warmed, in order.
            steps: The steps warmed. Defaults to `("train",)`.
        """
        if self._compile_log is not None:
            self._compile_log.warming_up(False)
        if "train" in steps:
            self._tracker.seed(signatures)
        if self._xla_mode is None or self._counting_log("train") is not None:
            return
        for step in steps:
            for signature in signatures:
                program = f"{step}_function"
                self._warmed += (
                    Compilation(WARM_UP, program, None, None, None, None, None, signature=str(signature)),
                )
                # The budgets open now count it too: fit will not, its signature is no new one.
                note = _WARMED_NOTE
                counted = budget.BudgetCompilation(
                    WARM_UP, None, None, signature, None, program=program, note=note
                )
                budget.report_counted(self, counted, ())

    @_never_raises
    def epoch_begin(self, epoch: int, steps: int | None = None) -> None:
        """Marks the start of an epoch.

        Args:
            epoch: 0-based epoch index.
            steps: Steps the epoch will run, if known.
        """
        self._epoch = epoch
        self._in_epoch = True
        if self._first_epoch is None:
            self._plan_run(epoch)
            self._first_epoch = epoch
        self._tracker.begin_epoch(epoch)
        self._budget_signatures["train"].clear()
        self._signed_through.pop("train", None)
        if self._compile_log is not None:
            self._compile_log.at(epoch, None)
        self._stop_window()
        with self._lock:
            self._epochs_open.begin(epoch)
            if self._warmed:
                self._epochs_open.warmed(epoch, self._warmed)
                self._warmed = ()
        self._pending_epoch = None
        if self.schedule.profiles_epoch(epoch, first_epoch=self._first_epoch):
            self._pending_epoch = epoch
            self._pending_start = self.schedule.start_step(steps)
            if self._skip_first_step and epoch == self._first_epoch:
                self._pending_start = max(self._pending_start, 1)

    @_never_raises
    def step_begin(self, step: int) -> None:
        """Marks the start of a training step (or of one multi-step call).

        Args:
            step: 0-based index of the step within the epoch.
        """
        log = self._compile_log
        if log is not None:
            # The previous step's compilations are counted by now; the
            # policy and the budgets look again only when there were any.
            error = None
            if log.total != self._compiles_checked:
                self._compiles_checked = log.total
                self._check_compilations()
                error = self._budget_collect()
            log.at(self._epoch, step)
            if error is not None:
                raise error
        window = self._window
        if window is not None:
            cap = self.schedule.max_steps
            if cap is not None and step - window.first_step >= cap:
                self._stop_window(next_step=step)
                return
            self._mark_step(window, step)
            return
        if self._pending_epoch is not None and step >= self._pending_start:
            self._start_window(self._pending_epoch, step)

    @_never_raises
    def step_end(self, step: int) -> None:
        """Marks the end of a training step (or of the last step of a multi-step call).

        Optional: an adapter that reports step ends makes the window count
        only steps that finished. Keras calls `on_train_batch_begin` once more
        on data of unknown length, for the attempt that finds the data's end
        and runs no step; without ends that attempt counts as a step.

        Args:
            step: 0-based index within the epoch of the step that finished.
        """
        window = self._window
        if window is not None and step >= window.first_step:
            window.done_step = step + 1

    @_never_raises
    def epoch_end(self, epoch: int, trained: bool = True) -> None:
        """Marks the end of an epoch; finishes its window if one is open.

        Args:
            epoch: 0-based epoch index.
            trained: Whether any training step ran in the epoch. `False`
                (e.g. an empty dataset) reports a selected epoch as skipped
                instead of analyzing a window without steps. Defaults to
                `True`.
        """
        window_epoch = self._window.epoch if self._window is not None else self._pending_epoch
        if not trained and window_epoch == epoch:
            self._close_window()
            self._store(
                CoverageReport(
                    status="skipped",
                    reason="no training step ran in the epoch (is the dataset empty?)",
                    epoch=epoch,
                    steps_profiled=0,
                )
            )
        elif self._window is not None:
            self._stop_window()
        elif self._pending_epoch == epoch:
            self._store(
                CoverageReport(
                    status="skipped",
                    reason=(
                        f"the epoch ended before step {self._pending_start}, where the "
                        "profiling window starts (lower skip_steps)"
                    ),
                    epoch=epoch,
                    steps_profiled=0,
                )
            )
        self._pending_epoch = None
        self._in_epoch = False
        self._finish_signatures(epoch)

    @_never_raises
    def validation_begin(self) -> None:
        """Closes the open window before validation steps run.

        Validation runs inside the epoch; without this its steps would be
        counted as training steps of the window.
        """
        if self._compile_log is not None:
            self._compile_log.at(self._epoch, None)
        self._stop_window()

    def train_end(self, timeout: float | None = None) -> None:
        """Ends the run: stops the profiler, waits for analyses, closes the sinks.

        Args:
            timeout: Seconds to wait for pending analyses. Defaults to no
                limit.
        """
        try:
            self._stop_window()
        except Exception as e:  # noqa: BLE001 - see _never_raises
            self._fail("train_end", e)
        self._pending_epoch = None
        self.wait(timeout)
        with self._publish_lock:
            with self._lock:
                # Epochs that never ended (an interrupted loop epoch) or whose
                # analysis outlived `timeout`: published with what they have.
                left = self._epochs_open.flush()
            for record in left:
                self._publish(record)
        with self._lock:
            records = dict(sorted(self._records.items()))
        for sink in self._run_sinks:
            self._to_sink(sink, "close", records)
        self._run_sinks = []
        self._unwatch_compiles()
        if self._executor is not None:
            # Its thread would otherwise idle for as long as the guard lives; an
            # analysis that outlived `timeout` still finishes (a next run starts
            # a new executor).
            self._executor.shutdown(wait=False)
            self._executor = None
        self._running = False
        self._in_epoch = False
        self._ended = True

    @held
    def abort(self, error: BaseException | None = None) -> None:
        """Stops the profiler at once (exception path), with signals held; never raises.

        A window still open did not complete: its epoch is published at
        once with an `incomplete` report naming the partial trace, which no
        output shows as a measurement (an exception leaving `fit` ends the
        run without `train_end`, so nothing would publish it later). A
        budget's compilations that waited for the epoch's end are counted
        (a `fail_fast` one does not raise: the run leaves with its own error).

        Args:
            error: Why training stopped inside the window. Defaults to
                `None`: the exception being handled, if any.
        """
        if self._unwatch is not None:
            with contextlib.suppress(Exception):
                self._budget_collect(final="train")
        self._unwatch_compiles()
        window, files = self._close_window()
        if window is None:
            return
        try:
            self._abandon(window, files, error if error is not None else sys.exc_info()[1])
        except Exception:  # noqa: BLE001 - already on an error path
            pass

    @held
    def _close_window(self) -> tuple[_Window | None, list[Path]]:
        """Stops the profiler at once and forgets the window (signals held meanwhile); never raises."""
        window, self._window = self._window, None
        files: list[Path] = []
        if window is not None:
            try:
                if window.step_trace is not None:
                    window.step_trace.__exit__(None, None, None)
                files = list(window.session.stop())
            except BaseException:  # noqa: BLE001 - already on an error path; a stop left unfinished is retried as stale
                pass
        return window, files

    def _abandon(self, window: _Window, files: list[Path], error: BaseException | None) -> None:
        """Publishes the epoch of a window training left as `incomplete`."""
        steps = window.next_step - window.first_step
        report = CoverageReport(
            status=INCOMPLETE,
            reason=failures.incomplete_reason(steps, error),
            epoch=window.epoch,
            steps_profiled=steps,
            window_wall_s=time.perf_counter() - window.started,
            trace_paths=tuple(str(f) for f in files),
        )
        with self._publish_lock:
            with self._lock:
                self._reports[window.epoch] = report
                ready = self._epochs_open.release(self._epochs_open.abandon(window.epoch, report))
            for record in ready:
                self._publish(record)

    # ------------------------------------------------------------ internals

    def _add_epoch_notes(self, report: CoverageReport) -> CoverageReport:
        """`report` with the `epoch_notes` providers' notes; one that fails is a warning, not an error."""
        if not report.ok or not self._epoch_notes:
            return report
        notes = list(report.notes)
        for provider in self._epoch_notes:
            try:
                notes.extend(provider(report))
            except Exception as e:  # noqa: BLE001 - a note must not break training
                self._warn(f"a note on epoch {report.epoch} failed: {type(e).__name__}: {e}")
        return dataclasses.replace(report, notes=tuple(dict.fromkeys(notes)))

    def _warn(self, message: str, once: Any = None) -> None:
        """Warns; with `once`, a key naming the failure, only the first time this run."""
        if once is None or self._failures.first(once):
            warnings.warn(f"keras-xla-guard: {message}", XlaGuardWarning, stacklevel=3)

    def _fail(self, hook: str, error: Exception) -> None:
        epoch = self._window.epoch if self._window is not None else self._pending_epoch
        self._close_window()
        self._pending_epoch = None
        reason, message = failures.hook_failure(hook, error, epoch, self._trace_dir)
        self._warn(message, once=(hook, type(error)))
        if epoch is not None:
            self._store(CoverageReport(status="failed", reason=reason, epoch=epoch))

    def _plan_run(self, first: int) -> None:
        """Fits the schedule to the run's first epoch and its `epochs`."""
        epochs = self._epochs
        if not self.config.explicit_schedule:
            default = first + 1 if epochs is None or first + 1 < epochs else first
            self.schedule = dataclasses.replace(self.schedule, epochs=frozenset({default}))
            return
        missed = sorted(e for e in self.schedule.epochs if e < first or (epochs is not None and e >= epochs))
        if missed:
            runs = f"epochs {first} to {epochs - 1}" if epochs is not None else f"epochs from {first}"
            self._warn(
                f"profile_epochs={sorted(self.schedule.epochs)} includes epoch(s) {missed}, which "
                f"this run does not train (it trains {runs}); they are not profiled."
            )

    @held
    def _start_window(self, epoch: int, step: int) -> None:
        if self._not_profiled is not None:
            self._pending_epoch = None
            self._store(
                CoverageReport(status="skipped", reason=self._not_profiled, epoch=epoch, steps_profiled=0)
            )
            return
        session = ProfilerSession(self._trace_dir, run_name=f"epoch{epoch}", backend=self.backend, owner=self)
        try:
            session.start()
        except ProfilerBusyError as e:
            self._pending_epoch = None
            self._warn(f"epoch {epoch} is not profiled: {e}", once=("busy",))
            self._store(CoverageReport(status="skipped", reason=str(e), epoch=epoch, steps_profiled=0))
            return
        self._pending_epoch = None
        self._window = _Window(epoch, session, step, time.perf_counter(), step)
        self._mark_step(self._window, step)

    def _mark_step(self, window: _Window, step: int) -> None:
        if window.step_trace is not None:
            window.step_trace.__exit__(None, None, None)
        window.step_trace = self.backend.step_trace(step)
        window.step_trace.__enter__()
        window.next_step = step + self._steps_per_call

    def _stop_window(self, next_step: int | None = None) -> None:
        if self._window is not None:
            self._stop_and_analyze(next_step)

    @held
    def _stop_and_analyze(self, next_step: int | None) -> None:
        """Stops the window, signals held (raised after), and hands its trace to analysis.

        A failed export reports the epoch failed; something other than an
        `Exception` from the stop (left for a retry) reports it incomplete.
        """
        window, self._window = self._window, None
        assert window is not None
        if window.step_trace is not None:
            window.step_trace.__exit__(None, None, None)
        wall = time.perf_counter() - window.started
        if next_step is None:
            next_step = window.done_step if window.done_step is not None else window.next_step
        steps = next_step - window.first_step
        try:
            files = window.session.stop()
        except Exception as e:  # noqa: BLE001 - see _never_raises
            reason, message, key = failures.trace_failure(window.epoch, e, self._trace_dir)
            self._warn(message, once=key)
            report = CoverageReport(
                status="failed", reason=reason, epoch=window.epoch, steps_profiled=steps, window_wall_s=wall
            )
            self._store(report)
            return
        except BaseException as e:
            self._abandon(window, [], e)
            raise
        with self._lock:
            self._epochs_open.analyzing(window.epoch, (window.first_step, steps))
        job = functools.partial(self._analyze, window.epoch, files, steps, wall)
        if self.config.async_analysis:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=_THREAD_PREFIX
                )
            self._futures.append(self._executor.submit(job))
        else:
            job()

    def _analyze(self, epoch: int, files: list[Path], steps: int, wall: float) -> None:
        try:
            if not files:
                report = CoverageReport(
                    status="failed",
                    reason="the profiler wrote no trace file",
                    epoch=epoch,
                    steps_profiled=steps,
                    window_wall_s=wall,
                )
            else:
                parts = [
                    analyze_xspace(
                        open_xspace(f, max_bytes=self.config.max_trace_bytes),
                        trace_path=str(f),
                        host=host_of(f),
                        top_k=self.config.top_k,
                    )
                    for f in files
                ]
                cache = self._persistent_cache
                report = dataclasses.replace(
                    combine_reports(parts, top_k=self.config.top_k),
                    epoch=epoch,
                    steps_profiled=steps,
                    window_wall_s=wall,
                    persistent_cache=cache.directory if cache is not None else None,
                    backend=self.backend.name,
                )
                if self._op_layers is not None and report.top_non_xla_ops:
                    ops = report.top_non_xla_ops
                    layers = self._op_layers([op.op_name for op in ops])
                    report = dataclasses.replace(
                        report,
                        top_non_xla_ops=tuple(
                            dataclasses.replace(op, layer=layer) for op, layer in zip(ops, layers)
                        ),
                    )
                notes = list(report.notes)
                for provider in self._notes:
                    notes.extend(provider(report))
                report = dataclasses.replace(report, notes=tuple(dict.fromkeys(notes)))
        except Exception as e:  # noqa: BLE001 - analysis must not break training
            self._warn(
                f"analysis of epoch {epoch} failed: {type(e).__name__}: {e}", once=("analysis", type(e))
            )
            self._store(
                CoverageReport(
                    status="failed",
                    reason=f"analysis failed: {type(e).__name__}: {e}",
                    epoch=epoch,
                    steps_profiled=steps,
                    window_wall_s=wall,
                    trace_paths=tuple(str(f) for f in files),
                )
            )
            return
        self._store(report)

    def _store(self, report: CoverageReport) -> None:
        """Takes an epoch's report; publishes the epoch if that completes it."""
        assert report.epoch is not None
        with self._publish_lock:
            with self._lock:
                self._reports[report.epoch] = report
                ready = self._epochs_open.release(self._epochs_open.add_report(report))
            for record in ready:
                self._publish(record)

    def _publish(self, record: EpochRecord) -> None:
        """Keeps an epoch's complete record and hands it to every sink, once."""
        with self._lock:
            self._records[record.epoch] = record
            if record.report is not None:
                self._reports[record.epoch] = record.report
        for sink in self._run_sinks:
            self._to_sink(sink, "write_epoch", record)

    def _watch_compiles(self) -> None:
        """Starts counting the backend's compilations as they happen, where it reports them."""
        self._unwatch_compiles()
        log = CompileLog(self._programs)
        self._compiles_checked = 0
        unwatch = self.backend.watch_compiles(log.on_phase)
        if unwatch is not None:
            self._compile_log, self._unwatch = log, unwatch

    def _unwatch_compiles(self) -> None:
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()

    def _check_compilations(self) -> None:
        """Applies `max_compilations` and the megamorphic warning.

        Where the backend counts compilations (JAX), the limit applies to
        the train function's compilations it counted; else to the new
        input signatures (one compilation each).
        """
        log = self._compile_log
        measured = log.count(self._epoch, "train") if log is not None and self._unwatch is not None else None
        if self._xla_mode is None or (self._signatures_unavailable is not None and measured is None):
            return
        loaded = log.count(self._epoch, "train", cache_hits=True) if measured is not None and log else 0
        for action in self._policy.check(
            self._tracker, self._epoch, self._xla_mode, measured=measured, loaded=loaded
        ):
            self._violation = action.message
            if action.kind == "raise":
                error = RecompilationLimitError(f"keras-xla-guard: {action.message}")
                self.abort(error)
                raise error
            if action.kind == "stop":
                self.stop_requested = True
            self._warn(action.message)

    def _to_sink(self, sink: ReportSink, method: str, *args: Any) -> None:
        """Calls one sink; its failure is a warning (once a run for each cause), never the run's or another sink's."""
        try:
            getattr(sink, method)(*args)
        except Exception as e:  # noqa: BLE001 - the figures themselves are fine
            self._warn(failures.sink_failure(sink, method, e), once=("sink", type(sink), type(e)))

    def _call_tracker(self, function: str) -> SignatureTracker:
        """The tracker of `function`'s open call."""
        if function not in self._open_calls:
            raise RuntimeError(
                f"no call of the {function!r} function is open (call_begin({function!r}) first)"
            )
        return self._functions[function].tracker

    def _call_unavailable(self, function: str, reason: str) -> None:
        """Marks the open call of `function` unavailable; warns once per function."""
        opened = self._open_calls.get(function)
        if opened is None or opened.unavailable is not None:
            return
        opened.unavailable = reason
        if self._functions[function].tracker.xla and self._counting_log(function) is None:
            budget.report_unavailable(reason)
        if function in self._unavailable_warned:
            return
        self._unavailable_warned.add(function)
        self._warn(
            f"input signatures of the {function} function are unavailable: {reason}. Its signature "
            "counts and expected compilations are reported as unavailable, not 0."
        )

    def _finish_signatures(self, epoch: int) -> None:
        # Before the epoch's figures close: its compilations get the epoch's explanations.
        error = self._budget_collect(final="train")
        stats: EpochSignatures | None = self._tracker.end_epoch()
        reason = self._signatures_unavailable
        if reason is not None or (stats is not None and stats.steps == 0):
            stats = None
        if stats is not None and self._tracker.xla:
            budget.report_epoch(self, "train", stats)
        compilations = None
        if self._compile_log is not None and self._unwatch is not None:
            self._check_compilations()
            compilations = self._compile_log.take(epoch)
        with self._publish_lock:
            with self._lock:
                if stats is not None:
                    self._signature_stats[epoch] = stats
                ready = self._epochs_open.release(self._epochs_open.end(epoch, stats, reason, compilations))
            for record in ready:
                self._publish(record)
        if error is not None:
            raise error

    def _counting_log(self, function: str) -> CompileLog | None:
        """The log counting `function`'s compilations as they happen (JAX); `None` where none does."""
        if function not in self._programs.values() and not (function == "train" and self._inside_steps):
            return None
        opened = self._open_calls.get(function)
        if opened is not None and opened.log is not None:
            return opened.log
        return self._compile_log if self._unwatch is not None else None

    def _budget_collect(self, final: str | None = None) -> RecompilationLimitError | None:
        """Counts, for the budgets open in this thread, the compilations the backend reported.

        A compilation waits until the input signatures of its step have
        arrived (the feed reads them a few steps late) or its function's
        epoch or call ends (`final`); it is then counted with the new
        signature of its step, or as one no new signature caused. Without
        a budget open the compilations are dropped.

        Args:
            final: The function whose epoch or call ends now: its
                compilations are all counted, its waiting signatures
                dropped (they compiled nothing: the backend had them).
                Defaults to `None`.

        Returns:
            The error a `fail_fast` budget raises (after every compilation
            ready was counted); `None` when none does.
        """
        self._pull_compilations()
        error: RecompilationLimitError | None = None
        if self._budget_rows:
            counting = bool(budget.active_ledgers())
            waiting = []
            for row, step in self._budget_rows:
                function = row.function
                unavailable = self._unavailable(function)
                signed = self._signed_through.get(function)
                ready = (
                    final == function
                    or step is None
                    or unavailable is not None
                    or (signed is not None and signed >= step + self._steps_per_call)
                )
                if not ready:
                    waiting.append((row, step))
                elif counting:
                    try:
                        self._count_compiled(row, step, unavailable, signed is not None)
                    except RecompilationLimitError as e:
                        error = error or e
            self._budget_rows = waiting
        if final is not None:
            self._budget_signatures[final].clear()
            self._signed_through.pop(final, None)
        return error

    def _pull_compilations(self) -> None:
        """Takes the train, test and predict compilations the counting logs saw since the last look."""
        logs = [self._compile_log] if self._compile_log is not None and self._unwatch is not None else []
        logs += [opened.log for opened in self._open_calls.values() if opened.log is not None]
        for log in logs:
            self._budget_rows.extend(log.fresh())

    def _unavailable(self, function: str) -> str | None:
        """Why `function`'s input signatures are not recorded now; `None` when they are."""
        if function == "train":
            return self._signatures_unavailable
        opened = self._open_calls.get(function)
        return opened.unavailable if opened is not None else None

    def _count_compiled(
        self, row: Compilation, step: int | None, unavailable: str | None, signed: bool
    ) -> None:
        """Counts one compilation the backend reported, with the new signature of its step if one came."""
        function = row.function
        waiting = self._budget_signatures.get(function, {})
        match = None
        if step is not None:
            match = next(
                (waiting.pop(s) for s in range(step, step + self._steps_per_call) if s in waiting), None
            )
        state = self._functions.get(function)
        tracker = self._tracker if function == "train" else state.tracker if state is not None else None
        explanations = tracker.current_explanations() if tracker is not None else ()
        if match is not None:
            budget.report_counted(
                self,
                dataclasses.replace(match, program=row.program, uncertain=None, cache_hit=row.cache_hit),
                explanations,
            )
            return
        if unavailable is not None:
            note = f"its input signature was not recorded ({unavailable}), so what changed is unknown"
        elif function == WARM_UP:
            note = _WARMED_NOTE
        elif step is None:
            note = (
                f"it compiled outside the {function} function's steps (e.g. warm_up), so no batch "
                "of the run caused it"
            )
        elif not signed:
            note = "the guard recorded no input signature for its step, so what changed is unknown"
        else:
            note = _NO_NEW_SIGNATURE.format(program=row.program)
        compilation = budget.BudgetCompilation(
            function, row.epoch, step, None, None, program=row.program, note=note, cache_hit=row.cache_hit
        )
        budget.report_counted(self, compilation, explanations)
