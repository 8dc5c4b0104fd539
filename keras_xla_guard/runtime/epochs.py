"""One epoch's figures joined once: the report, the signatures, why they are missing.

An epoch's parts arrive from two threads in either order: the trace report
from the analysis thread (or at once, for a skipped window), the signature
figures from the training thread when the epoch ends. `EpochAssembly`
keeps them until both are in and then builds the epoch's `EpochRecord` in
one place, so sinks never merge anything. Pure: no TensorFlow, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from keras_xla_guard.runtime.compile_log import (
    PREDICTED,
    Compilation,
    EpochCompilations,
    predicted_compilations,
)
from keras_xla_guard.runtime.sink import CallRecord, EpochRecord
from keras_xla_guard.signatures.tracker import EpochSignatures
from keras_xla_guard.trace.compiles import attribute_compiles
from keras_xla_guard.trace.report import CoverageReport

__all__ = ["EpochAssembly", "join_signatures", "signed"]


@dataclass
class _Parts:
    report: CoverageReport | None = None
    # A window of the epoch closed and its analysis has not reported yet.
    analyzing: bool = False
    # The epoch ended: its signature figures (or their absence) are known.
    ended: bool = False
    signatures: EpochSignatures | None = None
    unavailable: str | None = None
    # `(first step, steps)` of the epoch's profiling window.
    window: tuple[int, int] | None = None
    compilations: EpochCompilations | None = None
    # Test or predict calls made inside the epoch (validation).
    calls: list[CallRecord] = dataclasses.field(default_factory=list)
    # What `warm_up` compiled before this, the run's first epoch (predicted rows).
    warm_up: tuple[Compilation, ...] = ()


class EpochAssembly:
    """Collects each epoch's parts and returns its `EpochRecord` once they are all in.

    An epoch is complete once it has ended and no analysis of its window is
    outstanding. Each method returns the record that the call completed,
    or `None`; a record with nothing in it (no report, no steps observed)
    is never returned. Not thread-safe: the engine calls it under its lock.

    Args:
        finish: Called with each complete report, its signatures joined;
            what it returns is the record's report. Defaults to `None`.
    """

    def __init__(self, finish: Callable[[CoverageReport], CoverageReport] | None = None) -> None:
        self._finish = finish
        # Keras' steps_per_execution of the run: a compilation is logged at its call's first step.
        self.steps_per_call = 1
        self._parts: dict[int, _Parts] = {}
        self._held: dict[int, EpochRecord] = {}

    def release(self, record: EpochRecord | None) -> list[EpochRecord]:
        """The records to publish now, in epoch order, given one just completed (or `None`).

        A record waits while an earlier epoch is still open (its profiling
        window still analyzed): outputs then see epochs in order, and
        TensorBoard, which reads a step lower than the last one as a
        restart, never drops an epoch.
        """
        if record is not None:
            self._held[record.epoch] = record
        ready = []
        for epoch in sorted(self._held):
            if any(other < epoch for other in self._parts):
                break
            ready.append(self._held.pop(epoch))
        return ready

    def begin(self, epoch: int) -> None:
        """Starts `epoch` afresh (the same index run again replaces its record)."""
        self._parts[epoch] = _Parts()

    def analyzing(self, epoch: int, window: tuple[int, int]) -> None:
        """Notes that `epoch`'s window of `window` steps closed and its report will come."""
        parts = self._parts.setdefault(epoch, _Parts())
        parts.analyzing, parts.window = True, window

    def add_report(self, report: CoverageReport) -> EpochRecord | None:
        """Takes the epoch's report (ok, skipped or failed)."""
        assert report.epoch is not None
        parts = self._parts.setdefault(report.epoch, _Parts())
        parts.report, parts.analyzing = report, False
        return self._complete(report.epoch)

    def end(
        self,
        epoch: int,
        signatures: EpochSignatures | None,
        unavailable: str | None = None,
        compilations: EpochCompilations | None = None,
    ) -> EpochRecord | None:
        """Takes the end of `epoch`: its signature figures (or why there are none), its compilations."""
        parts = self._parts.setdefault(epoch, _Parts())
        parts.ended, parts.signatures, parts.unavailable = True, signatures, unavailable
        parts.compilations = compilations
        return self._complete(epoch)

    def warmed(self, epoch: int, rows: tuple[Compilation, ...]) -> None:
        """Takes what `warm_up` compiled before `epoch`, the run's first (TensorFlow's predicted rows)."""
        self._parts.setdefault(epoch, _Parts()).warm_up = rows

    def add_call(self, epoch: int, call: CallRecord) -> None:
        """Takes a test or predict call made inside `epoch` (its validation)."""
        self._parts.setdefault(epoch, _Parts()).calls.append(call)

    def abandon(self, epoch: int, report: CoverageReport) -> EpochRecord | None:
        """Ends `epoch` with `report` now: the epoch will not end normally."""
        parts = self._parts.setdefault(epoch, _Parts())
        parts.report, parts.analyzing, parts.ended = report, False, True
        return self._complete(epoch)

    def flush(self) -> list[EpochRecord]:
        """The records not yet released as the run ends, epochs still open with what they have, in order."""
        for epoch in sorted(self._parts):
            parts = self._parts[epoch]
            parts.ended, parts.analyzing = True, False
            record = self._complete(epoch)
            if record is not None:
                self._held[record.epoch] = record
        records = [self._held[epoch] for epoch in sorted(self._held)]
        self._held.clear()
        return records

    def _complete(self, epoch: int) -> EpochRecord | None:
        parts = self._parts[epoch]
        if not parts.ended or parts.analyzing:
            return None
        del self._parts[epoch]
        report = parts.report
        if report is not None:
            if parts.signatures is not None:
                report = join_signatures(report, parts.signatures, parts.window)
            elif parts.unavailable is not None:
                report = dataclasses.replace(report, signatures_unavailable=parts.unavailable)
            if self._finish is not None:
                report = self._finish(report)
        figures = [parts.signatures] if parts.signatures is not None else []
        figures += [c.signatures for c in parts.calls if c.signatures is not None]
        compilations = parts.compilations
        if compilations is not None:
            compilations = signed(compilations, figures, self.steps_per_call)
        else:
            # The backend counted none (TensorFlow): one per new signature.
            window = report.compile_table if report is not None and report.ok else ()
            compilations = predicted_compilations(epoch, figures, window)
            if parts.warm_up:
                rows = parts.warm_up + (compilations.rows if compilations is not None else ())
                compilations = EpochCompilations(epoch, rows, PREDICTED)
        if (
            report is None
            and parts.signatures is None
            and parts.unavailable is None
            and not parts.calls
            and compilations is None
        ):
            return None
        return EpochRecord(
            epoch,
            report,
            parts.signatures,
            parts.unavailable,
            calls=tuple(parts.calls),
            compilations=compilations,
        )


