"""GPU planes as the profiler writes them, read like xprof reads them.

Raw traces are built by `tests/_gpu_trace.py` from the writers' source:
XLA's CUPTI collector (`xla/backends/profiler/gpu/cupti_collector.cc`:
`Stream #<id>(<types>)` lines; `kernel_details`, `memcpy_details`,
`memset_details`, `correlation_id`, `tf_op` stats) and XLA's GPU
annotations (`xla/backends/gpu/runtime/annotation.cc`: `hlo_module`,
`program_id`, `hlo_op`); host launches `cuLaunchKernel`/`cuMemcpy*` with
`correlation_id`, and the guard's `train` step marker (`step_num`, `_r`).
The oracle is xprof's own conversion of the same file
(`xprof.convert.raw_to_tool_data`): the per-stream "XLA Modules - from #N"
lines it derives (`GenerateDerivedTimeLines`,
`xprof/utils/derived_timeline.cc`), its "Framework Ops" lines and its
framework_op_stats rows.
"""

from __future__ import annotations

import pytest
from _gpu_trace import MODULE, PROGRAM, GpuTrace, jit_fit
from _oracle import xprof_device_lines, xprof_device_op_rows

from keras_xla_guard import analyze_trace

STEPS = 6
_US = 1e-6


def _xprof_modules(lines: dict[str, list[tuple[str, float]]]) -> list[tuple[str, float]]:
    return [e for name, events in lines.items() if name.startswith("XLA Modules") for e in events]


def _stream_time_us(lines: dict[str, list[tuple[str, float]]], prefixes: tuple[str, ...]) -> float:
    return sum(
        d
        for name, events in lines.items()
        if name.startswith("Stream")
        for event, d in events
        if event.startswith(prefixes)
    )


@pytest.fixture(scope="module")
def jit_trace(tmp_path_factory: pytest.TempPathFactory):
    """A raw GPU trace of 6 jit_compile steps and our report of it."""
    path = jit_fit(STEPS).write(tmp_path_factory.mktemp("gpu") / "jit.xplane.pb")
    return path, analyze_trace(path)


@pytest.fixture(scope="module")
def xprof_lines(jit_trace):
    """xprof's device lines of the jit trace (derived ones included)."""
    return xprof_device_lines(jit_trace[0])


def test_xla_runs_and_time_come_from_the_stream_kernels(jit_trace):
    """One run per step of 3 kernels of 40 us, 5 us apart: 6 launches, XLA time the kernels' 120 us a
    step (the device was idle in the gaps), the runs' span 130 us a step, by construction."""
    _, report = jit_trace
    assert report.time_base == "device"
    assert report.xla_executions == STEPS
    assert report.xla_time_s == pytest.approx(STEPS * 120 * _US)
    assert report.xla_run_span_s == pytest.approx(STEPS * 130 * _US)


@pytest.mark.tf
def test_xla_runs_and_spans_match_xprofs_derived_modules(jit_trace, xprof_lines):
    """Launches equal xprof's "XLA Modules" events, the runs' span their total within 1%."""
    _, report = jit_trace
    lines = xprof_lines
    modules = _xprof_modules(lines)
    assert {name for name, _ in modules} == {f"{MODULE}({PROGRAM})"}
    assert report.xla_executions == len(modules) == STEPS
    assert report.xla_run_span_s == pytest.approx(sum(d for _, d in modules) * _US, rel=0.01)


def test_copies_and_memsets_are_transfers_never_ops(jit_trace):
    """H2D 30 us, memset 4 us and an XLA program's D2H 8 us per step are transfer time, not op time."""
    _, report = jit_trace
    assert report.transfer_time_s == pytest.approx(STEPS * (30 + 4 + 8) * _US)
    assert [(o.op_type, o.op_name) for o in report.top_non_xla_ops] == [("BiasAdd", "model/dense/BiasAdd")]
    assert report.non_xla_op_time_s == pytest.approx(STEPS * 25 * _US)
    assert report.xla_time_fraction == pytest.approx(120 / (120 + 25))


@pytest.mark.tf
def test_transfers_and_plain_kernels_match_xprof(jit_trace, xprof_lines):
    """Transfer time equals xprof's copy and memset events; the plain op xprof's "Framework Ops" (1%)."""
    _, report = jit_trace
    lines = xprof_lines
    assert report.transfer_time_s == pytest.approx(
        _stream_time_us(lines, ("Memcpy", "Memset")) * _US, rel=0.01
    )
    framework_ops = [e for name, events in lines.items() if name.startswith("Framework Ops") for e in events]
    assert {name for name, _ in framework_ops} == {"BiasAdd"}
    assert report.non_xla_op_time_s == pytest.approx(sum(d for _, d in framework_ops) * _US, rel=0.01)


