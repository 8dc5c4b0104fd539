"""Multi-worker output: one trace directory per worker, the chief's summaries.

Under `tf.distribute.MultiWorkerMirroredStrategy` every worker process runs
its own profiler and compiles its own executables, so each worker measures
its own coverage. Both guards (the Keras callback and the custom-loop
`XlaGuard`) attach a `ClusterSink` to their engine for the run:

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
import json
import os
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Protocol

from keras_xla_guard.distributed import (
    REPORTS_FILE,
    WorkerInfo,
    info_from_cluster,
    worker_info,
)
from keras_xla_guard.errors import XlaGuardWarning
from keras_xla_guard.report import CoverageReport

__all__ = [
    "WORKER_TIMEOUT_S",
    "ClusterSink",
    "ReportSink",
    "attach_cluster",
    "find_worker",
    "read_reports",
    "worker_info_from_tf_config",
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


class ReportSink(Protocol):
    """Receives each finished epoch's report from an `XlaGuardEngine`.

    `epoch_report` is called once per profiled epoch of a run, with the
    complete report (trace figures and the epoch's input signatures), from
    whichever thread finished it last; it must return quickly. `close` is
    called at the end of the run.
    """

    def epoch_report(self, report: CoverageReport) -> None:
        """Takes one epoch's final report."""

    def close(self, timeout: float | None = None) -> None:
        """Finishes the run's output, waiting at most `timeout` seconds."""


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
    from keras_xla_guard.cluster import worker_info_from_tf_config

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
    from keras_xla_guard.cluster import find_worker

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


def attach_cluster(engine: Any, strategy: Any = None) -> WorkerInfo | None:
    """Routes the engine's run through a `ClusterSink` if this is a worker.

    Call it right after `engine.train_begin()`; `engine.train_end()` closes
    the sink. Never raises: a cluster layout that cannot be read becomes an
    `XlaGuardWarning` and the worker profiles as if alone.

    Args:
        engine: The guard's `XlaGuardEngine`.
        strategy: See `find_worker`.

    Returns:
        This worker's `WorkerInfo`, or `None` when training is not
        multi-worker (or the layout could not be read).

    Example:

    ```python
    engine.train_begin()
    worker = attach_cluster(engine, strategy)
    ...  # epochs and steps
    engine.train_end()  # closes the worker's sink
    ```
    """
    try:
        info = find_worker(strategy)
        if info is None:
            return None
        sink = ClusterSink(
            info,
            engine.log_dir,
            write_summaries=engine.write_summaries,
            verbose=engine.verbose,
            top_k=engine.top_k,
        )
        engine.route(trace_dir=sink.own_dir, sink=sink, own_summaries=False)
        _tell_crash_risk()
        return info
    except Exception as e:  # noqa: BLE001 - guarding must not break training
        warnings.warn(
            f"keras-xla-guard: reading the cluster layout failed ({type(e).__name__}: {e}); "
            "this worker profiles as if alone",
            XlaGuardWarning,
            stacklevel=3,
        )
        return None


def _tell_crash_risk() -> None:
    global _crash_risk_told
    if _crash_risk_told:
        return
    _crash_risk_told = True
    _warn(
        "under MultiWorkerMirroredStrategy TensorFlow's own profiler stop "
        "(tf.profiler.experimental.stop) sometimes aborts a worker process natively "
        "(\"free(): invalid pointer\", \"double free or corruption\", a segmentation fault), "
        "with or without this guard; profile few epochs (docs/multiworker.md)"
    )


def read_reports(path: str | os.PathLike[str]) -> dict[int, CoverageReport]:
    """Reads a worker's `xla_guard_reports.json`.

    Args:
        path: The file, or the worker's directory holding it.

    Returns:
        The worker's reports keyed by epoch.

    Raises:
        OSError: If the file cannot be read.
        ValueError: If it is not a reports file.

    Example:

    ```python
    from keras_xla_guard.cluster import read_reports
    print(read_reports("logs/mw/worker_1")[1].xla_time_fraction)
    ```
    """
    path = Path(path)
    if path.is_dir():
        path = path / REPORTS_FILE
    return {int(e): CoverageReport.from_dict(r) for e, r in _load(path)["reports"].items()}


def _load(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("reports"), dict):
        raise ValueError(f"{os.fspath(path)!r} is not a keras-xla-guard reports file")
    return data


class ClusterSink:
    """One worker's output in a multi-worker run; on the chief, the summaries.

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

    Example:

    ```python
    sink = ClusterSink(info, "logs/mw")
    engine.route(trace_dir=sink.own_dir, sink=sink, own_summaries=False)
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
    ) -> None:
        self.info = info
        self.base_dir = Path(log_dir)
        self.own_dir = self.base_dir / info.name
        self.write_summaries = write_summaries
        self.verbose = verbose
        self.top_k = top_k
        self.timeout = WORKER_TIMEOUT_S if timeout is None else float(timeout)
        self.started = time.time()
        self.by_epoch: dict[int, dict[str, CoverageReport]] = {}
        self._own: dict[int, CoverageReport] = {}
        self._missing: set[str] = set()
        self._lock = threading.Lock()
        self._writer: Any = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._futures: list[concurrent.futures.Future[None]] = []
        # Written at once, so that a stale file of an earlier run in this
        # log dir is replaced before any other worker can read it.
        self._save()

    @property
    def peers(self) -> tuple[str, ...]:
        """The other workers' names, in rank order."""
        return tuple(n for n in self.info.names if n != self.info.name)

    def epoch_report(self, report: CoverageReport) -> None:
        """Saves this worker's report; the chief then gathers the epoch."""
        assert report.epoch is not None
        with self._lock:
            self._own[report.epoch] = report
            self._save()
        if self.info.is_chief:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="keras_xla_guard_cluster"
                )
            self._futures.append(self._executor.submit(self._gather, report))

    def close(self, timeout: float | None = None) -> None:
        """Waits for the chief's pending epochs, closes its writer, prints."""
        concurrent.futures.wait(self._futures, timeout=timeout)
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
        """Rewrites this worker's reports file atomically (rename into place)."""
        self.own_dir.mkdir(parents=True, exist_ok=True)
        path = self.own_dir / REPORTS_FILE
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        data = {
            "worker": self.info.name,
            "saved_at": time.time(),
            "reports": {str(e): r.to_dict() for e, r in sorted(self._own.items())},
        }
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)

    def _peer_report(self, name: str, epoch: int) -> CoverageReport | None:
        """`name`'s report of `epoch` from this run, or `None` (not there yet)."""
        path = self.base_dir / name / REPORTS_FILE
        try:
            data = _load(path)
        except (OSError, ValueError):
            # Absent, or (on a file system without atomic rename) half written.
            return None
        if float(data.get("saved_at", 0)) < self.started - _CLOCK_SLACK_S:
            return None
        entry = data["reports"].get(str(epoch))
        return CoverageReport.from_dict(entry) if entry is not None else None

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
            # Workers given up on earlier still count if their report is there.
            for name in sorted(self._missing):
                report = self._peer_report(name, epoch)
                if report is not None:
                    reports[name] = report
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
            failed = {n: r for n, r in reports.items() if not r.ok}
            for name, report in sorted(failed.items()):
                if name != self.info.name:
                    _warn(f"{name} measured nothing in epoch {epoch}: {report.status}: {report.reason}")
            measured = {n: r for n, r in reports.items() if r.ok}
            if len(measured) > 1:
                self.by_epoch[epoch] = measured
            if self.write_summaries:
                self._write(epoch, own, measured)
        except Exception as e:  # noqa: BLE001 - runs beside training; must not end it
            _warn(f"writing the workers' summaries of epoch {own.epoch} failed: {type(e).__name__}: {e}")

    def _write(self, epoch: int, own: CoverageReport, measured: dict[str, CoverageReport]) -> None:
        from keras_xla_guard.distributed import write_worker_summaries
        from keras_xla_guard.summary import SummaryWriter

        with self._lock:
            if self._writer is None:
                self._writer = SummaryWriter(self.base_dir)
            writer = self._writer
        if len(measured) > 1:
            write_worker_summaries(writer, epoch, measured, own, self.info.name, top_k=self.top_k)
        else:
            # Only the chief's own figures: the plain single-worker tags.
            writer.write_report(own, step=epoch)


def _warn(message: str) -> None:
    warnings.warn(f"keras-xla-guard: {message}", XlaGuardWarning, stacklevel=2)


def _describe(by_epoch: dict[int, dict[str, CoverageReport]]) -> list[str]:
    """One line per epoch naming the worst worker, for the console."""
    from keras_xla_guard.distributed import worst_worker

    lines = []
    for epoch, reports in sorted(by_epoch.items()):
        worst = worst_worker(reports)
        lines.append(
            f"epoch {epoch}: {len(reports)} workers, worst {worst} at "
            f"{reports[worst].xla_time_fraction:.1%} XLA"
        )
    return lines
