"""The `report` table (output/table.py): its "top op outside XLA" cell keeps to the noise floor."""

from __future__ import annotations

import pytest

from keras_xla_guard import CoverageReport, OpStat
from keras_xla_guard.output.table import coverage_table


def _top_cell(xla_s: float, plain_s: float, ops: tuple[OpStat, ...]) -> str:
    report = CoverageReport(hosts=("h",), xla_time_s=xla_s, non_xla_op_time_s=plain_s, top_non_xla_ops=ops)
    header, row = coverage_table([("run", [report], report)]).splitlines()
    assert header.endswith("top op outside XLA")
    return row[header.index("top op outside XLA") :].strip()


@pytest.mark.parametrize(
    ("self_s", "cell"),
    [
        (0.00999, "-"),  # below 1% of the window's 1.0 s of op time: no lead
        (0.01, "AssignVariableOp (10.0 ms)"),  # at the floor: a finding
    ],
)
def test_the_top_op_is_shown_only_at_or_above_one_percent_of_op_time(self_s, cell):
    """XLA 0.99 s and plain 0.01 s: the op is named from 1% of op time (10 ms) on, as in every other output."""
    op = OpStat("AssignVariableOp", "a/AssignVariableOp", self_s, 4)
    assert _top_cell(0.99, 0.01, (op,)) == cell


def test_without_plain_ops_or_xla_the_top_op_cell_is_a_dash_or_the_op():
    """No op recorded: a dash. Only plain op time (no XLA): the biggest op, however small, is the finding."""
    assert _top_cell(1.0, 0.0, ()) == "-"
    tiny = OpStat("Relu", "d/Relu", 1e-6, 1)
    assert _top_cell(0.0, 1e-6, (tiny,)) == "Relu (0.0 ms)"
