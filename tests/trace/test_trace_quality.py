"""GPU traces as users get them: each condition that limits attribution is found and costs no figure.

Raw GPU traces are built event by event from the writers' source
(`tests/_gpu_trace.py` names them): XLA's CUPTI collector and buffer
events (`xla/backends/profiler/gpu/cupti_collector.cc`,
`xla/backends/profiler/gpu/cupti_buffer_events.cc`: `cuda_graph_id`,
`cuda_graph_node_id`, `CudaGraphExec:<id>` with `cuda_graph_exec_id`,
`cuGraphLaunch (CudaGraph:<id>)`, the `warnings` of dropped events), its
`cupti_collector.h` caps, XLA's GPU annotations
(`xla/backends/gpu/runtime/annotation.cc`: `prefix`, `name`, `op_name`,
`op_type`), its command buffer thunk and scheduling
(`xla/backends/gpu/runtime/command_buffer_thunk.cc`: the host event
`WARNING: CommandBuffer disabled when profiling`;
`xla/service/gpu/transforms/command_buffer_scheduling.cc`: the `call`
instruction a command buffer is outlined into). Where xprof handles the
condition, its own conversion of the same file is the oracle
(`xprof.convert.raw_to_tool_data`: the "XLA Modules" lines it derives,
which count CUDA graph runs as kernels, and its stream lines).

No real GPU trace is here yet: the GPU goldens (JAX route, command buffers
on and off) are for `benchmarks/gpu_check.py` to capture on a GPU machine
(see docs/coverage.md, "GPU traces").
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from _gpu_trace import (
    COMMAND_BUFFER_CALL,
    MODULE,
    NCCL_TF,
    NCCL_XLA,
    PROGRAM,
    STEP_US,
    GpuTrace,
    annotated_fit,
    collective_fit,
    command_buffer_fit,
    jit_fit,
)
from _helpers import assert_consistent
from _oracle import xprof_device_lines, xprof_device_op_rows

from keras_xla_guard import analyze_trace
from keras_xla_guard.trace._quality import COMMAND_BUFFERS_OFF_EVENT

STEPS = 6
_US = 1e-6
LABEL = f"{MODULE}({PROGRAM})"
DATA = Path(__file__).resolve().parent / "data"


def _codes(report) -> list[str]:
    return [q.code for q in report.trace_quality]


def _modules(lines: dict[str, list[tuple[str, float]]]) -> dict[str, list[tuple[str, float]]]:
    return {name: events for name, events in lines.items() if name.startswith("XLA Modules")}


# ----------------------------------------------------------------- command buffers


@pytest.fixture(scope="module")
def graph_trace(tmp_path_factory: pytest.TempPathFactory):
    """6 steps whose program ran as a CUDA graph, kernel by kernel (CUPTI's default node tracing)."""
    path = command_buffer_fit(STEPS).write(tmp_path_factory.mktemp("graph") / "graph.xplane.pb")
    return path, analyze_trace(path)


def test_a_command_buffers_time_is_xla_time_of_its_program(graph_trace):
    """Graph kernels: 6 runs of the program, busy 120 us each (spans of 130 us), marked not per op; only
    BiasAdd is a plain op."""
    _, report = graph_trace
    assert report.xla_executions == STEPS
    assert report.xla_time_s == pytest.approx(STEPS * 120 * _US)
    assert report.xla_run_span_s == pytest.approx(STEPS * 130 * _US)
    (program,) = report.programs
    assert (program.program, program.runs, program.per_op) == (LABEL, STEPS, False)
    assert [(o.op_type, o.op_name) for o in report.top_non_xla_ops] == [("BiasAdd", "model/dense/BiasAdd")]
    assert report.non_xla_op_time_s == pytest.approx(STEPS * 25 * _US)
    assert [(o.op_type, o.op_name, o.count) for o in report.top_xla_ops] == [
        ("(command buffer)", LABEL, 3 * STEPS)
    ]
    assert report.top_xla_ops[0].self_time_s == pytest.approx(STEPS * 120 * _US)
    assert_consistent(report, steps=STEPS, programs=1)


def test_command_buffers_are_a_trace_quality_entry_with_the_flag_that_restores_ops(graph_trace):
    """One `command_buffers` entry: kernels and their time counted, the cost, XLA's flag to turn them off."""
    _, report = graph_trace
    assert _codes(report) == ["command_buffers"]
    (entry,) = report.trace_quality
    assert entry.detail.startswith(f"{3 * STEPS} kernel(s), 0.720 ms of device time, ran inside CUDA graphs")
    assert LABEL in entry.detail
    assert "not per op" in entry.cost
    assert "XLA_FLAGS=--xla_gpu_enable_command_buffer=" in entry.remedy


@pytest.mark.tf
def test_command_buffer_runs_match_xprofs_derived_modules(graph_trace):
    """xprof derives the same runs from the graph kernels: launches equal, the runs' spans within 1%."""
    path, report = graph_trace
    modules = [e for events in _modules(xprof_device_lines(path)).values() for e in events]
    assert {name for name, _ in modules} == {LABEL}
    assert report.xla_executions == len(modules)
    assert report.xla_run_span_s == pytest.approx(sum(d for _, d in modules) * _US, rel=0.01)


@pytest.mark.tf
def test_graph_level_runs_count_like_xprofs(tmp_path):
    """CUPTI's graph-level tracing (one CudaGraphExec event per run): same figures, as xprof derives them."""
    path = command_buffer_fit(STEPS, graph_level=True).write(tmp_path / "graph_level.xplane.pb")
    report = analyze_trace(path)
    modules = [e for events in _modules(xprof_device_lines(path)).values() for e in events]
    assert report.xla_executions == len(modules) == STEPS
    # One event a run: busy for all of it, its span.
    assert (
        report.xla_time_s
        == report.xla_run_span_s
        == pytest.approx(sum(d for _, d in modules) * _US, rel=0.01)
    )
    assert report.xla_time_s == pytest.approx(STEPS * 130 * _US)
    assert report.programs[0].per_op is False
    assert _codes(report) == ["command_buffers"]
    assert report.trace_quality[0].detail.startswith(f"{STEPS} kernel(s), 0.780 ms")


def test_a_graph_without_xla_annotation_is_xla_time_never_a_plain_op(tmp_path):
    """A CUDA graph with no module annotation is booked to `(command buffer)`, not to plain TF ops."""
    report = analyze_trace(command_buffer_fit(STEPS, annotated=False).write(tmp_path / "bare.xplane.pb"))
    assert [(p.program, p.runs, p.per_op) for p in report.programs] == [("(command buffer)", STEPS, False)]
    assert report.xla_time_s == pytest.approx(STEPS * 120 * _US)
    assert [o.op_type for o in report.top_non_xla_ops] == ["BiasAdd"]
    assert report.xla_time_fraction == pytest.approx(120 / (120 + 25))


def test_command_buffers_run_op_by_op_while_profiling_are_named(tmp_path):
    """XLA's host note that profiling turned its command buffers off is an entry; the figures stay."""
    plain = analyze_trace(jit_fit(STEPS).write(tmp_path / "plain.xplane.pb"))
    trace = jit_fit(STEPS)
    for step in range(STEPS):
        trace.host_event(COMMAND_BUFFERS_OFF_EVENT, step * STEP_US + 9, 0.2)
    report = analyze_trace(trace.write(tmp_path / "off.xplane.pb"))
    assert _codes(report) == ["command_buffers_off_while_profiling"]
    assert "--xla_enable_command_buffers_during_profiling=true" in report.trace_quality[0].remedy
    assert (report.xla_executions, report.xla_time_s, report.programs) == (
        plain.xla_executions,
        plain.xla_time_s,
        plain.programs,
    )
    assert plain.trace_quality == ()


# ----------------------------------------------------------------- step markers


def test_device_kernels_without_step_markers_are_an_entry(tmp_path):
    """TensorFlow's `FunctionRun` (`_r`, no `step_num`) around each call is no step marker: steps are
    unknown, an entry says how to mark them, and the launches are still the 6 program executions."""
    report = analyze_trace(jit_fit(STEPS, with_steps=False).write(tmp_path / "unmarked.xplane.pb"))
    assert report.steps is None
    assert report.xla_executions == STEPS
    assert report.xla_time_s == pytest.approx(STEPS * 120 * _US)
    assert _codes(report) == ["no_step_markers"]
    assert "FunctionRun" in report.trace_quality[0].detail
    assert "StepTraceAnnotation" in report.trace_quality[0].remedy


def test_markers_mean_no_entry_and_group_ids_alone_make_no_steps(tmp_path):
    """Steps known from the guard's markers leave no entry; xprof's group ids without a marker give
    launches but no steps, so the entry stays."""
    marked = analyze_trace(jit_fit(STEPS).write(tmp_path / "marked.xplane.pb"))
    grouped = analyze_trace(
        jit_fit(STEPS, with_steps=False, group_ids=True).write(tmp_path / "grouped.xplane.pb")
    )
    assert marked.trace_quality == ()
    assert (_codes(grouped), grouped.steps) == (["no_step_markers"], None)
    assert marked.xla_executions == grouped.xla_executions == STEPS


# ----------------------------------------------------------------- collectives


@pytest.fixture(scope="module")
def collective_trace(tmp_path_factory: pytest.TempPathFactory):
    """6 steps of a program with an all-reduce on its own stream, and TF's all-reduce outside XLA."""
    path = collective_fit(STEPS).write(tmp_path_factory.mktemp("nccl") / "nccl.xplane.pb")
    return path, analyze_trace(path)


def test_collectives_are_their_own_figure_and_never_plain_ops(collective_trace):
    """100 us of collectives per step; TF's all-reduce is no plain op; the program's two streams are one run."""
    _, report = collective_trace
    assert report.collective_time_s == pytest.approx(STEPS * 100 * _US)
    assert [(o.op_type, o.op_name) for o in report.top_non_xla_ops] == [("BiasAdd", "model/dense/BiasAdd")]
    assert report.non_xla_op_time_s == pytest.approx(STEPS * 25 * _US)
    # Compute 60-190 us and the all-reduce 100-180 us overlap: one launch of 130 us per step.
    assert report.xla_executions == STEPS
    assert report.xla_time_s == pytest.approx(STEPS * 130 * _US)
    assert report.programs[0].per_op is True
    assert_consistent(report, steps=STEPS, programs=1)


def test_collectives_beside_compute_are_an_entry(collective_trace):
    """The entry counts the kernels, their time and the part beside compute (70 us a step)."""
    _, report = collective_trace
    assert _codes(report) == ["collectives"]
    assert report.trace_quality[0].detail == (
        f"{2 * STEPS} collective kernel(s) ran 0.600 ms on the device, 0.420 ms of it while other streams "
        "ran other kernels"
    )
    assert "--xla_gpu_disable_async_collectives=allreduce" in report.trace_quality[0].remedy


@pytest.mark.tf
def test_collectives_match_xprofs_stream_lines(collective_trace):
    """Collective time equals xprof's NCCL kernel events; xprof counts the program once per stream."""
    path, report = collective_trace
    lines = xprof_device_lines(path)
    nccl = [
        d
        for name, events in lines.items()
        if name.startswith("Stream")
        for event, d in events
        if event in (NCCL_XLA, NCCL_TF)
    ]
    assert report.collective_time_s == pytest.approx(sum(nccl) * _US, rel=0.01)
    modules = _modules(lines)
    compute = next(events for name, events in modules.items() if name.endswith("#7"))
    assert report.xla_executions == len(compute) == STEPS
    assert report.xla_time_s == pytest.approx(sum(d for _, d in compute) * _US, rel=0.01)
    # xprof's per-stream lines add the all-reduce's stream: 2 events a step.
    assert sum(len(events) for events in modules.values()) == 2 * STEPS
    # xprof books TF's all-reduce as a framework op; the guard keeps it out of plain ops.
    assert ("CollectiveReduceV2", "Adam/CollectiveReduceV2") in xprof_device_op_rows(path)


# ----------------------------------------------------------------- truncated and capped traces


def test_dropped_events_are_an_entry_read_from_the_xspace_warnings(tmp_path):
    """The collector's warning (written twice by some versions) gives one entry with its count."""
    trace = jit_fit(STEPS)
    warning = (
        "Detected GPU events dropped on gpu-host: Profiler has collected 2097152 driver events and "
        "2097152 device events. 1234 events dropped because total device(activity) events reaches max."
    )
    trace.space.warnings.extend([warning, warning])
    report = analyze_trace(trace.write(tmp_path / "capped.xplane.pb"))
    assert _codes(report) == ["events_dropped"]
    assert report.trace_quality[0].detail == (
        "the profiler dropped 1234 event(s): 1234 because total device(activity) events reaches max"
    )
    assert "gpu_max_activity_api_events" in report.trace_quality[0].remedy
    assert report.trace_quality[0].cost == (
        "every device figure of the window reads low: the dropped events' time and launches are missing"
    )


@pytest.mark.parametrize("counts", [(5, 9), (9, 5)])
def test_one_reason_in_two_warnings_counts_the_larger_number(counts, tmp_path):
    """The same reason with two counts (two collectors' exports): the larger is the count, in either order."""
    trace = jit_fit(1)
    trace.space.warnings.extend(
        f"Detected GPU events dropped on h: {n} events dropped because total device(activity) events reaches max."
        for n in counts
    )
    report = analyze_trace(trace.write(tmp_path / "twice.xplane.pb"))
    assert report.trace_quality[0].detail == (
        "the profiler dropped 9 event(s): 9 because total device(activity) events reaches max"
    )


def test_a_device_plane_that_ends_early_is_an_entry(tmp_path):
    """The last step's kernels after 5100 us have no device event: 5 launches missing, all at the end;
    the last run keeps its one kernel (40 us) of the five steps' 120 us each."""
    trace = jit_fit(STEPS)
    trace.drop_device_events_after(5 * STEP_US + 100)
    report = analyze_trace(trace.write(tmp_path / "early.xplane.pb"))
    assert _codes(report) == ["device_events_missing"]
    assert report.trace_quality[0].detail == (
        f"5 of the host's {7 * STEPS} kernel, copy and graph launches have no device event; the window's "
        "last 5 launch(es) are among them: the device plane ends early"
    )
    assert report.xla_time_s == pytest.approx(((STEPS - 1) * 120 + 40) * _US)


def test_profiler_errors_are_an_entry(tmp_path):
    """CUPTI's errors in the XSpace become one `profiler_errors` entry quoting them."""
    trace = jit_fit(1)
    trace.space.errors.append("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: profiling is restricted to admins")
    report = analyze_trace(trace.write(tmp_path / "errors.xplane.pb"))
    assert _codes(report) == ["profiler_errors"]
    assert report.trace_quality[0].detail == (
        "the profiler reported: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: profiling is restricted to admins"
    )
    assert report.trace_quality[0].cost == (
        "device planes may be missing or partial: with CUPTI unavailable the figures are host times only"
    )
    assert "NVreg_RestrictProfilingToAdminUsers=0" in report.trace_quality[0].remedy


@pytest.mark.parametrize("length", [299, 300, 301])
def test_profiler_errors_are_quoted_once_each_and_cut_after_300_characters(length, tmp_path):
    """Distinct errors joined by "; " (repeats and blank ones left out), the quote cut to 300
    characters with "..." only when longer."""
    trace = jit_fit(1)
    first = "E1: " + "x" * (length - 8)
    trace.space.errors.extend([first, "  ", first, "E2"])
    report = analyze_trace(trace.write(tmp_path / "errors.xplane.pb"))
    text = f"{first}; E2"
    assert len(text) == length
    assert report.trace_quality[0].detail == "the profiler reported: " + (
        text if length <= 300 else text[:300] + "..."
    )


# ----------------------------------------------------------------- richer annotations


@pytest.mark.parametrize("detailed", [False, True])
def test_top_xla_ops_are_named_by_the_richest_annotation(tmp_path, detailed):
    """Detailed annotations give framework op type and name; basic ones the scope under the prefix."""
    report = analyze_trace(annotated_fit(STEPS, detailed=detailed).write(tmp_path / "ann.xplane.pb"))
    if detailed:
        expected = [("BiasAdd", "model/dense/BiasAdd", 2 * STEPS), ("MatMul", "model/dense/MatMul", STEPS)]
    else:
        expected = [("fusion", "model/dense/BiasAdd", 2 * STEPS), ("fusion", "model/dense/MatMul", STEPS)]
    assert [(o.op_type, o.op_name, o.count) for o in report.top_xla_ops] == expected
    assert [o.self_time_s for o in report.top_xla_ops] == pytest.approx(
        [2 * STEPS * 40 * _US, STEPS * 40 * _US]
    )


def test_unannotated_xla_kernels_are_named_by_their_hlo_instruction(tmp_path):
    """Without a `name` or `op_name` stat an XLA kernel is its HLO instruction, typed by its opcode."""
    report = analyze_trace(jit_fit(STEPS).write(tmp_path / "jit.xplane.pb"))
    assert [(o.op_type, o.op_name, o.count) for o in report.top_xla_ops] == [
        ("fusion", "fusion.0", STEPS),
        ("fusion", "fusion.1", STEPS),
        ("fusion", "fusion.2", STEPS),
    ]


@pytest.mark.tf
def test_top_xla_ops_add_up_to_xprofs_xla_ops_line(tmp_path):
    """The XLA ops' device time equals the total of xprof's derived "XLA Ops" events (1%)."""
    path = annotated_fit(STEPS, detailed=True).write(tmp_path / "ann.xplane.pb")
    report = analyze_trace(path)
    ops = [
        d
        for name, events in xprof_device_lines(path).items()
        if name.startswith("XLA Ops")
        for _, d in events
    ]
    assert sum(o.self_time_s for o in report.top_xla_ops) == pytest.approx(sum(ops) * _US, rel=0.01)


# ----------------------------------------------------------------- what needs no entry


@pytest.mark.parametrize("name", sorted(p.name.split(".")[0] for p in DATA.glob("*.xplane.pb.gz")))
def test_stored_host_traces_have_no_device_figures_and_no_entries_but_unknown_steps(tmp_path, name):
    """The real CPU traces kept in data/: no collectives, programs, devices or XLA ops; no trace quality
    entry, but `no_step_markers` for those taken without step markers (steps unknown)."""
    path = tmp_path / f"{name}.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes()))
    report = analyze_trace(path)
    assert (report.collective_time_s, report.programs, report.devices, report.top_xla_ops) == (
        None,
        (),
        (),
        (),
    )
    assert report.xla_run_span_s is None
    assert _codes(report) == ([] if report.steps else ["no_step_markers"])
    marked = {"jax_cpu", "tf220_async_launch", "tf220_lost_split_launch"}
    assert (report.steps is not None) == (name in marked)


def test_a_clean_gpu_trace_has_no_entries(tmp_path):
    """Steps marked, no graphs, no collectives, nothing dropped: no trace quality entry."""
    report = analyze_trace(jit_fit(STEPS).write(tmp_path / "clean.xplane.pb"))
    assert report.trace_quality == ()
    assert report.collective_time_s == 0.0


def test_command_buffer_call_is_not_mistaken_for_a_collective(graph_trace):
    """The command buffer's `call` instruction names no collective: no collective time."""
    _, report = graph_trace
    assert COMMAND_BUFFER_CALL.startswith("call")
    assert report.collective_time_s == 0.0


def test_entries_of_several_hosts_are_kept_once_each(tmp_path):
    """combine_reports keeps each host's entries, identical ones once."""
    from keras_xla_guard import combine_reports

    one = analyze_trace(jit_fit(STEPS, with_steps=False).write(tmp_path / "a.xplane.pb"))
    two = analyze_trace(command_buffer_fit(STEPS).write(tmp_path / "b.xplane.pb"))
    combined = combine_reports([one, one, two])
    assert _codes(combined) == ["no_step_markers", "command_buffers"]
    runs = 2 * one.programs[0].runs + two.programs[0].runs
    assert [(p.program, p.runs, p.per_op) for p in combined.programs] == [(LABEL, runs, False)]


def test_a_gpu_trace_builder_writes_what_it_says():
    """The builder's graph kernels carry the graph id, node id and the launch's correlation id."""
    trace = GpuTrace()
    launch = trace.graph_launch(7, 1.0)
    trace.graph_kernel(launch, 7, "k", 2.0, 1.0, graph_id=7, node=4)
    plane = trace.gpu.plane
    names = {m.id: m.name for m in plane.stat_metadata.values()}
    (event,) = [e for line in plane.lines for e in line.events]
    stats = {names[s.metadata_id]: s for s in event.stats}
    assert (stats["cuda_graph_id"].int64_value, stats["cuda_graph_node_id"].int64_value) == (7, 4)
    assert stats["correlation_id"].int64_value == launch["correlation_id"]


def test_a_scope_without_prefix_and_a_nested_hlo_op_name_the_op(tmp_path):
    """`name` without a module `prefix` is the op name as is; of an `a::b` HLO op stack the innermost is the op."""
    trace = GpuTrace()
    trace.step(0, 0, 900)
    trace.xla_kernel(
        7,
        "k0",
        1,
        10,
        40,
        module="m",
        program=1,
        hlo_op="while.2::fusion.7",
        tf_op="S:S",
        name="encoder/attention",
    )
    trace.xla_kernel(7, "k1", 2, 60, 30, module="m", program=1, hlo_op="while.2::copy.3", tf_op="S:S")
    report = analyze_trace(trace.write(tmp_path / "nested.xplane.pb"))
    assert [(o.op_type, o.op_name, o.count) for o in report.top_xla_ops] == [
        ("fusion", "encoder/attention", 1),
        ("copy", "copy.3", 1),
    ]


def test_dropped_events_of_several_reasons_add_up_each_counted_once(tmp_path):
    """Driver and device drops in one warning, repeated: each reason counted once, the counts added."""
    trace = jit_fit(1)
    warning = (
        "Detected GPU events dropped on h: Profiler has collected 10 driver events and 10 device events. "
        "5 events dropped because total driver(callback) events reaches max; 7 events dropped because "
        "total device(activity) events reaches max."
    )
    trace.space.warnings.extend([warning, "an unrelated warning", warning])
    report = analyze_trace(trace.write(tmp_path / "both.xplane.pb"))
    assert report.trace_quality[0].detail == (
        "the profiler dropped 12 event(s): 7 because total device(activity) events reaches max; "
        "5 because total driver(callback) events reaches max"
    )


def test_the_command_buffer_entry_lists_three_programs_and_counts_the_rest(tmp_path):
    """Five programs in CUDA graphs: three named, the other two counted."""
    trace = GpuTrace()
    trace.step(0, 0, 900)
    for i in range(5):
        launch = trace.graph_launch(i + 1, i)
        trace.graph_kernel(
            launch,
            7,
            "k",
            10 + 20 * i,
            10,
            graph_id=i + 1,
            node=1,
            hlo_module=f"p{i}",
            program_id=i,
            hlo_op="call.1",
            tf_op="S:S",
        )
    report = analyze_trace(trace.write(tmp_path / "five.xplane.pb"))
    assert report.trace_quality[0].detail.endswith("in p0(0), p1(1), p2(2) and 2 more")
    assert [p.per_op for p in report.programs] == [False] * 5


def test_collectives_alone_on_the_device_overlap_nothing(tmp_path):
    """An all-reduce with no other stream computing beside it: 0 us of overlap; its own stream's kernels do not count."""
    trace = GpuTrace()
    trace.step(0, 0, 900)
    trace.execution("m", 0.5, 3)
    trace.xla_kernel(12, NCCL_XLA, 1, 100, 50, module="m", program=1, hlo_op="all-reduce.1", tf_op="S:S")
    trace.xla_kernel(12, "fusion", 2, 160, 50, module="m", program=1, hlo_op="fusion.1", tf_op="S:S")
    trace.xla_kernel(7, "fusion", 3, 300, 50, module="m", program=1, hlo_op="fusion.2", tf_op="S:S")
    report = analyze_trace(trace.write(tmp_path / "alone.xplane.pb"))
    assert report.trace_quality[0].detail == (
        "1 collective kernel(s) ran 0.050 ms on the device, 0.000 ms of it while other streams ran other kernels"
    )
    # One execution launched all three: one launch, busy 150 us, its span 100-350 us.
    assert (report.xla_executions, report.xla_time_s) == (1, pytest.approx(150 * _US))
    assert report.xla_run_span_s == pytest.approx(250 * _US)


def test_collectives_over_several_compute_kernels_and_streams_count_each_moment_once(tmp_path):
    """An all-reduce 0-100 us beside kernels on two streams (10-30 and 20-50, 80-120): 60 us of overlap."""
    trace = GpuTrace()
    trace.step(0, 0, 900)
    trace.execution("m", 0.5, 4)
    trace.xla_kernel(12, NCCL_XLA, 1, 0, 100, module="m", program=1, hlo_op="all-reduce-start", tf_op="S:S")
    trace.xla_kernel(7, "a", 2, 10, 20, module="m", program=1, hlo_op="fusion.1", tf_op="S:S")
    trace.xla_kernel(8, "b", 3, 20, 30, module="m", program=1, hlo_op="fusion.2", tf_op="S:S")
    trace.xla_kernel(7, "c", 4, 80, 40, module="m", program=1, hlo_op="fusion.3", tf_op="S:S")
    report = analyze_trace(trace.write(tmp_path / "streams.xplane.pb"))
    assert report.trace_quality[0].detail.endswith("0.060 ms of it while other streams ran other kernels")
    # One program on three overlapping streams: one launch, 0-120 us.
    assert (report.xla_executions, report.xla_time_s) == (1, pytest.approx(120 * _US))
