"""Tests for keras_xla_guard.trace._scan: the event-at-a-time scan's booking of
lines whose events overlap without nesting (both read paths hand such lines to
it), each figure worked out by hand from the rule in `scan_events`' docstring:
an event's time beyond its parent's end still counts, to its own owner or, for
an event without a category or inside an absorbing one, to its parent's; and
which such lines are scanned from the batch that holds them (with their step
facts) and which are read again."""

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


# A Python thread whose XLA span outlasts its step marker: the line does not
# nest. Times in us; the line starts at 1 us (`build_space`).
_NOT_NESTED_STEPS = {
    "python": [
        ("train", 0, 100, {"_r": 1, "step_num": 7}),
        ("EagerExecute", 10, 20),
        ("CpuExecutable::ExecuteAsyncOnStream", 50, 100),
        ("train", 100, 100, {"_r": 1, "step_num": 8}),
        ("ExecutorState::ProcessAsync::Start", 210, 10, _ASYNC_MATMUL),
        ("fusion.3", 230, 5, {"hlo_module": "m"}),
        ("train", 240, 0, {"_r": 1, "step_num": 9}),
    ],
    "tf_Compute/1": [("dense/MatMul:MatMul", 0, 10), ("dense/Relu:Relu", 2, 3)],
    # On a tf.data thread every event is input pipeline time, past its parent's end too.
    "tf_data_iterator/2": [("dense/MatMul:MatMul", 0, 10), ("ExecutorState::Process", 5, 10)],
}


def _not_nested_space() -> Any:
    """`_NOT_NESTED_STEPS`, the async kernel's type given as a reference to stat metadata, as TF writes it."""
    space = build_space(_NOT_NESTED_STEPS)
    plane = space.planes[0]
    ref = max(plane.stat_metadata) + 1
    plane.stat_metadata[ref].id = ref
    plane.stat_metadata[ref].name = "MatMul"
    type_id = next(mid for mid, m in plane.stat_metadata.items() if m.name == "kernel_type")
    for event in plane.lines[0].events:
        for stat in event.stats:
            if stat.metadata_id == type_id:
                stat.ref_value = ref
    return space


def _not_read_again(monkeypatch: Any) -> None:
    """Makes reading a line a second time, for its figures or its steps, fail the test."""
    import keras_xla_guard.trace._scan as scan
    import keras_xla_guard.trace.steps as steps

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a line was read again")

    monkeypatch.setattr(scan, "scan_lazy_line", refuse)
    monkeypatch.setattr(steps, "iter_lines", refuse)


def test_a_line_that_does_not_nest_held_whole_by_a_batch_is_scanned_from_it(tmp_path, monkeypatch):
    """A whole line that does not nest is scanned one event at a time from the batch's rows, never read
    again (nor for its steps): the parsed trace's figures and steps, its async kernel's stats read (its
    type by reference), a tf.data thread's time all input pipeline time."""
    space = _not_nested_space()
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    parsed = analyze_xspace(space, trace_path=str(path), host="h").to_dict()
    _not_read_again(monkeypatch)
    report = analyze_trace(path)
    assert report.to_dict() == parsed
    # The marker of step 9 has no duration: two steps. The span [50, 150) is half in each.
    assert [(s.step, s.launches) for s in report.steps] == [(7, 1), (8, 0)]
    assert [s.busy_s for s in report.steps] == pytest.approx([50e-6, 50e-6], rel=1e-12, abs=0)
    # 10 us of the async MatMul (from its stats), 10 of the tf_Compute MatMul with the Relu inside it.
    assert report.non_xla_op_time_s == pytest.approx(20e-6, rel=1e-12, abs=0)
    assert report.eager_overhead_s == pytest.approx(20e-6, rel=1e-12, abs=0)
    assert report.input_pipeline_time_s == pytest.approx(15e-6, rel=1e-12, abs=0)


def test_a_line_scanned_from_its_batch_keeps_the_step_facts_of_the_parsed_line(tmp_path):
    """Its summary holds the step facts `line_step_facts` finds on the parsed line and no other facts;
    a line that nests keeps all its facts from the scan in columns."""
    import numpy as np

    from keras_xla_guard.trace._events import PlaneCache
    from keras_xla_guard.trace._scan import Totals, scan_lazy_plane
    from keras_xla_guard.trace.steps import line_step_facts
    from keras_xla_guard.trace.xplane import open_xspace

    space = _not_nested_space()
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    plane = next(p for p in open_xspace(path).planes if p.name == "/host:CPU")
    python, compute, _ = scan_lazy_plane(np, plane, PlaneCache(plane), Totals(), str(path))
    assert python.facts is None
    assert python.steps == line_step_facts(space.planes[0], space.planes[0].lines[0])
    # By hand: the line starts at 1 us; markers (start, end, step) and the one XLA span, in ps.
    assert python.steps.markers == [(1_000_000, 101_000_000, 7), (101_000_000, 201_000_000, 8)]
    assert python.steps.spans == [(51_000_000, 151_000_000)]
    assert compute.facts is not None and compute.steps is None


def _spy_line_reads(monkeypatch: Any) -> list[Any]:
    """Records the span (in the file) of each line `scan_lazy_line` reads again."""
    import keras_xla_guard.trace._scan as scan

    reads: list[Any] = []
    real = scan.scan_lazy_line

    def spy(np: Any, plane: Any, span: Any, *args: Any) -> Any:
        reads.append(span)
        return real(np, plane, span, *args)

    monkeypatch.setattr(scan, "scan_lazy_line", spy)
    return reads


@pytest.mark.parametrize(
    ("batch", "events"),
    [
        # Out of order (and so not nesting): read again to be scanned sorted.
        (8192, [("dense/MatMul:MatMul", 20, 10), ("dense/Relu:Relu", 0, 30), ("EagerExecute", 5, 50)]),
        # Not nesting, spread over batches of two events: its first batch booked part of it.
        (2, [("dense/MatMul:MatMul", 0, 10), ("dense/Relu:Relu", 20, 10), ("EagerExecute", 25, 50)]),
    ],
    ids=["out_of_order", "spanning_batches"],
)
def test_a_line_out_of_order_or_over_several_batches_is_read_again(batch, events, tmp_path, monkeypatch):
    """Such a line is not scanned from the batch: it is read again, once, and reports what the parsed
    trace does."""
    import keras_xla_guard.trace._scan as scan

    monkeypatch.setattr(scan, "BATCH_EVENTS", batch)
    space = build_space({"tf_Compute/1": events})
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    reads = _spy_line_reads(monkeypatch)
    assert analyze_trace(path).to_dict() == analyze_xspace(space, trace_path=str(path), host="h").to_dict()
    assert len(reads) == 1
