"""`ReportSink` and `EpochRecord`: where a guard's figures go once they exist.

The engine measures; sinks publish. For each epoch the engine joins the
trace report, the input-signature figures and why signatures are missing
into one `EpochRecord`, and hands it to each of its sinks in one call once
all of it is known; it closes them when the run ends. TensorBoard
(`output.tensorboard.TensorBoardSink`), the run file
(`output.runfile.RunFileSink`), the console (`output.console.ConsoleSink`)
and a multi-worker cluster (`distributed.ClusterSink`) are sinks; a failing
sink costs a warning, never the training run or the other sinks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from keras_xla_guard.runtime.compile_log import EpochCompilations
from keras_xla_guard.signatures.tracker import EpochSignatures
from keras_xla_guard.trace.compiles import CompileRecord
from keras_xla_guard.trace.report import CoverageReport

__all__ = ["INCOMPLETE", "EpochRecord", "ReportSink"]

# The status of a report whose profiling window did not complete (training
# stopped inside it: an exception, a worker of the cluster gone). Its trace
# is partial: no output shows it as a measurement.
INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class EpochRecord:
    """Everything a guard learned about one epoch, complete, in one value.

    The engine builds it once per epoch, when the epoch has ended and its
    trace (if one was taken) is analyzed, and hands it to every sink.

    Attributes:
        epoch: 0-based epoch index.
        report: The epoch's `CoverageReport` when it was selected for
            profiling (`ok`, `skipped`, `failed` or `incomplete`), with the epoch's
            signature figures and its final compile table joined in;
            `None` for an epoch that was not profiled.
        signatures: The epoch's input-signature figures; `None` when no
            step was observed or signatures are unavailable.
        signatures_unavailable: Why the epoch has no signature figures
            although tracking was on (e.g. an unsupported Keras version);
            `None` otherwise.
        compilations: Every compilation of the epoch as the backend
            counted it, per function, with its trace/lower/compile seconds
            (JAX's `jax.monitoring`: exact, every epoch, no profiler);
            `None` where the backend reports none (TensorFlow).
    """

    epoch: int
    report: CoverageReport | None = None
    signatures: EpochSignatures | None = None
    signatures_unavailable: str | None = None
    compilations: EpochCompilations | None = None

    @property
    def compile_table(self) -> tuple[CompileRecord, ...]:
        """The profiled window's compile table; `()` when nothing was measured.

        Each XLA compilation of the window with its step and input
        signature, and each new signature that found its program compiled
        (`cache_hit=True`), as `report.compile_table` holds it.
        """
        if self.report is None or not self.report.ok:
            return ()
        return self.report.compile_table


@runtime_checkable
class ReportSink(Protocol):
    """Receives a run's figures: one complete `EpochRecord` per epoch, then the end.

    `write_epoch` is called once per epoch that has anything to show (a
    report, signature figures, or why they are missing), with everything
    about that epoch already joined: a sink never waits for a second part
    or merges anything. Calls may come from the engine's analysis thread,
    so a sink that keeps state guards it with a lock. An exception raised
    by a sink becomes an `XlaGuardWarning`; the run and the other sinks go
    on.

    To add an output, write a class with these two methods and pass it to
    `XlaGuardEngine(sinks=[...])` (for a built-in output, add it to
    `keras_xla_guard.output.sinks.default_sinks`, which the callback and
    the loop guard use).

    Example:

    ```python
    from keras_xla_guard import XlaGuardEngine


    class PrintSink:
        def write_epoch(self, record):
            if record.report is not None and record.report.ok:
                print(record.epoch, f"{record.report.xla_time_fraction:.1%}",
                      len(record.compile_table), "compile table rows")
            if record.signatures is not None:
                print(record.epoch, record.signatures.distinct_signatures, "signatures")

        def close(self, records):
            print("run ended after", len(records), "epoch records")


    engine = XlaGuardEngine(log_dir="logs/xla_guard", sinks=[PrintSink()])
    ```
    """

    def write_epoch(self, record: EpochRecord) -> None:
        """Publishes one epoch's complete record."""

    def close(self, records: Mapping[int, EpochRecord]) -> None:
        """Ends the run; `records` holds every record published, keyed by epoch."""
