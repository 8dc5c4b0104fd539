"""Multi-worker runs: where each worker sits, and the chief's summaries.

Under `tf.distribute.MultiWorkerMirroredStrategy` every worker process runs
its own profiler and measures its own coverage. `worker_info` tells a guard
where its process sits in the cluster; `keras_xla_guard.cluster` routes
each worker's traces and reports into `<log_dir>/<task_type>_<task_id>/`
and has the chief write the TensorBoard summaries of all workers with
`write_worker_summaries`: the combined figures under the usual
`xla_guard/...` tags, each worker's under `xla_guard/<task_type>_<task_id>/...`,
and a text table naming the worst worker.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from keras_xla_guard.report import CoverageReport

__all__ = [
    "REPORTS_FILE",
    "WorkerInfo",
    "info_from_cluster",
    "strategy_verdicts",
    "worker_info",
    "worst_worker",
    "write_worker_summaries",
]

REPORTS_FILE = "xla_guard_reports.json"
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
    return WorkerInfo(
        task_type, task_id, num_workers, task_type == chief_job and task_id == 0, names
    )


def worst_worker(reports: dict[str, CoverageReport]) -> str:
    """The worker with the lowest XLA share; ties go to more compile time."""
    return min(reports, key=lambda n: (reports[n].xla_time_fraction, -reports[n].compile_time_s, n))


def _workers_markdown(reports: dict[str, CoverageReport]) -> str:
    """A per-worker table for TensorBoard's text dashboard, worst worker first."""
    from keras_xla_guard.summary import escape_markdown, markdown_table

    worst = worst_worker(reports)
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


_PER_WORKER_SCALARS = {
    "xla_time_fraction": lambda r: r.xla_time_fraction,
    "coverage_percent": lambda r: 100.0 * r.xla_time_fraction,
    "xla_time_s": lambda r: r.xla_time_s,
    "non_xla_op_time_s": lambda r: r.non_xla_op_time_s,
    "compilations": lambda r: r.compilations,
    "compile_time_s": lambda r: r.compile_time_s,
}


def write_worker_summaries(
    writer: Any,
    epoch: int,
    reports: dict[str, CoverageReport],
    own: CoverageReport,
    own_name: str,
    top_k: int = 10,
) -> None:
    """Writes the chief's TensorBoard summaries of one epoch of all workers.

    Args:
        writer: A `keras_xla_guard.summary.SummaryWriter` on the base log dir.
        epoch: The epoch (the TensorBoard step).
        reports: Each worker's measured (`ok`) report of the epoch, keyed
            by worker name.
        own: The chief's own report (its op table goes in as text).
        own_name: The chief's worker name.
        top_k: Plain TF ops kept in the combined op table. Defaults to `10`.
    """
    from keras_xla_guard.analysis import combine_reports
    from keras_xla_guard.summary import report_markdown

    combined = combine_reports(list(reports.values()), top_k=top_k)
    scalars = {tag: read(combined) for tag, read in _PER_WORKER_SCALARS.items()}
    scalars["xla_executions"] = combined.xla_executions
    scalars["input_pipeline_time_s"] = combined.input_pipeline_time_s
    for name, report in reports.items():
        for tag, read in _PER_WORKER_SCALARS.items():
            scalars[f"{name}/{tag}"] = read(report)
    scalars["worst_worker_xla_time_fraction"] = reports[worst_worker(reports)].xla_time_fraction
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
    writer.write_text(f"{own_name}/report", report_markdown(own), step=epoch)


_PER_REPLICA_FIX = '''class MyModel(keras.Sequential):  # Keras 3; or your keras.Model subclass
    @tf.function(jit_compile=True)
    def _xla_step(self, x, y):
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        return y_pred, loss, tape.gradient(loss, self.trainable_variables)

    def train_step(self, data):
        x, y = data
        y_pred, loss, grads = self._xla_step(x, y)
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":  # compute_loss divided it by the replica count
                metric.update_state(loss * self.distribute_strategy.num_replicas_in_sync)
            else:
                metric.update_state(y, y_pred)
        return self.get_metrics_result()
# build and compile it in strategy.scope() without jit_compile'''


def strategy_verdicts(model: Any) -> list[Any]:
    """Verdicts about XLA under a `tf.distribute` strategy with several replicas.

    `compile(jit_compile=True)` makes Keras compile the gradient all-reduce
    and the optimizer update into the XLA program (Keras 3 compiles the step
    of all replicas as one program, tf_keras each replica's step). TensorFlow
    rejects it with
    "Trying to access resource ... located in device ..." (MirroredStrategy;
    keras-team/keras#19005) or, on CPU, "Collectives are not yet implemented
    for CPU devices when compiling with XLA". What runs is XLA per replica:
    each replica's forward and backward pass compiled, the all-reduce and
    the optimizer update outside.

    Args:
        model: A compiled Keras (or tf_keras) model.

    Returns:
        `STRATEGY_JIT_COMPILE_FAILS` (error) for `jit_compile=True`, or
        `STRATEGY_XLA_PER_REPLICA` (warning) otherwise; empty with fewer
        than two replicas.

    Example:

    ```python
    from keras_xla_guard.distributed import strategy_verdicts
    for verdict in strategy_verdicts(model):
        print(verdict)
    ```
    """
    from keras_xla_guard.diagnosis import ERROR, WARNING, Verdict
    from keras_xla_guard.explainer import MODEL

    strategy = getattr(model, "distribute_strategy", None)
    replicas = int(getattr(strategy, "num_replicas_in_sync", 1) or 1)
    if replicas < 2:
        return []
    if getattr(model, "jit_compile", False):
        return [
            Verdict(
                "STRATEGY_JIT_COMPILE_FAILS",
                MODEL,
                ERROR,
                f"model.jit_compile is True under {type(strategy).__name__} with {replicas} "
                "replicas: Keras puts the gradient all-reduce and the optimizer update inside "
                "the XLA program (Keras 3 even compiles all replicas as one), which "
                "TensorFlow rejects (\"Trying to access "
                "resource ... located in device ...\", or on CPU \"Collectives are not yet "
                "implemented for CPU devices when compiling with XLA\"). Compile each "
                "replica's forward and backward pass instead.",
                _PER_REPLICA_FIX,
            )
        ]
    return [
        Verdict(
            "STRATEGY_XLA_PER_REPLICA",
            MODEL,
            WARNING,
            f"Under {type(strategy).__name__} with {replicas} replicas, "
            "compile(jit_compile=True) does not run; XLA works per replica: compile each "
            "replica's forward and backward pass, keep the gradient all-reduce and the "
            "optimizer update outside. If you already do, the time outside XLA is the "
            "all-reduce and the update (see the op table).",
            _PER_REPLICA_FIX,
        )
    ]
