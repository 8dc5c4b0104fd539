"""Multi-worker runs: one trace directory per worker, one summary writer.

Under `tf.distribute.MultiWorkerMirroredStrategy` every worker process runs
its own profiler and compiles its own executables, so each worker measures
its own coverage. Each worker profiles into `<log_dir>/<task_type>_<task_id>/`
(TensorFlow names a trace after the host only, so two workers on one host
would otherwise overwrite each other's file) and saves its reports there as
`xla_guard_reports.json`. At the end of training the workers exchange their
figures with one collective all-gather (no shared file system needed), and
the chief alone writes TensorBoard summaries into `<log_dir>`: the combined
figures under the usual `xla_guard/...` tags, each worker's under
`xla_guard/<task_type>_<task_id>/...`, and a text table naming the worst
worker.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from keras_xla_guard.errors import XlaGuardWarning

from keras_xla_guard.trace.report import CoverageReport

__all__ = [
    "REPORTS_FILE",
    "ClusterSink",
    "WorkerInfo",
    "worker_info",
]

REPORTS_FILE = "xla_guard_reports.json"
# A worker that never reaches the end of training (crashed, killed) must not
# hang the others forever; training itself is over by then.
GATHER_TIMEOUT_S = 120.0
# Figures exchanged per worker and epoch, in this order; NaN marks an epoch
# without a measured report on that worker (first figure) or a figure the
# worker did not measure (signatures when tracking was unavailable).
FIGURES = (
    "xla_time_s",
    "non_xla_op_time_s",
    "xla_executions",
    "compilations",
    "compile_time_s",
    "input_pipeline_time_s",
    "guard_op_time_s",
    "steps_profiled",
    "distinct_signatures",
    "new_signatures",
)
_SIGNATURE_FIGURES = ("distinct_signatures", "new_signatures")


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
    spec = resolver.cluster_spec().as_dict()
    jobs = [job for job in ("chief", "worker") if job in spec]
    num_workers = sum(len(spec[job]) for job in jobs)
    if num_workers < 2:
        return None
    task_type, task_id = resolver.task_type, int(resolver.task_id or 0)
    chief_job = "chief" if "chief" in spec else "worker"
    names = tuple(f"{job}_{i}" for job in jobs for i in range(len(spec[job])))
    return WorkerInfo(
        task_type, task_id, num_workers, task_type == chief_job and task_id == 0, names
    )


def _save_reports(reports: dict[int, CoverageReport], path: Path) -> None:
    """Writes a worker's reports as JSON, atomically (rename into place).

    Args:
        reports: Reports keyed by epoch.
        path: Target file, inside the worker's own directory.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    data = {"reports": {str(epoch): r.to_dict() for epoch, r in sorted(reports.items())}}
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _figures_matrix(reports: dict[int, CoverageReport], epochs: int) -> list[list[float]]:
    """One row of `FIGURES` per epoch `0 .. epochs-1`, NaN where unmeasured."""
    rows = []
    for epoch in range(epochs):
        report = reports.get(epoch)
        if report is None or not report.ok:
            rows.append([math.nan] * len(FIGURES))
            continue
        rows.append(
            [
                math.nan if getattr(report, f) is None and f in _SIGNATURE_FIGURES
                else float(getattr(report, f) or 0)
                for f in FIGURES
            ]
        )
    return rows


def _gather_figures(strategy: Any, rows: list[list[float]], info: WorkerInfo) -> list[list[list[float]]]:
    """Exchanges every worker's figure rows with one all-gather.

    Every worker must call this the same number of times with the same
    number of rows (the epochs of the `fit` call are the same everywhere).

    Args:
        strategy: The `MultiWorkerMirroredStrategy` the model trains under.
        rows: This worker's `_figures_matrix`.
        info: This worker's `WorkerInfo`.

    Returns:
        One matrix per worker, indexed by worker rank (chief first).
    """
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=GATHER_TIMEOUT_S)

    @tf.function
    def exchange() -> Any:
        # Built inside the replica function so it lives on the replica's
        # device, where the collective runs.
        value = tf.constant([rows], dtype=tf.float64)
        return tf.distribute.get_replica_context().all_gather(value, axis=0, options=options)

    gathered = strategy.experimental_local_results(strategy.run(exchange))[0]
    # Replicas are numbered worker by worker; every local replica of a worker
    # carries the same rows, so one row block per worker remains.
    per_worker = strategy.num_replicas_in_sync // info.num_workers
    return gathered.numpy()[::per_worker].tolist()


