"""The guard engine: profiling windows, analysis and summaries.

`XlaGuardEngine` knows nothing about Keras callbacks. Adapters (the Keras
callback `XlaGuardCallback`, the custom-loop guard `XlaGuard` in `loop.py`)
call `train_begin`, `epoch_begin`, `step_begin`,
`epoch_end` and `train_end`; the engine decides when the profiler runs,
analyzes each trace off the training thread, and writes the results.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from keras_xla_guard.analysis import DEFAULT_TOP_K, analyze_xspace, combine_reports
from keras_xla_guard.errors import ProfilerBusyError, RecompilationLimitError, XlaGuardWarning
from keras_xla_guard.profiler import ProfilerSession, SessionLostError, stop_stale_session
from keras_xla_guard.report import CoverageReport, format_report
from keras_xla_guard.schedule import DEFAULT_MAX_STEPS, DEFAULT_SKIP_STEPS, ProfileSchedule
from keras_xla_guard.signatures import (
    MEGAMORPHIC_COMPILE_THRESHOLD,
    MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE,
    EpochSignatures,
    Signature,
    SignatureTracker,
)
from keras_xla_guard.xplane import DEFAULT_MAX_TRACE_BYTES, TRACE_SUFFIX, open_xspace

__all__ = ["DEFAULT_LOG_DIR", "DEFAULT_MAX_COMPILATIONS", "ON_VIOLATION_CHOICES", "XlaGuardEngine"]

DEFAULT_LOG_DIR = os.path.join("logs", "xla_guard")
# A healthy input pipeline compiles once or twice (full batches and a short
# last batch); 8 leaves room for a few buckets and still speaks up before
# TensorFlow's megamorphic threshold (more than 10 compiles of one cluster).
DEFAULT_MAX_COMPILATIONS = 8
ON_VIOLATION_CHOICES = ("warn", "raise", "stop")
# A URL scheme such as gs:// or s3://; two letters at least, so that a
# Windows drive ("C://logs") is still a local path.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_F = TypeVar("_F", bound=Callable[..., Any])


def _never_raises(method: _F) -> _F:
    """Turns any exception inside a guard hook into a warning.

    The user's training must never fail because of the guard: on error the
    profiler is stopped, the current window is marked failed, and training
    continues.
    """

    @functools.wraps(method)
    def wrapper(self: "XlaGuardEngine", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except RecompilationLimitError:
            # The one deliberate exception: the user asked for on_violation="raise".
            raise
        except Exception as e:  # noqa: BLE001 - by design, see docstring
            self._fail(f"{method.__name__}: {type(e).__name__}: {e}")
            return None

    return wrapper  # type: ignore[return-value]


@dataclasses.dataclass
class _Window:
    epoch: int
    session: ProfilerSession
    first_step: int
    started: float
    next_step: int
    step_trace: Any = None


class XlaGuardEngine:
    """Profiles selected epochs and turns each trace into a `CoverageReport`.

    Args:
        log_dir: Local directory for traces (`<log_dir>/plugins/profile/`)
            and TensorBoard summaries; remote URLs such as `gs://...` are
            refused. Defaults to `"logs/xla_guard"`.
        profile_epochs: Epochs (0-based) to profile: an int, an iterable of
            ints or a range. Defaults to `None`: the run's second epoch, or
            its only one (unless `profile_every` is given).
        profile_every: Also profile every N-th epoch. Defaults to `None`.
        skip_steps: Steps at the start of an epoch left out of the window.
            Defaults to `2`.
        max_steps: Most steps per window (`None`: whole epoch). Defaults to
            `20`.
        top_k: Plain TF ops kept per report. Defaults to `10`.
        write_summaries: Write TensorBoard summaries. Defaults to `True`.
        async_analysis: Analyze traces on a background thread so training
            does not wait. Defaults to `True`.
        max_trace_bytes: Skip analysis of larger trace files. Defaults to
            1 GiB.
        verbose: 0 silent, 1 prints one line per report at the end of
            training. Defaults to `1`.
        max_compilations: Most XLA compilations (new input signatures) one
            epoch may cause before `on_violation` applies; `None` disables
            the check. Only checked while `xla_mode` is set. Defaults to `8`.
        on_violation: What exceeding `max_compilations` does: `"warn"`
            (an `XlaGuardWarning`), `"raise"` (`RecompilationLimitError`
            out of the hook) or `"stop"` (warns and sets `stop_requested`,
            which adapters turn into stopping training). Defaults to
            `"warn"`.

    Adapters set `xla_mode` (`"jit_compile"`, `"autoclustering"` or `None`)
    before `train_begin` and report each step's inputs with
    `observe_inputs` (or `observe_signature`); every epoch then gets
    signature figures (`signatures`), merged into its `CoverageReport` when
    the epoch was profiled and written to TensorBoard for every epoch.

    Raises:
        ValueError: If an argument is invalid.
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
        max_compilations: int | None = DEFAULT_MAX_COMPILATIONS,
        on_violation: str = "warn",
    ) -> None:
        if max_compilations is not None and (
            isinstance(max_compilations, bool) or not isinstance(max_compilations, int) or max_compilations < 1
        ):
            raise ValueError(
                "`max_compilations` must be an integer >= 1 or None. "
                f"Received: max_compilations={max_compilations!r}"
            )
        if on_violation not in ON_VIOLATION_CHOICES:
            raise ValueError(
                f"`on_violation` must be one of {ON_VIOLATION_CHOICES}. Received: on_violation={on_violation!r}"
            )
        if not isinstance(log_dir, (str, os.PathLike)) or not os.fspath(log_dir):
            raise ValueError(
                f"`log_dir` must be a non-empty path. Received: log_dir={log_dir!r}"
            )
        if _URL.match(str(os.fspath(log_dir))):
            # pathlib would fold "gs://b" into the local directory "gs:/b".
            raise ValueError(
                "`log_dir` must be a local directory path, not a URL: remote file systems "
                "(gs://, s3://, hdfs://, ...) are not supported; write locally and copy the "
                f"log dir. Received: log_dir={log_dir!r}"
            )
        self._explicit_schedule = profile_epochs is not None or profile_every is not None
        self.schedule = ProfileSchedule.create(profile_epochs, profile_every, skip_steps, max_steps)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
            raise ValueError(f"`top_k` must be an integer >= 0. Received: top_k={top_k!r}")
        if isinstance(max_trace_bytes, bool) or not isinstance(max_trace_bytes, int) or max_trace_bytes <= 0:
            raise ValueError(
                "`max_trace_bytes` must be a positive integer. "
                f"Received: max_trace_bytes={max_trace_bytes!r}"
            )
        if verbose not in (0, 1, True, False):
            raise ValueError(f"`verbose` must be 0 or 1. Received: verbose={verbose!r}")
        self.log_dir = Path(log_dir)
        self.top_k = top_k
        self.write_summaries = bool(write_summaries)
        self.async_analysis = bool(async_analysis)
        self.max_trace_bytes = max_trace_bytes
        self.verbose = int(verbose)
        self.steps_per_call = 1
        self.note_providers: list[Callable[[CoverageReport], list[str]]] = []
        self._reports: dict[int, CoverageReport] = {}
        self._lock = threading.Lock()
        self._window: _Window | None = None
        self._pending_epoch: int | None = None
        self._pending_start = 0
        self._steps_hint: int | None = None
        self._first_epoch: int | None = None
        self._epochs: int | None = None
        self._epoch: int | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._futures: list[concurrent.futures.Future[None]] = []
        self._writer: Any = None
        self._writer_lock = threading.Lock()
        self.max_compilations = max_compilations
        self.on_violation = on_violation
        self.xla_mode: str | None = None
        self.stop_requested = False
        self._tracker = SignatureTracker()
        self._signature_stats: dict[int, EpochSignatures] = {}
        self._violation_epoch: int | None = None
        self._megamorphic_warned = False
        self._signatures_unavailable: str | None = None
        self._unavailable_epochs: dict[int, str] = {}
        # Output routing of the current run (see `route`).
        self._trace_dir: Path | None = None
        self._sink: Any = None
        self._own_summaries = True
        self._run_stored: set[int] = set()
        self._ended: set[int] = set()
        self._emitted: set[int] = set()

    # ------------------------------------------------------------------ API

    @property
    def reports(self) -> dict[int, CoverageReport]:
        """Reports finished so far, keyed by 0-based epoch index.

        Call `wait()` first to include windows still being analyzed.
        """
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

    def observe_inputs(self, inputs: Any, step: int | None = None) -> None:
        """Records the concrete input signature of one training step.

        Cheap (a walk over the structure reading `.shape` and `.dtype`) and
        never raises into training, except `RecompilationLimitError` when
        `on_violation="raise"` and the epoch exceeds `max_compilations`.

        Args:
            inputs: The step's inputs: a nested structure of arrays or
                tensors (e.g. the arguments of a compiled function).
            step: 0-based step index within the epoch, if known.

        Raises:
            RecompilationLimitError: See above.
        """
        try:
            signature = Signature.of(inputs)
        except Exception as e:  # noqa: BLE001 - the guard must not break training
            self._warn(f"reading the input signature failed: {type(e).__name__}: {e}")
            return
        self.observe_signature(signature, step=step)

    def observe_signature(self, signature: Signature, step: int | None = None, count: int = 1) -> None:
        """Records `count` consecutive training steps run with `signature`.

        Args:
            signature: The steps' input signature.
            step: 0-based index of the first of them within the epoch.
            count: Number of steps. Defaults to `1`.

        Raises:
            RecompilationLimitError: With `on_violation="raise"`, when the
                epoch exceeds `max_compilations`.
        """
        try:
            self._tracker.observe(signature, step=step, count=count)
            self._check_compilations()
        except RecompilationLimitError:
            raise
        except Exception as e:  # noqa: BLE001 - the guard must not break training
            self._warn(f"signature tracking failed: {type(e).__name__}: {e}")

    def signatures_unavailable(self, reason: str) -> None:
        """Marks this run's input-signature figures unavailable; warns once.

        From the current epoch on, the epochs' signature figures are `None`
        (never a partial count), `max_compilations` and the megamorphic
        warning are off, and reports, console and TensorBoard say why.

        Args:
            reason: What could not be recorded, naming the Keras version.
        """
        if self._signatures_unavailable is not None:
            return
        self._signatures_unavailable = reason
        self._warn(
            f"input signatures are unavailable in this run: {reason}. Signature counts, "
            "expected compilations, max_compilations and the megamorphic warning are off "
            "(reported as unavailable, not 0). Pass the training dataset through "
            "guard.observe(dataset) to record it without Keras internals."
        )

    def route(self, trace_dir: str | os.PathLike[str], sink: Any, own_summaries: bool = True) -> None:
        """Sends this run's traces to `trace_dir` and its finished epochs to `sink`.

        For adapters that share one log dir between several processes
        (`keras_xla_guard.cluster`). Call it after `train_begin`;
        `train_end` closes the sink and restores the defaults (traces
        under `log_dir`, the engine's own summaries on).

        Args:
            trace_dir: Directory the profiler writes this run's traces to.
            sink: A `keras_xla_guard.cluster.ReportSink`: gets each profiled
                epoch's final report, then `close()` at the end of the run.
            own_summaries: Whether the engine still writes its own
                TensorBoard summaries into `log_dir`. Defaults to `True`.
        """
        self._trace_dir = Path(trace_dir)
        self._sink = sink
        self._own_summaries = bool(own_summaries)

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until every submitted trace analysis has finished.

        Args:
            timeout: Seconds to wait at most. Defaults to no limit.
        """
        futures = list(self._futures)
        concurrent.futures.wait(futures, timeout=timeout)

    @_never_raises
    def train_begin(self, epochs: int | None = None) -> None:
        """Starts a training run.

        The run's first epoch (e.g. Keras' `initial_epoch`, which callbacks
        are not told) is the first one `epoch_begin` is called with.

        Args:
            epochs: Epoch index the run stops before (Keras' `epochs`), if
                known: the default schedule then picks an epoch that runs.
        """
        # A window of this guard or another one that an exception left open
        # belongs to a run that is over.
        self.abort()
        self._close_sink(timeout=0)
        stop_stale_session()
        self._epochs = epochs
        self._first_epoch = None
        self._tracker = SignatureTracker(xla=self.xla_mode is not None)
        self._megamorphic_warned = False
        self._violation_epoch = None
        self._signatures_unavailable = None
        self.stop_requested = False
        self._run_stored, self._ended, self._emitted = set(), set(), set()

    @_never_raises
    def epoch_begin(self, epoch: int, steps: int | None = None) -> None:
        """Marks the start of an epoch.

        Args:
            epoch: 0-based epoch index.
            steps: Steps the epoch will run, if known.
        """
        self._epoch = epoch
        if self._first_epoch is None:
            self._plan_run(epoch)
            self._first_epoch = epoch
        self._tracker.begin_epoch(epoch)
        self._stop_window()
        self._pending_epoch = None
        self._steps_hint = steps
        if self.schedule.profiles_epoch(epoch, first_epoch=self._first_epoch):
            self._pending_epoch = epoch
            self._pending_start = self.schedule.start_step(steps)

    @_never_raises
    def step_begin(self, step: int) -> None:
        """Marks the start of a training step (or of one multi-step call).

        Args:
            step: 0-based index of the step within the epoch.
        """
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
            self.abort()
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
        self._finish_signatures(epoch)
        with self._lock:
            self._ended.add(epoch)
        self._emit(epoch)

    @_never_raises
    def validation_begin(self) -> None:
        """Closes the open window before validation steps run.

        Validation runs inside the epoch; without this its steps would be
        counted as training steps of the window.
        """
        self._stop_window()

    def train_end(self, timeout: float | None = None) -> None:
        """Ends the run: stops the profiler, waits for analyses, flushes.

        Args:
            timeout: Seconds to wait for pending analyses. Defaults to no
                limit.
        """
        try:
            self._stop_window()
        except Exception as e:  # noqa: BLE001 - see _never_raises
            self._fail(f"train_end: {type(e).__name__}: {e}")
        self._pending_epoch = None
        self.wait(timeout)
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception as e:  # noqa: BLE001
                self._warn(f"closing the TensorBoard writer failed: {e}")
        self._close_sink(timeout)
        if self.verbose:
            for report in self.reports.values():
                print(f"keras-xla-guard: {format_report(report, max_ops=3)}", flush=True)

    def abort(self) -> None:
        """Stops the profiler at once (exception path); never raises."""
        window, self._window = self._window, None
        if window is not None:
            try:
                if window.step_trace is not None:
                    window.step_trace.__exit__(None, None, None)
                window.session.stop()
            except Exception:  # noqa: BLE001 - already on an error path
                pass

    # ------------------------------------------------------------ internals

    def _warn(self, message: str) -> None:
        warnings.warn(f"keras-xla-guard: {message}", XlaGuardWarning, stacklevel=3)

    def _fail(self, message: str) -> None:
        epoch = self._window.epoch if self._window is not None else self._pending_epoch
        self.abort()
        self._pending_epoch = None
        self._warn(f"{message}. Training continues without this profiling window.")
        if epoch is not None:
            self._store(CoverageReport(status="failed", reason=message, epoch=epoch))

    def _plan_run(self, first: int) -> None:
        """Fits the schedule to the run's first epoch and its `epochs`."""
        epochs = self._epochs
        if not self._explicit_schedule:
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

    def _start_window(self, epoch: int, step: int) -> None:
        session = ProfilerSession(self._trace_dir or self.log_dir, run_name=f"epoch{epoch}")
        try:
            session.start()
        except ProfilerBusyError as e:
            self._pending_epoch = None
            self._warn(f"epoch {epoch} is not profiled: {e}")
            self._store(CoverageReport(status="skipped", reason=str(e), epoch=epoch, steps_profiled=0))
            return
        self._pending_epoch = None
        self._window = _Window(epoch, session, step, time.perf_counter(), step)
        self._mark_step(self._window, step)

    def _mark_step(self, window: _Window, step: int) -> None:
        import tensorflow as tf

        if window.step_trace is not None:
            window.step_trace.__exit__(None, None, None)
        # `_r=1` makes XProf's step-time tools recognise the region as a step.
        window.step_trace = tf.profiler.experimental.Trace("train", step_num=step, _r=1)
        window.step_trace.__enter__()
        window.next_step = step + self.steps_per_call

    def _stop_window(self, next_step: int | None = None) -> None:
        window, self._window = self._window, None
        if window is None:
            return
        if window.step_trace is not None:
            window.step_trace.__exit__(None, None, None)
        wall = time.perf_counter() - window.started
        steps = (next_step if next_step is not None else window.next_step) - window.first_step
        try:
            files = window.session.stop()
        except Exception as e:  # noqa: BLE001 - see _never_raises
            reason = str(e) if isinstance(e, SessionLostError) else (
                f"writing the trace failed: {type(e).__name__}: {e}"
            )
            self._warn(f"epoch {window.epoch}: {reason}. Training continues without this "
                       "profiling window.")
            self._store(CoverageReport(status="failed", reason=reason, epoch=window.epoch,
                                       steps_profiled=steps, window_wall_s=wall))
            return
        job = functools.partial(self._analyze, window.epoch, files, steps, wall)
        if self.async_analysis:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="keras_xla_guard"
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
                        open_xspace(f, max_bytes=self.max_trace_bytes),
                        trace_path=str(f),
                        host=f.name[: -len(TRACE_SUFFIX)],
                        top_k=self.top_k,
                    )
                    for f in files
                ]
                report = dataclasses.replace(
                    combine_reports(parts, top_k=self.top_k),
                    epoch=epoch,
                    steps_profiled=steps,
                    window_wall_s=wall,
                )
                notes = list(report.notes)
                for provider in self.note_providers:
                    notes.extend(provider(report))
                report = dataclasses.replace(report, notes=tuple(dict.fromkeys(notes)))
        except Exception as e:  # noqa: BLE001 - analysis must not break training
            self._warn(f"analysis of epoch {epoch} failed: {type(e).__name__}: {e}")
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
        if self._summaries_on:
            try:
                self._summary_writer().write_report(report, step=epoch)
            except Exception as e:  # noqa: BLE001 - the report itself is fine
                self._warn(f"writing TensorBoard summaries for epoch {epoch} failed: "
                           f"{type(e).__name__}: {e}")

    def _summary_writer(self) -> Any:
        with self._writer_lock:
            if self._writer is None:
                from keras_xla_guard.summary import SummaryWriter

                self._writer = SummaryWriter(self.log_dir)
            return self._writer

    def _store(self, report: CoverageReport) -> None:
        assert report.epoch is not None
        with self._lock:
            stats = self._signature_stats.get(report.epoch)
            if stats is not None:
                report = _with_signatures(report, stats)
            elif report.epoch in self._unavailable_epochs:
                report = dataclasses.replace(
                    report, signatures_unavailable=self._unavailable_epochs[report.epoch]
                )
            self._reports[report.epoch] = report
            self._run_stored.add(report.epoch)
        self._emit(report.epoch)

    @property
    def _summaries_on(self) -> bool:
        return self.write_summaries and self._own_summaries

    def _emit(self, epoch: int, final: bool = False) -> None:
        """Hands an epoch's report to the run's sink once it is complete.

        Complete means analyzed (or skipped, or failed) and, unless `final`
        (the run is over), its epoch ended, so the signature figures are in.
        """
        with self._lock:
            if (
                self._sink is None
                or epoch in self._emitted
                or epoch not in self._run_stored
                or not (final or epoch in self._ended)
            ):
                return
            self._emitted.add(epoch)
            report, sink = self._reports[epoch], self._sink
        try:
            sink.epoch_report(report)
        except Exception as e:  # noqa: BLE001 - the report itself is fine
            self._warn(f"handing over the report of epoch {epoch} failed: {type(e).__name__}: {e}")

    def _close_sink(self, timeout: float | None) -> None:
        """Hands over what an aborted epoch left, closes the sink, unroutes."""
        sink = self._sink
        if sink is not None:
            for epoch in sorted(self._run_stored):
                self._emit(epoch, final=True)
            try:
                sink.close(timeout)
            except Exception as e:  # noqa: BLE001
                self._warn(f"finishing the run's output failed: {type(e).__name__}: {e}")
        self._trace_dir, self._sink, self._own_summaries = None, None, True

    def _check_compilations(self) -> None:
        """Applies `max_compilations` and the megamorphic warning."""
        tracker = self._tracker
        if self.xla_mode is None or self._signatures_unavailable is not None:
            return
        if not self._megamorphic_warned and tracker.megamorphic_risk():
            self._megamorphic_warned = True
            self._warn(_megamorphic_message(tracker, self.xla_mode))
        new = tracker.epoch_new_signatures
        epoch = self._epoch
        if self.max_compilations is None or new <= self.max_compilations or self._violation_epoch == epoch:
            return
        self._violation_epoch = epoch
        what = tracker.current_explanations()
        message = (
            f"epoch {epoch} caused {new} XLA compilations (new input signatures), more than "
            f"max_compilations={self.max_compilations}"
            + (f": {what[0]}" if what else "")
            + ". Pad or bucket the varying input (see the epoch's signature_explanations)."
        )
        if self.on_violation == "raise":
            self.abort()
            raise RecompilationLimitError(f"keras-xla-guard: {message}")
        if self.on_violation == "stop":
            self.stop_requested = True
            message += " Stopping training (on_violation='stop')."
        self._warn(message)

    def _finish_signatures(self, epoch: int) -> None:
        stats = self._tracker.end_epoch()
        reason = self._signatures_unavailable
        if reason is not None:
            self._mark_unavailable(epoch, reason)
            return
        if stats.steps == 0:
            return
        with self._lock:
            self._signature_stats[epoch] = stats
            report = self._reports.get(epoch)
            if report is not None:
                self._reports[epoch] = _with_signatures(report, stats)
        if self._summaries_on:
            try:
                self._write_signatures(stats)
            except Exception as e:  # noqa: BLE001 - the figures themselves are fine
                self._warn(f"writing signature summaries for epoch {epoch} failed: "
                           f"{type(e).__name__}: {e}")

    def _mark_unavailable(self, epoch: int, reason: str) -> None:
        """Records that `epoch` has no signature figures, and why, everywhere they show."""
        with self._lock:
            self._unavailable_epochs[epoch] = reason
            report = self._reports.get(epoch)
            if report is not None:
                self._reports[epoch] = dataclasses.replace(report, signatures_unavailable=reason)
        if self._summaries_on:
            try:
                from keras_xla_guard.summary import signatures_unavailable_markdown

                self._summary_writer().write_text(
                    "signatures", signatures_unavailable_markdown(reason), step=epoch
                )
            except Exception as e:  # noqa: BLE001 - the warning has said it already
                self._warn(f"writing the signature text for epoch {epoch} failed: "
                           f"{type(e).__name__}: {e}")

    def _write_signatures(self, stats: EpochSignatures) -> None:
        from keras_xla_guard.summary import signatures_markdown

        values: dict[str, float] = {
            "distinct_signatures": stats.distinct_signatures,
            "new_signatures": stats.new_signatures,
        }
        if stats.expected_compilations is not None:
            values["expected_compilations"] = stats.expected_compilations
        writer = self._summary_writer()
        writer.write_scalars(values, step=stats.epoch)
        writer.write_text("signatures", signatures_markdown(stats), step=stats.epoch)


