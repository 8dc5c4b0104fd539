"""Multi-worker runs: one trace directory per worker, the chief's summaries.

Under `tf.distribute.MultiWorkerMirroredStrategy` every worker process runs
its own profiler and compiles its own executables, so each worker measures
its own coverage. Both guards (the Keras callback and the custom-loop
`XlaGuard`) give their engine a `ClusterSink` for the run:

- the worker profiles into `<log_dir>/<task_type>_<task_id>/` (TensorFlow
  names a trace after the host only, so two workers on one host would
  otherwise write the same file) and rewrites
  `<log_dir>/<task_type>_<task_id>/xla_guard_reports.json` after each
  profiled epoch;
- after each profiled epoch the chief reads the other workers' files and
  writes TensorBoard summaries into `<log_dir>`: the combined figures under
  the usual `xla_guard/...` tags, each worker's under
  `xla_guard/<task_type>_<task_id>/...`, and a table naming the worst worker.

The figures travel through files rather than a collective op: a collective
needs every worker to join it in the same order as the training's own
collectives, so a worker without the guard, or one that is gone, would
hang the others. A file is waited for at most `WORKER_TIMEOUT_S` seconds,
on the chief's own background thread, never on the training thread; then
the chief warns and writes the figures it has. Across machines `log_dir`
must therefore be one shared directory (e.g. an NFS mount); if it is not,
the chief warns once and writes its own figures, and each worker's file
stays on its machine.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from keras_xla_guard.errors import XlaGuardWarning
from keras_xla_guard.output.runfile import RUN_FILE, read_run_file, save_run_file, worker_run_files
from keras_xla_guard.output.tensorboard import SummaryWriter, write_worker_summaries
from keras_xla_guard.output.tensorboard_markdown import unprofiled_markdown, worst_worker
from keras_xla_guard.runtime.sink import INCOMPLETE, CallRecord, EpochRecord
from keras_xla_guard.signatures.tracker import EpochSignatures
from keras_xla_guard.trace.report import CoverageReport

__all__ = [
    "RUN_FILE",
    "WORKER_TIMEOUT_S",
    "ClusterSink",
    "WorkerCoverage",
    "WorkerInfo",
    "find_worker",
    "info_from_cluster",
    "read_reports",
    "worker_info",
    "worker_coverage",
    "worker_info_from_tf_config",
    "worst_worker",
]

# How long the chief waits for another worker's report of an epoch. The
# workers end an epoch together (every step all-reduces), so a report comes
# within one trace analysis of the chief's own; a worker without the guard,
# or a dead one, never sends it. Read when a run starts.
WORKER_TIMEOUT_S = 60.0
_POLL_S = 0.2
# A report file saved this long before the chief's run began belongs to an
# earlier run in the same log dir (clocks of different machines may differ
# by a little).
_CLOCK_SLACK_S = 5.0
# Said once per process: the risk is TensorFlow's, not one run's.
_crash_risk_told = False
# What `profile_workers="all"` costs, measured by
# benchmarks/stress_multiworker.py (its newest `guard-all` result:
# benchmarks/results/stress_multiworker-20261205T191632Z.json): (runs in
# which a worker aborted natively, guarded 2-worker runs), per scenario;
# docs/multiworker.md has the table, tests/test_measured_constants.py keeps these
# equal to that result.
ALL_WORKERS_CRASHES = {"loop": (11, 30), "fit": (2, 30)}
# The start of the reason a worker's report gives when it did not profile.
NOT_PROFILED = "not profiled"


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """Where this process sits in a multi-worker cluster.

    Attributes:
        task_type: The cluster job, e.g. `"worker"` or `"chief"`.
        task_id: Index of the task within its job.
        num_workers: Number of worker processes taking part in training.
        is_chief: Whether this process writes the TensorBoard summaries.
        names: Every worker's name in rank order (chief first).
    """

    task_type: str
    task_id: int
    num_workers: int
    is_chief: bool
    names: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The task's name in paths and tags, e.g. `"worker_1"`."""
        return f"{self.task_type}_{self.task_id}"


def worker_info(strategy: Any) -> WorkerInfo | None:
    """Describes this worker, or `None` outside a multi-worker cluster.

    Args:
        strategy: The model's `tf.distribute.Strategy`.

    Returns:
        A `WorkerInfo` when the strategy spans more than one worker process
        (`MultiWorkerMirroredStrategy` with a cluster in `TF_CONFIG`),
        otherwise `None`: one process, one profiler, nothing to aggregate.

    Example:

    ```python
    import tensorflow as tf
    from keras_xla_guard.distributed import worker_info

    info = worker_info(tf.distribute.MultiWorkerMirroredStrategy())
    print(info.name if info else "single worker")  # e.g. "worker_1"
    ```
    """
    import tensorflow as tf

    # Parameter-server and TPU strategies also carry a cluster, but run
    # callbacks on one coordinator: one profiler, nothing to exchange.
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return None
    return info_from_cluster(
        resolver.cluster_spec().as_dict(), resolver.task_type, int(resolver.task_id or 0)
    )