def _report_of(row: list[float], epoch: int, host: str) -> CoverageReport:
    values = dict(zip(FIGURES, row))
    xla, non = values["xla_time_s"], values["non_xla_op_time_s"]
    return CoverageReport(
        epoch=epoch,
        hosts=(host,),
        steps_profiled=int(values["steps_profiled"]),
        xla_time_s=xla,
        non_xla_op_time_s=non,
        xla_time_fraction=xla / (xla + non) if xla + non else 0.0,
        xla_executions=int(values["xla_executions"]),
        compilations=int(values["compilations"]),
        compile_time_s=values["compile_time_s"],
        input_pipeline_time_s=values["input_pipeline_time_s"],
        guard_op_time_s=values["guard_op_time_s"],
        **{
            f: int(values[f])
            for f in _SIGNATURE_FIGURES
            if not math.isnan(values[f])
        },
    )


def _worker_reports(
    matrices: list[list[list[float]]], names: list[str]
) -> dict[int, dict[str, CoverageReport]]:
    """Turns gathered figures into reports keyed by epoch, then worker name.

    Args:
        matrices: `_gather_figures` output.
        names: Worker names in rank order.

    Returns:
        For each epoch measured on at least one worker, the reports of the
        workers that measured it.
    """
    out: dict[int, dict[str, CoverageReport]] = {}
    for name, rows in zip(names, matrices):
        for epoch, row in enumerate(rows):
            if not math.isnan(row[0]):
                out.setdefault(epoch, {})[name] = _report_of(row, epoch, name)
    return out


def _worst_worker(reports: dict[str, CoverageReport]) -> str:
    """The worker with the lowest XLA share; ties go to more compile time."""
    return min(reports, key=lambda n: (reports[n].xla_time_fraction, -reports[n].compile_time_s, n))


def _workers_markdown(reports: dict[str, CoverageReport]) -> str:
    """A per-worker table for TensorBoard's text dashboard, worst worker first."""
    from keras_xla_guard.output.tensorboard import escape_markdown, markdown_table

    worst = _worst_worker(reports)
    rows = []
    for name in sorted(reports, key=lambda n: (n != worst, n)):
        r = reports[name]
        rows.append(
            [
                name,
                f"{100 * r.xla_time_fraction:.1f}",
                f"{r.xla_time_s * 1e3:.2f}",
                f"{r.non_xla_op_time_s * 1e3:.2f}",
                r.compilations,
                f"{r.compile_time_s * 1e3:.1f}",
                "worst" if name == worst else "",
            ]
        )
    headline = (
        f"**Worst worker: {escape_markdown(worst)}**, "
        f"{100 * reports[worst].xla_time_fraction:.1f}% of its op time inside XLA "
        f"({len(reports)} workers)."
    )
    table = markdown_table(
        ["worker", "coverage %:", "XLA ms:", "non-XLA ms:", "compilations:", "compile ms:", ""],
        rows,
    )
    return headline + "\n\n" + table


def _write_worker_summaries(
    writer: Any,
    by_epoch: dict[int, dict[str, CoverageReport]],
    own: dict[int, CoverageReport],
    own_name: str,
) -> None:
    """Writes the chief's TensorBoard summaries of all workers.

    Args:
        writer: A `keras_xla_guard.output.tensorboard.SummaryWriter` on the base log dir.
        by_epoch: `_worker_reports` output.
        own: The chief's own reports (their op tables go in as text).
        own_name: The chief's worker name.
    """
    from keras_xla_guard.output.tensorboard import WORKER_TAGS, report_markdown
    from keras_xla_guard.trace.analysis import combine_reports

    for epoch, reports in sorted(by_epoch.items()):
        combined = combine_reports(list(reports.values()))
        scalars = {tag: read(combined) for tag, read in WORKER_TAGS.items()}
        scalars["xla_executions"] = combined.xla_executions
        scalars["input_pipeline_time_s"] = combined.input_pipeline_time_s
        for name, report in reports.items():
            for tag, read in WORKER_TAGS.items():
                scalars[f"{name}/{tag}"] = read(report)
        scalars["worst_worker_xla_time_fraction"] = reports[_worst_worker(reports)].xla_time_fraction
        for figure in _SIGNATURE_FIGURES:
            seen = {n: getattr(r, figure) for n, r in reports.items() if getattr(r, figure) is not None}
            for name, value in seen.items():
                scalars[f"{name}/{figure}"] = value
            if seen:
                # Each worker reads its own shard; the most shapes any
                # worker met is what drives its compilations.
                scalars[figure] = max(seen.values())
        writer.write_scalars(scalars, step=epoch)
        writer.write_text("workers", _workers_markdown(reports), step=epoch)
    for epoch, report in sorted(own.items()):
        writer.write_text(f"{own_name}/report", report_markdown(report), step=epoch)


def _describe(by_epoch: dict[int, dict[str, CoverageReport]]) -> list[str]:
    """One line per epoch naming the worst worker, for the console."""
    lines = []
    for epoch, reports in sorted(by_epoch.items()):
        worst = _worst_worker(reports)
        lines.append(
            f"epoch {epoch}: {len(reports)} workers, worst {worst} at "
            f"{reports[worst].xla_time_fraction:.1%} XLA"
        )
    return lines



