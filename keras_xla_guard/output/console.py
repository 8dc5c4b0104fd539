"""Console text of coverage reports and of the test and predict calls."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TextIO

from keras_xla_guard.output.compilations import compilations_headline, compilations_lines
from keras_xla_guard.output.run_summary import run_headline
from keras_xla_guard.output.runfile import RunData
from keras_xla_guard.runtime.compile_log import EpochCompilations
from keras_xla_guard.runtime.sink import CallRecord, EpochRecord
from keras_xla_guard.trace._text import compile_lines, format_report

__all__ = ["ConsoleSink", "call_lines", "compile_lines", "format_report", "run_lines"]


def _call_place(call: CallRecord) -> str:
    if call.kind == "validation":
        return f"validation in epoch {call.epoch}"
    return f"{call.kind} (call {call.call} of the {call.function} function)"


def call_lines(call: CallRecord, max_explanations: int = 2) -> list[str]:
    """A test or predict call as text: its signature figures, then its first explanations.

    Args:
        call: The call.
        max_explanations: Explanations listed. Defaults to `2`.

    Returns:
        The headline and indented explanation lines.
    """
    place = _call_place(call)
    stats = call.signatures
    counted = []
    if call.compilations is not None:
        counted = [
            f"  compilations (counted as they happened): "
            f"{compilations_headline(EpochCompilations(0, call.compilations))}"
        ]
    if stats is None:
        why = call.signatures_unavailable or "no step observed"
        return [f"{place}: input signatures unavailable ({why})", *counted]
    expected = (
        f", {stats.expected_compilations} expected XLA compilation(s), {stats.compilations_so_far} for the "
        f"{call.function} function so far"
        if stats.expected_compilations is not None
        else ""
    )
    lines = [
        f"{place}: {stats.steps} steps, {stats.distinct_signatures} input signature(s), "
        f"{stats.new_signatures} new{expected}"
    ]
    lines += [f"  {finding}" for finding in stats.explanations[:max_explanations]]
    return lines + counted


def run_lines(records: Mapping[int, EpochRecord]) -> list[str]:
    """The run's headline (`run_summary.run_headline`) as the console's first lines.

    Args:
        records: The run's epoch records, keyed by epoch.

    Returns:
        `["run summary (recompiles): The train function compiled 4 times ..."]`.
    """
    ordered = [records[e] for e in sorted(records)]
    run = RunData.of(
        "",
        [r.report for r in ordered if r.report is not None],
        [r.signatures for r in ordered if r.signatures is not None],
        [c for r in ordered for c in r.calls],
        [r.compilations for r in ordered if r.compilations is not None],
    )
    headline = run_headline([run])
    return [f"run summary ({headline.level}): {headline.sentence}"]


class ConsoleSink:
    """The engine's `ReportSink` for the console: every report, once the run ends.

    Printing at the end keeps the user's progress bar intact. The run's
    headline comes first (its worst finding over every epoch:
    `run_summary.run_headline`), then each report as one block of
    `format_report` text prefixed `keras-xla-guard: `, followed by the
    epoch's validation and its compilations. An
    `evaluate` or `predict` call outside `fit` is printed when it ends.

    Args:
        stream: Where to print. Defaults to `sys.stdout` at print time.
        max_ops: Plain TF ops listed per report. Defaults to `3`.
    """

    def __init__(self, stream: TextIO | None = None, max_ops: int = 3) -> None:
        self.stream = stream
        self.max_ops = max_ops
        # What a warning about a failed write names (`runtime/failures.py`).
        self.what = "the console report"

    def write_epoch(self, record: EpochRecord) -> None:
        """Nothing until the run ends."""

    def write_call(self, record: CallRecord) -> None:
        """Prints an `evaluate` or `predict` call outside `fit` as it ends."""
        self._print(call_lines(record))

    def close(self, records: Mapping[int, EpochRecord]) -> None:
        """Prints the run's headline, then every report of the run, its validations and compilations, by epoch."""
        if not records:
            return
        self._print(run_lines(records))
        for _, record in sorted(records.items()):
            if record.report is not None:
                self._print([format_report(record.report, max_ops=self.max_ops)])
            for call in record.calls:
                self._print(call_lines(call))
            if record.compilations is not None and record.compilations.rows:
                self._print(compilations_lines(record.compilations))

    def _print(self, lines: list[str]) -> None:
        stream = self.stream or sys.stdout
        print("keras-xla-guard: " + "\n".join(lines), file=stream, flush=True)