def join_signatures(
    report: CoverageReport, stats: EpochSignatures, window: tuple[int, int] | None = None
) -> CoverageReport:
    """A report with its epoch's signature figures and the compile table they explain.

    Args:
        report: The epoch's report.
        stats: The epoch's signature figures.
        window: `(first step, steps)` of the profiling window; new
            signatures outside it cause no compilation in its table.
            Defaults to `None`: every new signature counts.

    Returns:
        The report with `distinct_signatures`, `new_signatures`,
        `expected_compilations` and `signature_explanations` set, and (for
        a measured window with XLA on) each compilation's input signature
        and the cache hits in `compile_table` and `cache_hits`.
    """
    table, hits = report.compile_table, None
    if report.ok and stats.expected_compilations is not None:
        new = [(str(s), step) for s, step in stats.new]
        table, hits = attribute_compiles(report.compile_table, new, window)
    return dataclasses.replace(
        report,
        compile_table=table,
        cache_hits=hits,
        distinct_signatures=stats.distinct_signatures,
        new_signatures=stats.new_signatures,
        expected_compilations=stats.expected_compilations,
        signature_explanations=stats.explanations,
    )


def signed(
    compilations: EpochCompilations, figures: list[EpochSignatures], steps_per_call: int = 1
) -> EpochCompilations:
    """Counted compilations, each with the new input signature its function first saw at its step.

    A compilation is logged at the first step of its call; with
    `steps_per_call` > 1 (Keras' `steps_per_execution`) the call's
    compilations take the call's new signatures in order, each then at
    that signature's own step. A compilation beyond them keeps none: no
    new batch shape caused it (Keras 3.10 on JAX 0.6 compiles the step
    again when the model state arrives placed differently), as the
    budgets list it.

    Args:
        compilations: The epoch's (or call's) compilations as the backend
            counted them.
        figures: The signature figures of the epoch's train steps and of
            its validation's test steps (or of the call).
        steps_per_call: Steps one call of a function runs. Defaults to `1`.

    Returns:
        The compilations, each train or test row at a call that brought new
        signatures of its function carrying one of them.
    """
    new = {(f.function, step): str(s) for f in figures for s, step in f.new if step is not None}
    used: set[tuple[str, int]] = set()
    rows = []
    for row in compilations.rows:
        keys = (
            [(row.function, s) for s in range(row.step, row.step + steps_per_call)]
            if row.signature is None and row.step is not None
            else []
        )
        key = next((k for k in keys if k in new and k not in used), None)
        if key is not None:
            used.add(key)
            row = dataclasses.replace(row, step=key[1], signature=new[key])
        rows.append(row)
    return dataclasses.replace(compilations, rows=tuple(rows))
