"""Console text of coverage reports and of the test and predict calls."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import TextIO

from keras_xla_guard.output.compilations import compilations_headline, compilations_lines
from keras_xla_guard.runtime.compile_log import EpochCompilations
from keras_xla_guard.runtime.sink import CallRecord, EpochRecord
from keras_xla_guard.trace._text import compile_lines, format_report

__all__ = ["ConsoleSink", "call_lines", "compile_lines", "format_report", "function_summary"]


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


def function_summary(train: Iterable[int | None], calls: Iterable[CallRecord]) -> str | None:
    """One line: the XLA compilations the signatures predict per function.

    Args:
        train: Each train epoch's `expected_compilations`.
        calls: The test and predict calls.

    Returns:
        E.g. `"expected XLA compilations by function (one per new input
        signature): train 2, test 3 (2 validations, 1 evaluate call),
        predict 2 (1 predict call)"`; `None` when XLA compiles nothing or
        no function has figures.
    """
    parts = []
    expected = [e for e in train if e is not None]
    if expected:
        parts.append(f"train {sum(expected)}")
    for function in ("test", "predict"):
        counted = [
            c
            for c in calls
            if c.function == function
            and c.signatures is not None
            and c.signatures.expected_compilations is not None
        ]
        if not counted:
            continue
        total = sum(c.signatures.expected_compilations or 0 for c in counted if c.signatures is not None)
        kinds: dict[str, int] = {}
        for c in counted:
            kinds[c.kind] = kinds.get(c.kind, 0) + 1
        detail = ", ".join(
            f"{n} {'validation' if k == 'validation' else k + ' call'}{'s' if n > 1 else ''}"
            for k, n in kinds.items()
        )
        parts.append(f"{function} {total} ({detail})")
    if not parts:
        return None
    return "expected XLA compilations by function (one per new input signature): " + ", ".join(parts)


class ConsoleSink:
    """The engine's `ReportSink` for the console: every report, once the run ends.

    Printing at the end keeps the user's progress bar intact; each report
    is one block of `format_report` text prefixed `keras-xla-guard: `,
    followed by the epoch's validation, and, when the run had validations,
    one line with the expected compilations of each function. An
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
        """Prints every report of the run and its validations, by epoch, and every epoch that compiled something."""
        for _, record in sorted(records.items()):
            if record.report is not None:
                self._print([format_report(record.report, max_ops=self.max_ops)])
            for call in record.calls:
                self._print(call_lines(call))
            if record.compilations is not None and record.compilations.rows:
                self._print(compilations_lines(record.compilations))
        calls = [c for r in records.values() for c in r.calls]
        if calls:
            summary = function_summary(
                (r.signatures.expected_compilations for r in records.values() if r.signatures is not None),
                calls,
            )
            if summary is not None:
                self._print([summary])

    def _print(self, lines: list[str]) -> None:
        stream = self.stream or sys.stdout
        print("keras-xla-guard: " + "\n".join(lines), file=stream, flush=True)