@pytest.mark.tf
def test_plain_kernel_self_time_matches_xprofs_op_stats(jit_trace):
    """framework_op_stats' BiasAdd row has our self time per occurrence (1%); its copy row is no op of ours."""
    path, report = jit_trace
    rows = xprof_device_op_rows(path)
    (ours,) = report.top_non_xla_ops
    row = rows[("BiasAdd", "model/dense/BiasAdd")]
    assert ours.self_time_s / ours.count == pytest.approx(
        row["total_self_time"] / row["occurrences"] * _US, rel=0.01
    )
    # xprof books the annotated H2D copy as an op of its annotation; it is a transfer here.
    assert ("IteratorGetNext", "IteratorGetNext") in rows
    assert all(o.op_type != "IteratorGetNext" for o in report.top_non_xla_ops)


def _two_programs(executions: bool = True, **kwargs) -> GpuTrace:
    """Per step: program A (2 kernels), a TF kernel, program B (1 kernel), program A again, each program
    run inside its host execution under TensorFlow's layout (`executions`), or launched by bare driver
    calls on the Python thread."""
    trace = GpuTrace(layout="tf" if executions else "bare", **kwargs)
    for step in range(4):
        base = step * 1000.0
        trace.step(step, base, 900)
        if executions:
            trace.execution("a_mod", base + 0.8, 1.8)
        trace.xla_kernel(
            7, "a0", base + 1, base + 100, 50, module="a_mod", program=1, hlo_op="f.0", tf_op="A:A"
        )
        trace.xla_kernel(
            7, "a1", base + 2, base + 160, 50, module="a_mod", program=1, hlo_op="f.1", tf_op="A:A"
        )
        trace.tf_kernel(7, "relu", base + 3, base + 215, 10, tf_op="model/relu:Relu")
        if executions:
            trace.execution("b_mod", base + 3.8, 0.8)
        trace.xla_kernel(
            7, "b0", base + 4, base + 300, 70, module="b_mod", program=2, hlo_op="g.0", tf_op="B:B"
        )
        if executions:
            trace.execution("a_mod", base + 4.8, 0.8)
        trace.xla_kernel(
            7, "a0", base + 5, base + 400, 20, module="a_mod", program=1, hlo_op="f.0", tf_op="A:A"
        )
    return trace


@pytest.mark.tf
@pytest.mark.parametrize("with_steps", [True, False])
def test_runs_of_several_programs_are_the_host_executions_whatever_the_markers(tmp_path, with_steps):
    """A, B, A each step: 12 launches with or without step markers, the host's executions; XLA time the
    kernels' (4 x 190 us). xprof derives its module lines by step group, and groups each execution
    with its step's `FunctionRun` when there is no marker (its implicit root, `group_events.cc`): the
    same 12 runs, their spans ours."""
    path = _two_programs(with_steps=with_steps).write(tmp_path / "two.xplane.pb")
    report = analyze_trace(path)
    modules = _xprof_modules(xprof_device_lines(path))
    assert report.xla_executions == len(modules) == 4 * 3
    assert report.xla_time_s == pytest.approx(4 * (100 + 70 + 20) * _US)
    assert report.xla_run_span_s == pytest.approx(4 * (110 + 70 + 20) * _US)
    assert report.xla_run_span_s == pytest.approx(sum(d for _, d in modules) * _US, rel=0.01)
    assert (report.steps is None) == (not with_steps)


@pytest.mark.tf
@pytest.mark.parametrize("with_steps", [True, False])
def test_kernels_no_execution_holds_are_grouped_as_xprof_derives_runs(tmp_path, with_steps):
    """Bare driver calls (no `XLA GPU module` event): runs as xprof derives them, its launches and
    spans; without step markers the relu does not interrupt A, so launches read below 12."""
    path = _two_programs(executions=False, with_steps=with_steps).write(tmp_path / "bare.xplane.pb")
    report = analyze_trace(path)
    modules = _xprof_modules(xprof_device_lines(path))
    assert report.xla_executions == len(modules)
    assert report.xla_run_span_s == pytest.approx(sum(d for _, d in modules) * _US, rel=0.01)
    assert report.xla_time_s == pytest.approx(4 * (100 + 70 + 20) * _US)
    assert "launches_unattributed" in [q.code for q in report.trace_quality]
    if with_steps:
        assert report.xla_executions == 4 * 3
    else:
        assert report.xla_executions < 12


def test_a_trace_xprof_already_grouped_and_derived_reads_the_same(tmp_path):
    """group_id stats and derived "XLA Modules" lines from xprof change nothing: no run counted twice."""
    raw = analyze_trace(jit_fit(STEPS).write(tmp_path / "raw.xplane.pb"))
    processed = jit_fit(STEPS, group_ids=True, with_steps=False)
    processed.derived_module_line(
        7, [(f"{MODULE}({PROGRAM})", s * 1000.0 + 60, 130, s) for s in range(STEPS)]
    )
    again = analyze_trace(processed.write(tmp_path / "processed.xplane.pb"))
    for field in ("xla_executions", "xla_time_s", "non_xla_op_time_s", "transfer_time_s", "top_non_xla_ops"):
        assert getattr(again, field) == getattr(raw, field), field


