"""The noise floor: plain ops below 1% of a window's op time are not findings, in any text output."""

from __future__ import annotations

from keras_xla_guard import CoverageReport, OpStat, format_report
from keras_xla_guard.trace.findings import NOISE_FLOOR, split_findings


def _assign_ops(n: int, seconds: float) -> tuple[OpStat, ...]:
    return tuple(OpStat("AssignVariableOp", f"adam/AssignVariableOp_{i}", seconds, 2) for i in range(n))


def test_ops_below_one_percent_of_op_time_are_other():
    """1% of 10 ms XLA + 0.302 ms plain is 0.103 ms: the 0.104 ms op is a finding, the 0.1 ms one is not."""
    ops = (OpStat("RealDiv", "adam/truediv", 0.000104, 4), OpStat("MatMul", "dense/MatMul", 0.000100, 4))
    split = split_findings(ops, lambda op: op.self_time_s, 0.010, 0.000302)
    assert NOISE_FLOOR == 0.01
    assert split.floor_s == 0.01 * 0.010302
    assert split.findings == ops[:1]
    assert split.other_s == 0.000302 - 0.000104


def test_without_op_time_every_op_is_a_finding():
    """A window with no op time at all has a zero floor: nothing is hidden."""
    ops = _assign_ops(2, 0.0)
    assert split_findings(ops, lambda op: op.self_time_s, 0.0, 0.0).findings == ops


def test_a_full_coverage_window_lists_no_op_row():
    """100% coverage with ten 2.4 us ops: no '0.0 ms AssignVariableOp' row, one line with their total."""
    report = CoverageReport(
        xla_time_s=0.050,
        non_xla_op_time_s=0.000024,
        xla_time_fraction=0.050 / 0.050024,
        xla_executions=20,
        top_non_xla_ops=_assign_ops(10, 0.0000024),
    )
    text = format_report(report)
    assert "AssignVariableOp" not in text
    assert text.splitlines()[-1] == (
        "  top ops outside XLA: none is a finding (0.024 ms of plain ops, each below 1% of op time)"
    )


def test_findings_are_listed_and_the_rest_is_one_other_line():
    """Two ops above the floor are rows; the 0.3 ms below it (one op, and the table's tail) is one line."""
    ops = (
        OpStat("RealDiv", "adam/truediv", 0.0179, 20),
        OpStat("MatMul", "dense/MatMul", 0.0144, 20),
        OpStat("AddV2", "dense/add", 0.0002, 20),
    )
    report = CoverageReport(xla_time_s=0.0, non_xla_op_time_s=0.0326, top_non_xla_ops=ops)
    lines = format_report(report).splitlines()
    start = lines.index("  top ops outside XLA (self time):")
    assert lines[start + 1 :] == [
        "       17.9 ms  x20    RealDiv              adam/truediv",
        "       14.4 ms  x20    MatMul               dense/MatMul",
        "        0.3 ms         other plain ops (each below 1% of op time)",
    ]
    # Findings beyond max_ops are not called noise.
    assert (
        format_report(report, max_ops=1).splitlines()[start + 2] == "       14.7 ms         other plain ops"
    )