class ClusterSink:
    """A `ReportSink` for one worker of a multi-worker cluster.

    The engine profiles into this worker's own directory (`trace_dir`) and
    hands its figures here instead of writing summaries itself; `close`
    (at the end of the run, on every worker) saves this worker's reports,
    exchanges figures with the other workers and, on the chief, writes the
    summaries of all of them.

    Args:
        strategy: The model's `MultiWorkerMirroredStrategy`.
        info: This worker's `WorkerInfo`.
        epochs: Epochs of the `fit` call (the same on every worker).
        log_dir: The guard's base log directory.
        write_summaries: Whether the chief writes TensorBoard summaries.
        verbose: Whether the chief prints one line per epoch.

    Example:

    ```python
    cluster = ClusterSink.begin(config, model.distribute_strategy, epochs=3)
    engine.train_begin(epochs=3, trace_dir=cluster.trace_dir, sinks=[cluster])
    ...  # train with the engine's hooks
    engine.train_end()  # closes the sink: exchange, chief summaries
    ```
    """

    def __init__(
        self,
        strategy: Any,
        info: WorkerInfo,
        epochs: int,
        log_dir: Path,
        write_summaries: bool,
        verbose: bool,
    ) -> None:
        self.strategy = strategy
        self.info = info
        self.epochs = epochs
        self.base_log_dir = Path(log_dir)
        self.write_summaries = write_summaries
        self.verbose = verbose
        self.by_epoch: dict[int, dict[str, CoverageReport]] = {}

    @classmethod
    def begin(cls, config: Any, strategy: Any, epochs: int | None) -> "ClusterSink | None":
        """This worker's sink, or `None` outside a multi-worker cluster.

        Args:
            config: The guard's `GuardConfig`.
            strategy: The model's `tf.distribute.Strategy` (or `None`).
            epochs: Epochs of the `fit` call.

        Returns:
            The sink, or `None` when there is no cluster.
        """
        info = worker_info(strategy) if strategy is not None else None
        if info is None or not epochs:
            return None
        return cls(strategy, info, int(epochs), config.log_dir, config.write_summaries, bool(config.verbose))

    @property
    def trace_dir(self) -> Path:
        """This worker's own directory: traces and `xla_guard_reports.json`."""
        return self.base_log_dir / self.info.name

    def write_report(self, report: CoverageReport) -> None:
        """Nothing yet: the workers exchange their figures when the run ends."""

    def write_signatures(self, stats: Any) -> None:
        """Nothing: each report carries its epoch's signature figures."""

    def write_signatures_unavailable(self, epoch: int, reason: str) -> None:
        """Nothing: each report says it."""

    def close(self, reports: Mapping[int, CoverageReport]) -> None:
        """Saves, exchanges and (on the chief) writes; warns instead of raising.

        Called on every worker. If the exchange fails (a worker without the
        guard, a worker gone), the chief writes its own figures only.

        Args:
            reports: This worker's reports, keyed by epoch.
        """
        reports = dict(reports)
        try:
            _save_reports(reports, self.trace_dir / REPORTS_FILE)
            rows = _figures_matrix(reports, self.epochs)
            # Every worker joins the exchange, even one without reports,
            # or the others would wait for it until the timeout.
            matrices = _gather_figures(self.strategy, rows, self.info)
            self.by_epoch = _worker_reports(matrices, list(self.info.names))
        except Exception as e:  # noqa: BLE001 - the user's training is over and fine
            self._warn(
                f"exchanging figures between {self.info.num_workers} workers failed on "
                f"{self.info.name} ({type(e).__name__}: {e}); pass the callback to fit() "
                "on every worker. The chief writes its own figures only"
            )
        try:
            if self.info.is_chief and self.write_summaries:
                self._write_chief_summaries(reports)
            if self.info.is_chief and self.verbose:
                for line in _describe(self.by_epoch):
                    print(f"keras-xla-guard: {line}", flush=True)
        except Exception as e:  # noqa: BLE001
            self._warn(f"writing the workers' summaries failed: {type(e).__name__}: {e}")

    def _write_chief_summaries(self, reports: dict[int, CoverageReport]) -> None:
        from keras_xla_guard.output.tensorboard import SummaryWriter

        writer = SummaryWriter(self.base_log_dir)
        try:
            if self.by_epoch:
                _write_worker_summaries(writer, self.by_epoch, reports, self.info.name)
            else:
                for epoch, report in sorted(reports.items()):
                    writer.write_report(report, step=epoch)
        finally:
            writer.close()

    def _warn(self, message: str) -> None:
        warnings.warn(f"keras-xla-guard: {message}", XlaGuardWarning, stacklevel=4)