def test_a_plane_with_only_module_lines_reads_them(tmp_path):
    """A TPU-like plane ("XLA Modules"/"XLA Ops" lines, no streams) counts its module events."""
    trace = GpuTrace()
    tpu = trace.space.planes.add(id=5, name="/device:TPU:0")
    tpu.event_metadata[1].name = "jit_step(3)"
    tpu.event_metadata[2].name = "fusion.1"
    modules = tpu.lines.add(id=1, name="XLA Modules", timestamp_ns=1)
    ops = tpu.lines.add(id=2, name="XLA Ops", timestamp_ns=1)
    for i in range(3):
        modules.events.add(metadata_id=1, offset_ps=i * 10**9, duration_ps=4 * 10**8)
        ops.events.add(metadata_id=2, offset_ps=i * 10**9, duration_ps=3 * 10**8)
    report = analyze_trace(trace.write(tmp_path / "tpu.xplane.pb"))
    assert (report.time_base, report.xla_executions) == ("device", 3)
    assert report.xla_time_s == pytest.approx(3 * 400 * _US)
    assert report.transfer_time_s == 0.0


def test_plain_gpu_model_has_no_xla_and_ops_named_by_layer(tmp_path):
    """TF's own GPU kernels (tf_op, no hlo stats) are plain ops named by their layer; XLA share 0."""
    trace = GpuTrace()
    for step in range(3):
        base = step * 1000.0
        trace.step(step, base, 900)
        trace.memcpy(1, "H2D", base + 1, base + 10, 20, tf_op="IteratorGetNext:IteratorGetNext")
        trace.tf_kernel(7, "sgemm", base + 2, base + 40, 60, tf_op="model/dense_1/MatMul:MatMul")
        trace.tf_kernel(7, "bias", base + 3, base + 110, 5, tf_op="model/dense_1/BiasAdd:BiasAdd")
    report = analyze_trace(trace.write(tmp_path / "plain.xplane.pb"))
    assert (report.xla_executions, report.xla_time_s, report.xla_time_fraction) == (0, 0.0, 0.0)
    assert [(o.op_type, o.op_name, o.count) for o in report.top_non_xla_ops] == [
        ("MatMul", "model/dense_1/MatMul", 3),
        ("BiasAdd", "model/dense_1/BiasAdd", 3),
    ]
    assert report.transfer_time_s == pytest.approx(3 * 20 * _US)


def test_host_traces_have_no_transfer_figure(tmp_path):
    """Without a device plane there is no device to copy to: transfer_time_s is None, not 0."""
    trace = GpuTrace()
    trace.space.planes.remove(trace.gpu.plane)
    trace.step(0, 0, 100)
    assert analyze_trace(trace.write(tmp_path / "host.xplane.pb")).transfer_time_s is None


def test_module_line_beside_xla_kernels_without_a_module_is_not_added():
    """XLA kernels with `hlo_op` but no `hlo_module` are XLA time; a module line beside them is not added."""
    from _xspace import build_space

    from keras_xla_guard import analyze_xspace

    space = build_space(
        {"python": []},
        extra_planes={
            "/device:GPU:0": {
                "XLA Modules": [("jit_step(1)", 0, 300)],
                "Stream #1(Kernel)": [("fusion_kernel", 0, 250, {"hlo_op": "fusion"})],
            }
        },
    )
    report = analyze_xspace(space)
    assert (report.xla_time_s, report.xla_executions) == (pytest.approx(250e-6), 0)


@pytest.mark.tf
def test_a_kernel_launched_outside_every_step_joins_the_run_before_it(tmp_path):
    """A launch after its step's marker ended gets the group of the kernel before it, as in xprof (bare
    driver calls on the Python thread: no execution tells the runs apart)."""
    trace = GpuTrace(layout="bare")
    for step in range(3):
        base = step * 1000.0
        trace.step(step, base, 500)
        trace.xla_kernel(7, "k0", base + 10, base + 100, 50, module="m", program=4, hlo_op="f.0", tf_op="S:S")
        # Launched after the marker's end (500): no marker holds it.
        trace.xla_kernel(
            7, "k1", base + 600, base + 700, 50, module="m", program=4, hlo_op="f.1", tf_op="S:S"
        )
    path = trace.write(tmp_path / "late.xplane.pb")
    report = analyze_trace(path)
    modules = _xprof_modules(xprof_device_lines(path))
    assert report.xla_executions == len(modules) == 3
    assert report.xla_run_span_s == pytest.approx(sum(d for _, d in modules) * _US, rel=0.01)
    assert report.xla_run_span_s == pytest.approx(3 * 650 * _US)
    assert report.xla_time_s == pytest.approx(3 * 100 * _US)
