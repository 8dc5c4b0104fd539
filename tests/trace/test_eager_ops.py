"""Ops run eagerly beside a window's functions: their time (`eager_op_time_s`) and the note on them.

Synthetic host traces shaped like TensorFlow 2.21's (an op run eagerly is an
`EagerLocalExecute: <OpType>` span holding its dispatch and kernel run, with
no op event): times are exact by construction. The real mixed loop is pinned
against its raw trace in `tests/test_loop.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _xspace import build_space

from keras_xla_guard import analyze_trace, analyze_xspace
from keras_xla_guard.trace.xplane import load_xspace

_PS = 1e-12


def _step(start: float, step: int, eager: list[tuple[str, float]], xla_us: float = 19.0) -> list[tuple]:
    """One step of a custom loop: a `train` marker, an XLA run, then ops run eagerly.

    Each eager op is `(op type, span in us)`, holding its dispatch
    (`EagerKernelExecute`) and kernel run (`KernelAndDeviceFunc::Run`).
    """
    events: list[tuple] = [
        ("train", start, 100.0, {"_r": 1, "step_num": step}),
        ("CpuExecutable::ExecuteAsyncOnStream", start + 1, xla_us),
    ]
    at = start + 30
    for op_type, span in eager:
        events += [
            (f"EagerLocalExecute: {op_type}", at, span),
            ("EagerKernelExecute", at + span * 0.1, span * 0.8),
            ("KernelAndDeviceFunc::Run", at + span * 0.2, span * 0.6),
        ]
        at += span + 1
    return events


def _space(steps: int, eager: list[tuple[str, float]], once: list[tuple[str, float]] = ()) -> Any:
    """`steps` steps each running `eager`; `once` run eagerly in the first step only."""
    events: list[tuple] = []
    for step in range(steps):
        events += _step(step * 200.0, step, eager + (list(once) if step == 0 else []))
    return build_space({"python": events})


def _both(space: Any, tmp_path: Path) -> Any:
    """The report of `space` parsed and read from a file (the scan in columns): they must agree."""
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    parsed = analyze_xspace(load_xspace(path), trace_path=str(path), host="t")
    streamed = analyze_trace(path)
    assert parsed.to_dict() == streamed.to_dict()
    return streamed


def test_ops_run_in_every_step_are_timed_and_noted(tmp_path):
    """Eager ops in each of 4 steps: their spans' time exactly, outside the share, and a note with the share counting them."""
    report = _both(_space(4, [("MatMul", 2.0), ("Sum", 1.0)]), tmp_path)
    assert report.eager_op_time_s == pytest.approx(4 * 3.0e-6, rel=1e-12)
    assert report.xla_time_s == pytest.approx(4 * 19.0e-6, rel=1e-12)
    assert (report.non_xla_op_time_s, report.xla_time_fraction) == (0.0, 1.0)
    assert report.eager_overhead_s == pytest.approx(report.eager_op_time_s, rel=1e-12)
    (note,) = report.notes
    assert note == (
        "ops also ran eagerly, one at a time from Python, beside the functions, as often as the steps or more "
        "(MatMul x4, Sum x4 in 4 steps): the ops run eagerly took 0.000 s (eager_op_time_s), which the XLA "
        f"share leaves out (it counts op time inside functions); counting them, {76 / 88:.1%} of op time ran "
        "inside XLA. XLA never compiles an op run eagerly: move the step's eager ops into the compiled train "
        "step - whether compiling them pays is not measured here"
    )


@pytest.mark.parametrize(("span_us", "noted"), [(1.0, True), (0.99, False)])
def test_the_note_starts_at_five_percent_of_op_time_counting_eager_ops(tmp_path, span_us, noted):
    """19 us of XLA and 1 us run eagerly per step is 5%: noted; a hair less is not."""
    report = _both(_space(3, [("Square", span_us)]), tmp_path)
    assert report.eager_op_time_s == pytest.approx(3 * span_us * 1e-6, rel=1e-12)
    assert bool(report.notes) is noted


def test_ops_run_once_in_a_window_get_no_note(tmp_path):
    """Variable creation and an epoch's metric results run once: counted, but not the step's, so no note."""
    report = _both(
        _space(4, [], once=[("VarHandleOp", 30.0), ("AssignVariableOp", 30.0), ("DivNoNan", 30.0)]), tmp_path
    )
    assert report.eager_op_time_s == pytest.approx(90.0e-6, rel=1e-12)
    assert report.notes == ()


def test_without_step_markers_there_is_no_note(tmp_path):
    """A trace with no step marker cannot tell a step's eager ops from setup: the time, no note."""
    events = [e for e in _step(0.0, 0, [("MatMul", 20.0)]) if e[0] != "train"]
    report = _both(build_space({"python": events}), tmp_path)
    assert report.eager_op_time_s == pytest.approx(20.0e-6, rel=1e-12)
    assert report.steps is None and report.notes == ()


def test_eager_ops_inside_a_kernel_are_the_kernels_time(tmp_path):
    """A py_function's Python runs ops eagerly inside its kernel: kernel (op) time, as in xprof, not eager op time."""
    events = [
        ("EagerLocalExecute: EagerPyFunc", 0.0, 50.0),
        ("EagerKernelExecute", 1.0, 48.0),
        ("f/EagerPyFunc:EagerPyFunc", 2.0, 46.0),
        ("EagerLocalExecute: Mul", 10.0, 20.0),
        ("EagerKernelExecute", 11.0, 18.0),
    ]
    report = _both(build_space({"python": events}), tmp_path)
    assert report.eager_op_time_s == 0.0
    assert report.non_xla_op_time_s == pytest.approx(46.0e-6, rel=1e-12)
    assert report.eager_overhead_s == pytest.approx(4.0e-6, rel=1e-12)


def test_a_function_calls_time_stays_eager_overhead(tmp_path):
    """A tf.function call's span and the dispatch inside it are eager overhead, not an op run eagerly."""
    events = [
        ("EagerLocalExecute: __inference_step_7", 0.0, 50.0),
        ("EagerKernelExecute", 1.0, 48.0),
        ("__inference_step_7:__inference_step_7", 2.0, 40.0),
        ("EagerLocalExecute: IteratorGetNext", 60.0, 20.0),
        ("EagerKernelExecute", 61.0, 18.0),
    ]
    report = _both(build_space({"python": events}), tmp_path)
    assert report.eager_op_time_s == 0.0
    assert report.eager_overhead_s == pytest.approx((50.0 - 40.0 + 20.0) * 1e-6, rel=1e-12)


def test_a_device_trace_keeps_the_host_figure_and_no_note(tmp_path):
    """On a GPU trace the ops run eagerly are host time: eager_op_time_s counts them, no note (their kernels are device op time)."""
    from _gpu_trace import STEP_US, jit_fit

    trace = jit_fit(steps=6)
    for step in range(6):
        trace.host.event(trace.python, "EagerLocalExecute: Sum", step * STEP_US + 400, 300)
    report = analyze_trace(trace.write(tmp_path / "gpu.xplane.pb"))
    assert (report.time_base, len(report.steps)) == ("device", 6)
    assert report.eager_op_time_s == pytest.approx(6 * 300e-6, rel=1e-12)
    assert not any("ran eagerly" in note for note in report.notes)