def info_from_cluster(spec: dict[str, Any], task_type: str, task_id: int) -> WorkerInfo | None:
    """Describes a task of a cluster spec, or `None` if it is not multi-worker.

    Args:
        spec: Job name -> list of addresses (`ClusterSpec.as_dict()`, or
            the `cluster` of `TF_CONFIG`).
        task_type: This task's job.
        task_id: This task's index in its job.

    Returns:
        A `WorkerInfo` when `chief` and `worker` jobs hold two tasks or
        more, otherwise `None`.
    """
    jobs = [job for job in ("chief", "worker") if job in spec]
    num_workers = sum(len(spec[job]) for job in jobs)
    if num_workers < 2:
        return None
    chief_job = "chief" if "chief" in spec else "worker"
    names = tuple(f"{job}_{i}" for job in jobs for i in range(len(spec[job])))
    return WorkerInfo(task_type, task_id, num_workers, task_type == chief_job and task_id == 0, names)


def worker_info_from_tf_config(tf_config: str | None) -> WorkerInfo | None:
    """Describes this worker from a `TF_CONFIG` value, or `None`.

    Args:
        tf_config: The `TF_CONFIG` JSON, as in the environment variable.

    Returns:
        A `WorkerInfo` for a `chief` or `worker` task of a cluster with at
        least two of them and no parameter servers (those run the loop on
        one coordinator); otherwise `None`.

    Raises:
        ValueError: If `tf_config` is not valid JSON of a cluster.

    Example:

    ```python
    import os
    from keras_xla_guard.distributed import worker_info_from_tf_config

    info = worker_info_from_tf_config(os.environ.get("TF_CONFIG"))
    ```
    """
    if not tf_config:
        return None
    try:
        config = json.loads(tf_config)
        spec = config.get("cluster") or {}
        task = config.get("task") or {}
        task_type, task_id = task.get("type"), int(task.get("index", 0))
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"`TF_CONFIG` is not a cluster description ({e}). Received: {tf_config!r}") from None
    if "ps" in spec or task_type not in ("chief", "worker"):
        return None
    return info_from_cluster(spec, task_type, task_id)


def find_worker(strategy: Any = None) -> WorkerInfo | None:
    """This process's place in a multi-worker cluster, or `None`.

    Args:
        strategy: The `tf.distribute.Strategy` training runs under, if
            known. Defaults to `None`: the strategy of the current
            `strategy.scope()`, else `TF_CONFIG`.

    Returns:
        A `WorkerInfo` under `MultiWorkerMirroredStrategy` with two or more
        workers, else `None`.

    Example:

    ```python
    from keras_xla_guard.distributed import find_worker

    info = find_worker(strategy)
    print(info.name if info else "single worker")  # e.g. "worker_1"
    ```
    """
    if strategy is not None:
        return worker_info(strategy)
    # A loop that never imported TensorFlow has no strategy to look at.
    tf = sys.modules.get("tensorflow")
    if tf is not None and tf.distribute.has_strategy():
        info = worker_info(tf.distribute.get_strategy())
        if info is not None:
            return info
    return worker_info_from_tf_config(os.environ.get("TF_CONFIG"))


def _tell_crash_risk() -> None:
    global _crash_risk_told
    if _crash_risk_told:
        return
    _crash_risk_told = True
    rates = ", ".join(f"{c} of {n} runs of a {name}" for name, (c, n) in ALL_WORKERS_CRASHES.items())
    _warn(
        "profile_workers='all' under MultiWorkerMirroredStrategy: TensorFlow's profiler stop "
        '(tf.profiler.experimental.stop) aborts non-chief workers natively ("double free or '
        'corruption", "free(): invalid pointer", a segmentation fault), and this guard '
        f"cannot catch that: measured {rates} (2 workers, 3 profiled epochs each, in the "
        "project's multi-worker stress benchmark). The default profile_workers='chief' did not "
        "crash in the same benchmark; see docs/multiworker.md"
    )


