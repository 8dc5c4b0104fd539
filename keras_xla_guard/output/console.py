"""Console text of coverage reports."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TextIO

from keras_xla_guard.output.compilations import compilations_lines
from keras_xla_guard.runtime.sink import EpochRecord
from keras_xla_guard.trace._text import compile_lines, format_report

__all__ = ["ConsoleSink", "compile_lines", "format_report"]


class ConsoleSink:
    """The engine's `ReportSink` for the console: every report, once the run ends.

    Printing at the end keeps the user's progress bar intact; each report
    is one block of `format_report` text prefixed `keras-xla-guard: `.

    Args:
        stream: Where to print. Defaults to `sys.stdout` at print time.
        max_ops: Plain TF ops listed per report. Defaults to `3`.
    """

    def __init__(self, stream: TextIO | None = None, max_ops: int = 3) -> None:
        self.stream = stream
        self.max_ops = max_ops

    def write_epoch(self, record: EpochRecord) -> None:
        """Nothing until the run ends."""

    def close(self, records: Mapping[int, EpochRecord]) -> None:
        """Prints every report of the run, by epoch, and every epoch that compiled something."""
        stream = self.stream or sys.stdout
        for _, record in sorted(records.items()):
            if record.report is not None:
                print(f"keras-xla-guard: {format_report(record.report, max_ops=self.max_ops)}", file=stream,
                      flush=True)
            if record.compilations is not None and record.compilations.rows:
                print("keras-xla-guard: " + "\n".join(compilations_lines(record.compilations)), file=stream,
                      flush=True)
