"""`ReportSink`: where a guard's figures go once they exist.

The engine measures; sinks publish. It hands every finished report and
every epoch's signature figures to each of its sinks, and closes them when
the run ends. TensorBoard (`output.tensorboard.TensorBoardSink`), the
console (`output.console.ConsoleSink`) and a multi-worker cluster
(`distributed.ClusterSink`) are sinks; a failing sink costs a warning,
never the training run or the other sinks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from keras_xla_guard.signatures.tracker import EpochSignatures
from keras_xla_guard.trace.report import CoverageReport

__all__ = ["ReportSink"]


@runtime_checkable
class ReportSink(Protocol):
    """Receives a run's figures as the engine produces them.

    Methods may be called from the engine's analysis thread; each call
    carries one epoch's figures, and a report may come before or after the
    same epoch's signature figures.

    Example:

    ```python
    class PrintSink:
        def write_report(self, report):
            print(report.epoch, report.xla_time_fraction)

        def write_signatures(self, stats):
            print(stats.epoch, stats.distinct_signatures)

        def write_signatures_unavailable(self, epoch, reason):
            print(epoch, reason)

        def close(self, reports):
            pass
    ```
    """

    def write_report(self, report: CoverageReport) -> None:
        """Publishes one epoch's report (ok, skipped or failed)."""

    def write_signatures(self, stats: EpochSignatures) -> None:
        """Publishes one epoch's input-signature figures."""

    def write_signatures_unavailable(self, epoch: int, reason: str) -> None:
        """Says that `epoch` has no signature figures, and why."""

    def close(self, reports: Mapping[int, CoverageReport]) -> None:
        """Ends the run; `reports` holds every report of it, keyed by epoch."""