def _not_profiled_reason(info: WorkerInfo) -> str:
    chief = info.names[0] if info.names else "the chief"
    return (
        f"{NOT_PROFILED}: under MultiWorkerMirroredStrategy only the chief ({chief}) runs "
        "TensorFlow's profiler (profile_workers='chief'; on other workers its stop aborts the "
        "process natively now and then, docs/multiworker.md); this worker tracked its input "
        "signatures and steps only. Pass profile_workers='all' to profile every worker"
    )


def read_reports(path: str | os.PathLike[str]) -> dict[int, CoverageReport]:
    """Reads a worker's run file (`xla_guard_reports.json`) into its reports.

    Args:
        path: The file, or the worker's directory holding it.

    Returns:
        The worker's reports keyed by epoch.

    Raises:
        OSError: If the file cannot be read.
        ValueError: If it is not a run file.

    Example:

    ```python
    from keras_xla_guard.distributed import read_reports
    print(read_reports("logs/mw/worker_1")[1].xla_time_fraction)
    ```
    """
    return read_run_file(path).coverage_reports()


@dataclasses.dataclass(frozen=True)
class WorkerCoverage:
    """What one worker measured in one epoch, or why it measured nothing.

    Attributes:
        worker: The worker's name, e.g. `"worker_1"`.
        epoch: The epoch.
        profiled: Whether the worker's profiler measured this epoch
            (its report is `ok`).
        reason: Why not (`""` when profiled): the report's status and
            reason, e.g. `"skipped: not profiled: ..."`.
        xla_time_fraction: The worker's XLA share of op time; `None` when
            not profiled (never 0).
        xla_time_s: Time inside XLA executables; `None` when not profiled.
        non_xla_op_time_s: Plain TF op time; `None` when not profiled.
        xla_executions: XLA executable launches; `None` when not profiled.
        compilations: XLA compilations; `None` when not profiled.
        steps_profiled: Steps inside the window; `None` when not profiled.
        distinct_signatures: Input signatures the worker met in the epoch
            (tracked whether profiled or not); `None` when not tracked.
        trace_paths: The worker's own trace file(s) the figures come from.
    """

    worker: str
    epoch: int
    profiled: bool
    reason: str
    xla_time_fraction: float | None
    xla_time_s: float | None
    non_xla_op_time_s: float | None
    xla_executions: int | None
    compilations: int | None
    steps_profiled: int | None
    distinct_signatures: int | None
    trace_paths: tuple[str, ...]

    @classmethod
    def of(cls, worker: str, report: CoverageReport) -> WorkerCoverage:
        """The worker's figures from its report of one epoch."""
        assert report.epoch is not None
        measured = report.ok

        def figure(value: Any) -> Any:
            return value if measured else None

        return cls(
            worker=worker,
            epoch=report.epoch,
            profiled=measured,
            reason="" if measured else f"{report.status}: {report.reason}",
            xla_time_fraction=figure(report.xla_time_fraction),
            xla_time_s=figure(report.xla_time_s),
            non_xla_op_time_s=figure(report.non_xla_op_time_s),
            xla_executions=figure(report.xla_executions),
            compilations=figure(report.compilations),
            steps_profiled=figure(report.steps_profiled),
            distinct_signatures=report.distinct_signatures,
            trace_paths=report.trace_paths,
        )


def worker_coverage(log_dir: str | os.PathLike[str]) -> dict[int, dict[str, WorkerCoverage]]:
    """Every worker's figures per epoch, from the run files in a shared log dir.

    Args:
        log_dir: The `log_dir` all workers were given.

    Returns:
        Epoch -> worker name -> `WorkerCoverage`, for each worker whose
        `<log_dir>/<task>/xla_guard_reports.json` is there: measured
        figures where the worker profiled the epoch, else `None` with the
        reason.

    Example:

    ```python
    from keras_xla_guard.distributed import worker_coverage

    for name, w in worker_coverage("logs/mw")[1].items():
        print(name, w.xla_time_fraction if w.profiled else w.reason)
    ```
    """
    table: dict[int, dict[str, WorkerCoverage]] = {}
    for path in worker_run_files(log_dir):
        run = read_run_file(path)
        worker = run.name or path.parent.name
        for epoch, report in run.coverage_reports().items():
            table.setdefault(epoch, {})[worker] = WorkerCoverage.of(worker, report)
    return dict(sorted(table.items()))


