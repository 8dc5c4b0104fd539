"""The noise floor: which plain TF ops of a window are findings.

A window that ran almost all of its op time inside XLA still lists the few
plain ops around the programs (variable reads, an `AssignVariableOp`), each
a few microseconds. Shown as a table or a bar chart they read as findings
while they are noise. An op below `NOISE_FLOOR` of the window's op time
(XLA plus plain ops, `CoverageReport.xla_time_s + non_xla_op_time_s`) is
not a finding: every output (console, TensorBoard text, HTML) shows the
ops at or above it and groups the rest of the plain-op time as one
"other" line (docs/coverage.md). The report's data keeps every op.
Pure: no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["NOISE_FLOOR", "OpFindings", "split_findings"]

# 1% of the window's op time: an op that could at best make the step 1%
# faster is not worth a row.
NOISE_FLOOR = 0.01

_Op = TypeVar("_Op")


@dataclass(frozen=True)
class OpFindings(Generic[_Op]):
    """A window's plain ops split at the noise floor.

    Attributes:
        findings: The listed ops at or above the floor, in the order given.
        other_s: The rest of the window's plain-op time: the ops below the
            floor and those the op table did not keep (`top_k`), seconds.
        floor_s: The floor itself, seconds of self time.
    """

    findings: tuple[_Op, ...]
    other_s: float
    floor_s: float


def split_findings(
    ops: Sequence[_Op],
    self_time_s: Callable[[_Op], float],
    xla_time_s: float,
    plain_time_s: float,
    floor: float = NOISE_FLOOR,
) -> OpFindings[_Op]:
    """Splits a window's plain ops into findings and the "other" time below the noise floor.

    Args:
        ops: The window's op table (`OpStat`s, or their dicts), biggest first.
        self_time_s: Reads an op's self time in seconds.
        xla_time_s: The window's time inside XLA.
        plain_time_s: The window's plain-op time (`non_xla_op_time_s`).
        floor: The share of the window's op time (XLA and plain ops) an op
            needs to be a finding. Defaults to `NOISE_FLOOR`.

    Returns:
        The split; with no op time at all every op is a finding.

    Example:

    ```python
    from keras_xla_guard.trace.findings import split_findings

    split = split_findings(report.top_non_xla_ops, lambda op: op.self_time_s,
                           report.xla_time_s, report.non_xla_op_time_s)
    print(len(split.findings), split.other_s)
    ```
    """
    floor_s = floor * (xla_time_s + plain_time_s)
    findings = tuple(op for op in ops if self_time_s(op) >= floor_s)
    other_s = max(0.0, plain_time_s - sum(self_time_s(op) for op in findings))
    return OpFindings(findings, other_s, floor_s)
