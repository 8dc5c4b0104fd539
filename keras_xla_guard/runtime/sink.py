"""`ReportSink` and `EpochRecord`: where a guard's figures go once they exist.

The engine measures; sinks publish. For each epoch the engine joins the
trace report, the input-signature figures and why signatures are missing
into one `EpochRecord`, and hands it to each of its sinks in one call once
all of it is known; it closes them when the run ends. Each call of the
test or predict function is one `CallRecord`: a validation inside `fit`
comes in its epoch's record (`EpochRecord.calls`), an `evaluate` or
`predict` outside `fit` through the sink's `write_call`. TensorBoard
(`output.tensorboard.TensorBoardSink`), the run file
(`output.runfile.RunFileSink`), the console (`output.console.ConsoleSink`)
and a multi-worker cluster (`distributed.ClusterSink`) are sinks; a failing
sink costs a warning, never the training run or the other sinks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from keras_xla_guard.runtime.compile_log import Compilation, EpochCompilations
from keras_xla_guard.signatures.tracker import EpochSignatures
from keras_xla_guard.trace.compiles import CompileRecord
from keras_xla_guard.trace.report import CoverageReport

__all__ = ["INCOMPLETE", "CallRecord", "EpochRecord", "ReportSink"]

# The status of a report whose profiling window did not complete (training
# stopped inside it: an exception, a worker of the cluster gone). Its trace
# is partial: no output shows it as a measurement.
INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class CallRecord:
    """One call of a model's test or predict function, as the guard saw it.

    Keras compiles `fit`'s steps, `evaluate`'s (which `fit` also runs for
    validation) and `predict`'s as three functions, each with its own XLA
    programs: a batch shape the train function compiled is new to the
    test function. A validation inside `fit` is a call of the test
    function in that epoch; `model.evaluate(..., callbacks=[guard])` and
    `model.predict(..., callbacks=[guard])` are calls outside `fit`.

    Attributes:
        function: `"test"` or `"predict"`.
        call: 0-based number of this call among the guard's calls of
            `function` (validations and `evaluate` calls share the test
            function's numbering).
        epoch: The `fit` epoch a validation ran in; `None` for a call
            outside `fit`.
        signatures: The call's input-signature figures
            (`signatures.function` is `function`): its steps, distinct and
            new signatures and, with XLA on, `expected_compilations` (one
            per signature the function had not seen before, validations
            and earlier calls included) and `compilations_so_far` (the
            function's, since the guard first saw it). `None` when no step
            was observed or signatures are unavailable.
        signatures_unavailable: Why `signatures` is `None` although
            tracking was on; `None` otherwise.
        compilations: Every compilation during a call outside `fit`, as
            the backend counted it (JAX); `None` where the backend counts
            none, and for a validation (its compilations are its epoch's,
            `EpochRecord.compilations`).
    """

    function: str
    call: int
    epoch: int | None = None
    signatures: EpochSignatures | None = None
    signatures_unavailable: str | None = None
    compilations: tuple[Compilation, ...] | None = None

    @property
    def kind(self) -> str:
        """`"validation"` (the test function inside `fit`), `"evaluate"` or `"predict"`."""
        if self.function == "predict":
            return "predict"
        return "validation" if self.epoch is not None else "evaluate"

    def to_dict(self) -> dict[str, Any]:
        """Returns the call as a JSON-serializable dict (`kind` included)."""
        d = dataclasses.asdict(self)
        d["kind"] = self.kind
        d["signatures"] = None if self.signatures is None else self.signatures.to_dict()
        d["compilations"] = None if self.compilations is None else [c.to_dict() for c in self.compilations]
        return d


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
        calls: The test or predict calls that ran inside the epoch (the
            validation of `fit(validation_data=...)`), in order.
        compilations: Every compilation of the epoch as the backend
            counted it, per function, with its trace/lower/compile seconds
            (JAX's `jax.monitoring`: exact, every epoch, no profiler);
            `None` where the backend reports none (TensorFlow).
    """

    epoch: int
    report: CoverageReport | None = None
    signatures: EpochSignatures | None = None
    signatures_unavailable: str | None = None
    calls: tuple[CallRecord, ...] = ()
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

    A sink may also define `write_call(record)`, taking the `CallRecord` of
    an `evaluate` or `predict` call made outside `fit` (validations inside
    `fit` come in their epoch's `EpochRecord.calls`); the engine calls it
    only on sinks that have it. For such a call the engine opens fresh
    sinks (when no run is going on), hands each the call and closes them
    with no epoch records.

    To add an output, write a class with these methods and pass it to
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
