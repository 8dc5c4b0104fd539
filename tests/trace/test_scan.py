"""Tests for keras_xla_guard.trace._scan: the event-at-a-time scan's booking of
lines whose events overlap without nesting (both read paths hand such lines to
it), each figure worked out by hand from the rule in `scan_events`' docstring:
an event's time beyond its parent's end still counts, to its own owner or, for
an event without a category or inside an absorbing one, to its parent's."""

from __future__ import annotations

from typing import Any

import pytest
from _xspace import build_space

from keras_xla_guard import analyze_trace, analyze_xspace

_FIGURES = (
    "xla_time_s",
    "non_xla_op_time_s",
    "input_pipeline_time_s",
    "eager_overhead_s",
    "compile_thread_time_s",
    "xla_executions",
)

_ASYNC_MATMUL = {"kernel_type": "MatMul", "name": "async/MatMul"}

# (lines, expected figures in microseconds and counts; figures not named are 0)
_CASES = {
    # A child without a category hands its time up, the part past its parent's end too.
    "uncategorized_child_outlasts_a_kernel": (
        {"t": [("dense/MatMul:MatMul", 0, 10), ("ExecutorState::Process", 5, 10)]},
        {"non_xla_op_time_s": 15},
    ),
    # Inside an absorbing event every descendant is its category, past its end too.
    "child_outlasts_an_absorbing_event": (
        {"t": [("Iterator::Root::Prefetch", 0, 10), ("ExecutorState::Process", 5, 10)]},
        {"input_pipeline_time_s": 15},
    ),
    # A kernel takes from its parent only the part of the parent it overlaps.
    "kernel_outlasts_eager_dispatch": (
        {"t": [("EagerExecute", 0, 10), ("dense/MatMul:MatMul", 5, 10)]},
        {"eager_overhead_s": 5, "non_xla_op_time_s": 10},
    ),
    "input_outlasts_eager_dispatch": (
        {"t": [("EagerExecute", 0, 10), ("Iterator::Root::Prefetch", 5, 10)]},
        {"eager_overhead_s": 5, "input_pipeline_time_s": 10},
    ),
    "async_kernel_outlasts_eager_dispatch": (
        {"t": [("EagerExecute", 0, 10), ("ExecutorState::ProcessAsync::Start", 5, 10, _ASYNC_MATMUL)]},
        {"eager_overhead_s": 5, "non_xla_op_time_s": 10},
    ),
    "compile_pass_outlasts_eager_dispatch": (
        {"t": [("EagerExecute", 0, 10), ("CpuCompiler::RunHloPasses", 5, 10)]},
        {"eager_overhead_s": 5, "compile_thread_time_s": 10},
    ),
    # The line's last event, a plain op inside a compiling kernel (TF's constant
    # folding before a compile): compile time, with the kernel's own 70 us and the
    # 20 us pass; the overlapping pair first sends the line to the event scan.
    "last_event_a_plain_op_inside_a_compiling_kernel": (
        {
            "t": [
                ("EagerExecute", 0, 10),
                ("Iterator::Root::Prefetch", 5, 10),
                ("a/Sum:Sum", 20, 100),
                ("CpuCompiler::RunHloPasses", 30, 20),
                ("dense/MatMul:MatMul", 60, 10),
            ]
        },
        {"eager_overhead_s": 5, "input_pipeline_time_s": 10, "compile_thread_time_s": 100},
    ),
    # The line's last event, a launch kernel at 80 us, inside the eager call [0, 100):
    # the call launched, so the pool thread's loose span is no launch of its own.
    "last_event_a_launch_inside_the_call": (
        {
            "python": [("EagerLocalExecute: __inference_step_12", 0, 100)],
            "tf_Compute/1": [
                ("Iterator::Root::Prefetch", 0, 10),
                ("ExecutorState::Process", 5, 10),
                ("cluster_0/_XlaRun:_XlaRun", 80, 15),
            ],
            "tf_numa_-1_Eigen/3": [("ThunkExecutor::Execute", 85, 5)],
        },
        {"eager_overhead_s": 100, "input_pipeline_time_s": 15, "xla_time_s": 15, "xla_executions": 1},
    ),
}


def _figures(report: Any) -> dict[str, Any]:
    return {name: getattr(report, name) for name in _FIGURES}


def _expected(given: dict[str, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _FIGURES:
        value = given.get(name, 0)
        out[name] = value if name == "xla_executions" else pytest.approx(value * 1e-6, rel=1e-12, abs=1e-18)
    return out


@pytest.mark.parametrize("case", sorted(_CASES))
def test_overlapping_events_are_booked_by_the_nesting_rule_on_both_read_paths(case, tmp_path):
    """Events outlasting their parent: each figure exactly as the rule books it, parsed and streamed."""
    lines, given = _CASES[case]
    space = build_space(lines)
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    expected = _expected(given)
    assert _figures(analyze_xspace(space)) == expected
    assert _figures(analyze_trace(path)) == expected