def _with_signatures(report: CoverageReport, stats: EpochSignatures) -> CoverageReport:
    return dataclasses.replace(
        report,
        distinct_signatures=stats.distinct_signatures,
        new_signatures=stats.new_signatures,
        expected_compilations=stats.expected_compilations,
        signature_explanations=stats.explanations,
    )


def _megamorphic_message(tracker: SignatureTracker, xla_mode: str) -> str:
    compiles = tracker.total_signatures
    what = tracker.current_explanations()
    head = (
        f"{compiles} XLA compilations of the train step so far (one per input signature) for "
        f"{tracker.executions} executions, fewer than {MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE} per "
        f"compilation. TensorFlow marks a cluster megamorphic after more than "
        f"{MEGAMORPHIC_COMPILE_THRESHOLD} compilations with fewer than "
        f"{MEGAMORPHIC_MIN_EXECUTIONS_PER_COMPILE} executions each. "
    )
    if xla_mode == "autoclustering":
        effect = (
            "With auto-clustering it then stops compiling the cluster and runs it as plain "
            "TensorFlow ops for the rest of the process, silently losing XLA."
        )
    else:
        effect = (
            "With jit_compile=True TensorFlow never gives up: every further new shape is "
            "compiled again, so compile time keeps growing with each new shape."
        )
    cause = f" What varies: {what[0]}." if what else ""
    return head + effect + cause

