"""TensorBoard output: the guard's summaries written into a run directory, and its `ReportSink`.

Everything goes through TensorBoard's own classes, with no TensorFlow:
its `EventFileWriter` writes the event file, and each summary is built by
its plugin's `*_pb` builder (`scalar_pb`, `text_pb`, the custom-scalar
`pb`), which write the same tags, plugin metadata and tensors as
`tf.summary.scalar`/`text`. So the guard writes the same TensorBoard
files under TensorFlow and under JAX (where `tf.summary` does not exist),
in one code path, beside Keras' own TensorBoard callback in one log dir.
The tags and the layout are `output.tensorboard_metadata`'s, the Markdown
`output.tensorboard_markdown`'s.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from keras_xla_guard.output import tensorboard_metadata as metadata
from keras_xla_guard.output.compilations import compilation_scalars
from keras_xla_guard.output.tensorboard_markdown import (
    compilations_markdown,
    compiles_markdown,
    report_markdown,
    signatures_markdown,
    signatures_unavailable_markdown,
    workers_markdown,
    worst_worker,
)
from keras_xla_guard.runtime.compile_log import COUNTED, EpochCompilations
from keras_xla_guard.runtime.sink import CallRecord, EpochRecord
from keras_xla_guard.signatures import EpochSignatures
from keras_xla_guard.trace.analysis import combine_reports
from keras_xla_guard.trace.report import CoverageReport

__all__ = [
    "SummaryWriter",
    "TensorBoardSink",
    "report_scalars",
    "write_worker_summaries",
]


def report_scalars(report: CoverageReport) -> dict[str, float]:
    """Every scalar a measured report writes: tag -> value.

    Args:
        report: An ok report.

    Returns:
        `SCALAR_TAGS`' figures, `DEVICE_TAGS`' that are set, each XLA
        program's device time and runs (`PROGRAM_TAG`) and, when the
        report sums several devices, each device's XLA time, share,
        launches and transfers (`DEVICE_TAG`).
    """
    scalars = {tag: float(read(report)) for tag, read in metadata.SCALAR_TAGS.items()}
    scalars.update(
        {
            tag: float(value)
            for tag, read in metadata.DEVICE_TAGS.items()
            if (value := read(report)) is not None
        }
    )
    for p in report.programs:
        scalars[metadata.PROGRAM_TAG.format(program=p.program, figure="time_s")] = p.time_s
        scalars[metadata.PROGRAM_TAG.format(program=p.program, figure="runs")] = float(p.runs)
    if len(report.devices) > 1:
        for d, name in zip(report.devices, metadata.device_names(report)):
            for figure in metadata.DEVICE_FIGURES:
                scalars[metadata.DEVICE_TAG.format(device=name.lstrip("/"), figure=figure)] = float(
                    getattr(d, figure)
                )
    return scalars


def write_worker_summaries(
    writer: SummaryWriter,
    epoch: int,
    reports: Mapping[str, CoverageReport],
    own: CoverageReport,
    own_name: str,
    top_k: int = 10,
) -> None:
    """Writes the chief's TensorBoard summaries of one epoch of all workers.

    Args:
        writer: A `SummaryWriter` on the base log dir.
        epoch: The epoch (the TensorBoard step).
        reports: Each worker's measured (`ok`) report of the epoch, keyed
            by worker name.
        own: The chief's own report (its op table goes in as text; each
            measured worker's compile table too, as `<worker>/compiles`).
        own_name: The chief's worker name.
        top_k: Plain TF ops kept in the combined op table. Defaults to `10`.
    """
    combined = combine_reports(list(reports.values()), top_k=top_k)
    scalars = {tag: read(combined) for tag, read in metadata.WORKER_TAGS.items()}
    scalars["xla_executions"] = combined.xla_executions
    scalars["input_pipeline_time_s"] = combined.input_pipeline_time_s
    for name, report in reports.items():
        for tag, read in metadata.WORKER_TAGS.items():
            scalars[f"{name}/{tag}"] = read(report)
    scalars["worst_worker_xla_time_fraction"] = reports[worst_worker(reports)].xla_time_fraction
    for figure in metadata.WORKER_SIGNATURE_FIGURES:
        seen = {n: getattr(r, figure) for n, r in reports.items() if getattr(r, figure) is not None}
        for name, value in seen.items():
            scalars[f"{name}/{figure}"] = value
        if seen:
            # Each worker reads its own shard; the most shapes any
            # worker met is what drives its compilations.
            scalars[figure] = max(seen.values())
    writer.write_scalars(scalars, step=epoch)
    writer.write_text("workers", workers_markdown(reports), step=epoch)
    writer.write_text(f"{own_name}/report", report_markdown(own), step=epoch)
    for name, report in sorted(reports.items()):
        # What a single-process run writes as `xla_guard/compiles`, per worker.
        if report.compile_table or report.persistent_cache:
            writer.write_text(f"{name}/compiles", compiles_markdown(report), step=epoch)


def _layout_summary(layout: Any) -> Any:
    """The Custom Scalars summary of `layout`, built as the plugin's `summary.pb` builds it.

    The plugin's own `pb` imports TensorFlow; this is the same summary
    (its metadata, its tag, the layout's bytes as a string tensor) from
    TensorBoard's own classes, the way `text_pb` builds a text summary.
    """
    import numpy as np
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.custom_scalar import metadata as custom_scalar
    from tensorboard.util import tensor_util

    summary = summary_pb2.Summary()
    summary.value.add(
        tag=custom_scalar.CONFIG_SUMMARY_TAG,
        metadata=custom_scalar.create_summary_metadata(),
        tensor=tensor_util.make_tensor_proto(layout.SerializeToString(), dtype=np.object_),
    )
    return summary


class SummaryWriter:
    """Writes guard reports as TensorBoard summaries into one run directory.

    The Custom Scalars layout is written with the first summary, so any run
    holding guard data also holds its layout. Safe to use from several
    threads (the engine writes from its analysis thread).

    Args:
        log_dir: The run directory (event files are written directly in it).

    Example:

    ```python
    from keras_xla_guard import CoverageReport
    from keras_xla_guard.output.tensorboard import SummaryWriter

    writer = SummaryWriter("logs/xla_guard")
    writer.write_report(CoverageReport(xla_time_s=0.9, non_xla_op_time_s=0.1,
                                       xla_time_fraction=0.9), step=1)
    writer.close()
    ```
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.log_dir = os.fspath(log_dir)
        self._writer: Any = None
        self._layout_written = False
        self._lock = threading.RLock()
        self.counted_compilations = False

    def _get(self) -> Any:
        if self._writer is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            # The suffix tf.summary gives its files, so each writer's file is told apart.
            self._writer = EventFileWriter(self.log_dir, filename_suffix=".v2")
        return self._writer

    def _write(self, summary: Any, step: int) -> None:
        from tensorboard.compat.proto import event_pb2

        event = event_pb2.Event(wall_time=time.time(), step=int(step))
        # With TensorFlow installed the plugins' builders return TensorFlow's
        # Summary class, with TensorBoard's the same message under another
        # class: copied by its bytes, never by class.
        event.summary.ParseFromString(summary.SerializeToString())
        self._get().add_event(event)

    def write_layout(self) -> None:
        """Writes the Custom Scalars layout once per writer."""
        with self._lock:
            if self._layout_written:
                return
            self._write(_layout_summary(metadata.layout_proto(self.counted_compilations)), step=0)
            self._layout_written = True

    def write_report(self, report: CoverageReport, step: int) -> None:
        """Writes one report's scalars and text at `step` (the epoch).

        Args:
            report: The report; a skipped/failed one writes only its text.
            step: The TensorBoard step, normally the 0-based epoch index.
        """
        from tensorboard.plugins.scalar.summary_v2 import scalar_pb
        from tensorboard.plugins.text.summary_v2 import text_pb

        scalars = report_scalars(report) if report.status == "ok" else {}
        skipped = metadata.JAX_SKIPPED_TAGS if report.backend == "jax" else frozenset()
        summaries = [scalar_pb(tag, value) for tag, value in scalars.items() if tag not in skipped]
        self._write_all([*summaries, text_pb(f"{metadata.PREFIX}/report", report_markdown(report))], step)

    def write_scalars(self, values: dict[str, float], step: int) -> None:
        """Writes extra scalars (e.g. signature counts) under `xla_guard/`.

        Args:
            values: Tag suffix -> value, e.g. `{"new_signatures": 3}`.
            step: The TensorBoard step, normally the 0-based epoch index.
        """
        from tensorboard.plugins.scalar.summary_v2 import scalar_pb

        self._write_all(
            [scalar_pb(f"{metadata.PREFIX}/{name}", float(value)) for name, value in values.items()], step
        )

    def write_text(self, name: str, markdown: str, step: int) -> None:
        """Writes a Markdown text summary under `xla_guard/<name>`.

        Args:
            name: Tag suffix, e.g. `"recompilation"`.
            markdown: The Markdown; build it with `escape_markdown` and
                `markdown_table` so names cannot inject markup.
            step: The TensorBoard step, normally the 0-based epoch index.
        """
        from tensorboard.plugins.text.summary_v2 import text_pb

        self._write_all([text_pb(f"{metadata.PREFIX}/{name}", markdown)], step)

    def _write_all(self, summaries: list[Any], step: int) -> None:
        """Writes `summaries` at `step` after the layout, then flushes."""
        with self._lock:
            self.write_layout()
            for summary in summaries:
                self._write(summary, step)
            self._writer.flush()

    def close(self) -> None:
        """Flushes and closes the event file."""
        with self._lock:
            if self._writer is not None:
                self._writer.flush()
                self._writer.close()
                self._writer = None


class TensorBoardSink:
    """The engine's `ReportSink` for TensorBoard: one event file per run directory.

    Reports become `xla_guard/...` scalars and a text table, signature
    figures become scalars and text, all at step = epoch; a validation's
    figures go under `xla_guard/validation/...` at its epoch, an
    `evaluate` or `predict` call's under `xla_guard/evaluate/...` or
    `xla_guard/predict/...` at its call number. The event file is
    opened at the first write, so a run that measures nothing leaves none.

    Args:
        log_dir: The run directory for the event file.

    Example:

    ```python
    from keras_xla_guard import XlaGuardEngine
    from keras_xla_guard.output.tensorboard import TensorBoardSink

    engine = XlaGuardEngine(sinks=[TensorBoardSink("logs/xla_guard")])
    ```
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.writer = SummaryWriter(log_dir)
        self.directory = os.fspath(log_dir)
        # What a warning about a failed write names (`runtime/failures.py`).
        self.what = f"the TensorBoard summaries in {os.fspath(log_dir)!r}"

    def write_epoch(self, record: EpochRecord) -> None:
        """Writes an epoch's report, signature figures and compile table at its epoch.

        The report's scalars and text table (text only when it measured
        nothing), the signature scalars and their explanation (or why
        there are none), and the window's compile table
        (`xla_guard/compiles`) when the window was measured.
        """
        epoch, report = record.epoch, record.report
        if record.compilations is not None and record.compilations.source == COUNTED:
            self.writer.counted_compilations = True
        if report is not None:
            self.writer.write_report(report, step=epoch)
        self._write_signatures("", record.signatures, record.signatures_unavailable, step=epoch)
        if report is not None and report.ok:
            self.writer.write_text("compiles", compiles_markdown(report), step=epoch)
        if record.compilations is not None:
            self.writer.write_scalars(compilation_scalars(record.compilations), step=epoch)
            self.writer.write_text(
                "counted_compilations", compilations_markdown(record.compilations), step=epoch
            )
        for call in record.calls:
            self._write_call(call, step=epoch)

    def write_call(self, record: CallRecord) -> None:
        """Writes an `evaluate` or `predict` call outside `fit` at its call number.

        Under `xla_guard/evaluate/...` or `xla_guard/predict/...`: the
        signature scalars and their explanation (or why there are none).
        """
        self._write_call(record, step=record.call)

    def _write_call(self, call: CallRecord, step: int) -> None:
        """Writes a test or predict call's compilations and signatures under its kind at `step`."""
        prefix = call.kind
        if call.compilations is not None:
            counted = EpochCompilations(step, call.compilations)
            scalars = {f"{prefix}/compilations": float(counted.count(call.function))}
            seconds = counted.seconds(call.function)
            if seconds is not None:  # untimed (TensorFlow): left out, never a fake 0
                scalars[f"{prefix}/compile_time_s"] = seconds
            self.writer.write_scalars(scalars, step=step)
        self._write_signatures(f"{prefix}/", call.signatures, call.signatures_unavailable, step=step)

    def _write_signatures(
        self, prefix: str, stats: EpochSignatures | None, unavailable: str | None, step: int
    ) -> None:
        """Writes signature scalars and their explanation under `prefix`, or why there are none."""
        if stats is not None:
            values = {f"{prefix}{tag}": read(stats) for tag, read in metadata.SIGNATURE_TAGS.items()}
            self.writer.write_scalars(
                {tag: value for tag, value in values.items() if value is not None}, step=step
            )
            self.writer.write_text(f"{prefix}signatures", signatures_markdown(stats), step=step)
        elif unavailable is not None:
            self.writer.write_text(
                f"{prefix}signatures", signatures_unavailable_markdown(unavailable), step=step
            )

    def close(self, records: Mapping[int, EpochRecord]) -> None:
        """Flushes and closes the event file."""
        self.writer.close()