class ClusterSink:
    """A `ReportSink` for one worker of a multi-worker run; on the chief, the summaries.

    The engine profiles into this worker's own directory (`trace_dir`) and
    hands each epoch's complete record here; the worker saves its run file
    with it, and for a profiled epoch the chief then gathers that epoch from
    every worker on a background thread and writes the summaries. `close`
    waits for the chief's pending epochs.

    Args:
        info: This worker's `WorkerInfo`.
        log_dir: The log dir all workers share.
        write_summaries: Whether the chief writes TensorBoard summaries.
            Defaults to `True`.
        verbose: 1 makes the chief print one line per epoch (worst worker)
            when the run ends. Defaults to `0`.
        top_k: Plain TF ops kept in the combined op table. Defaults to `10`.
        timeout: Seconds the chief waits for another worker's report of an
            epoch. Defaults to `WORKER_TIMEOUT_S`.
        profile_workers: `"chief"` or `"all"` (see `GuardConfig`).
            Defaults to `"chief"`.

    Example:

    ```python
    cluster = ClusterSink.begin(engine.config, strategy)
    engine.train_begin(trace_dir=cluster.trace_dir,
                       sinks=[*default_sinks(engine.config, tensorboard=False), cluster])
    ...  # epochs and steps
    engine.train_end()  # closes the sink
    ```
    """

    def __init__(
        self,
        info: WorkerInfo,
        log_dir: str | os.PathLike[str],
        write_summaries: bool = True,
        verbose: int = 0,
        top_k: int = 10,
        timeout: float | None = None,
        profile_workers: str = "chief",
    ) -> None:
        self.info = info
        self.profile_workers = profile_workers
        self.base_dir = Path(log_dir)
        self.trace_dir = self.base_dir / info.name
        # What a warning about a failed write names (`runtime/failures.py`).
        self.directory = self.trace_dir
        self.what = f"worker {info.name}'s run file and the cluster's summaries under {os.fspath(log_dir)!r}"
        self.write_summaries = write_summaries
        self.verbose = verbose
        self.top_k = top_k
        self.timeout = WORKER_TIMEOUT_S if timeout is None else float(timeout)
        self.started = time.time()
        self.by_epoch: dict[int, dict[str, CoverageReport]] = {}
        self._own: dict[int, CoverageReport] = {}
        self._stats: dict[int, EpochSignatures] = {}
        self._calls: list[CallRecord] = []
        self._missing: set[str] = set()
        self._lock = threading.Lock()
        self._writer: Any = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._futures: list[concurrent.futures.Future[None]] = []
        # Written at once, so that a stale file of an earlier run in this
        # log dir is replaced before any other worker can read it.
        self._save()

    @classmethod
    def begin(cls, config: Any, strategy: Any = None) -> ClusterSink | None:
        """This worker's sink, or `None` outside a multi-worker cluster.

        Never raises: a cluster layout that cannot be read becomes an
        `XlaGuardWarning`, and the worker profiles as if alone.

        Args:
            config: The guard's `GuardConfig`.
            strategy: See `find_worker`. Defaults to `None`.

        Returns:
            The sink, or `None` when training is not multi-worker.
        """
        try:
            info = find_worker(strategy)
            if info is None:
                return None
            sink = cls(
                info,
                config.log_dir,
                write_summaries=config.write_summaries,
                verbose=config.verbose,
                top_k=config.top_k,
                profile_workers=config.profile_workers,
            )
        except Exception as e:  # noqa: BLE001 - guarding must not break training
            _warn(
                f"reading the cluster layout failed ({type(e).__name__}: {e}); "
                "this worker profiles as if alone"
            )
            return None
        if config.profile_workers == "all":
            _tell_crash_risk()
        return sink

    @property
    def not_profiled(self) -> str | None:
        """Why this worker runs no profiler (the engine's `not_profiled`), or `None`."""
        if self.profile_workers == "chief" and not self.info.is_chief:
            return _not_profiled_reason(self.info)
        return None

    @property
    def peers(self) -> tuple[str, ...]:
        """The other workers' names, in rank order."""
        return tuple(n for n in self.info.names if n != self.info.name)

    def write_epoch(self, record: EpochRecord) -> None:
        """Saves this worker's file with the epoch; on the chief, gathers a profiled epoch.

        Args:
            record: The epoch's complete record from the engine.
        """
        report = record.report
        with self._lock:
            if record.signatures is not None:
                self._stats[record.epoch] = record.signatures
            if report is not None:
                self._own[record.epoch] = report
            self._calls.extend(record.calls)
            self._save()
        if report is None or not self.info.is_chief:
            return
        if report.status == INCOMPLETE:
            # Training is stopping inside this window (often because a peer is
            # gone): no peer report is coming, and the process may end at once.
            if self.write_summaries:
                self._write(record.epoch, report, {}, {})
            return
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="keras_xla_guard_cluster"
                )
            self._futures.append(self._executor.submit(self._gather, report))

    def close(self, records: Mapping[int, EpochRecord]) -> None:
        """Waits for the chief's pending epochs, closes its writer, prints.

        Args:
            records: Every record of the run, keyed by epoch (each already
                came through `write_epoch`).
        """
        # Each pending epoch waits at most `timeout` for its peers.
        concurrent.futures.wait(self._futures)
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        if self.info.is_chief and self.verbose:
            for line in _describe(self.by_epoch):
                print(f"keras-xla-guard: {line}", flush=True)

    # ------------------------------------------------------------ internals

    def _save(self) -> None:
        """Rewrites this worker's run file atomically (rename into place)."""
        save_run_file(self.trace_dir, self._own, self._stats, worker=self.info.name, calls=self._calls)

    def _peer_report(self, name: str, epoch: int) -> CoverageReport | None:
        """`name`'s report of `epoch` from this run, or `None` (not there yet)."""
        try:
            run = read_run_file(self.base_dir / name)
        except (OSError, ValueError):
            # Absent, or (on a file system without atomic rename) half written.
            return None
        if (run.saved_at or 0.0) < self.started - _CLOCK_SLACK_S:
            return None
        return run.coverage_reports().get(epoch)

    def _gather(self, own: CoverageReport) -> None:
        try:
            epoch = own.epoch
            assert epoch is not None
            reports = {self.info.name: own}
            waiting = [n for n in self.peers if n not in self._missing]
            deadline = time.monotonic() + self.timeout
            while True:
                for name in list(waiting):
                    report = self._peer_report(name, epoch)
                    if report is not None:
                        reports[name] = report
                        waiting.remove(name)
                if not waiting or time.monotonic() >= deadline:
                    break
                time.sleep(_POLL_S)
            # Workers given up on earlier still count if their report is
            # there, and are waited for again from the next epoch on.
            for name in sorted(self._missing):
                report = self._peer_report(name, epoch)
                if report is not None:
                    reports[name] = report
                    self._missing.discard(name)
            if waiting:
                self._missing.update(waiting)
                _warn(
                    f"no report of epoch {epoch} from {', '.join(waiting)} within "
                    f"{self.timeout:g} s in {os.fspath(self.base_dir)!r}: that worker runs "
                    "without the guard, profiles other epochs, has stopped, or does not share "
                    "this log dir. Pass the guard, with the same log_dir and profile_epochs, "
                    f"to every worker. The chief's summaries of epoch {epoch} hold "
                    f"{', '.join(sorted(reports))} only"
                )
            # A worker that did not profile by design is no failure.
            failed = {n: r for n, r in reports.items() if not r.ok and not r.reason.startswith(NOT_PROFILED)}
            for name, report in sorted(failed.items()):
                if name != self.info.name:
                    _warn(f"{name} measured nothing in epoch {epoch}: {report.status}: {report.reason}")
            measured = {n: r for n, r in reports.items() if r.ok}
            if len(measured) > 1:
                self.by_epoch[epoch] = measured
            if self.write_summaries:
                self._write(epoch, own, measured, reports)
        except Exception as e:  # noqa: BLE001 - runs beside training; must not end it
            _warn(f"writing the workers' summaries of epoch {own.epoch} failed: {type(e).__name__}: {e}")

    def _write(
        self,
        epoch: int,
        own: CoverageReport,
        measured: dict[str, CoverageReport],
        reports: dict[str, CoverageReport],
    ) -> None:
        with self._lock:
            if self._writer is None:
                self._writer = SummaryWriter(self.base_dir)
            writer = self._writer
        if len(measured) > 1:
            write_worker_summaries(writer, epoch, measured, own, self.info.name, top_k=self.top_k)
        else:
            # Only the chief's own figures: the plain single-worker tags.
            writer.write_report(own, step=epoch)
        unmeasured = {n: r for n, r in reports.items() if n not in measured}
        if unmeasured:
            writer.write_text("unprofiled_workers", unprofiled_markdown(unmeasured), step=epoch)


def _warn(message: str) -> None:
    warnings.warn(f"keras-xla-guard: {message}", XlaGuardWarning, stacklevel=2)


def _describe(by_epoch: dict[int, dict[str, CoverageReport]]) -> list[str]:
    """One line per epoch naming the worst worker, for the console."""
    lines = []
    for epoch, reports in sorted(by_epoch.items()):
        worst = worst_worker(reports)
        lines.append(
            f"epoch {epoch}: {len(reports)} workers, worst {worst} at "
            f"{reports[worst].xla_time_fraction:.1%} XLA"
        )
    return lines
