"""Tests for keras_xla_guard.trace._columns and the batched plane scan: the scan
in columns books exactly what the scan one event at a time books, on real
traces (tests/trace/test_golden.py) and here on generated ones with every
kind of event, nesting or not, cut into batches of any size."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _xspace import pb_field
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras_xla_guard.trace._reader as reader
import keras_xla_guard.trace._scan as scan
from keras_xla_guard import analyze_trace, analyze_xspace
from keras_xla_guard.errors import TraceParseError
from keras_xla_guard.trace._columns import OpSums, _tree, top_level_cut
from keras_xla_guard.trace.xplane import load_xspace, xplane_pb2

DATA = Path(__file__).resolve().parent / "data"

# Event names of every category the scan tells apart, with the stats they carry.
_NAMES = (
    ("dense/MatMul:MatMul", {}),
    ("dense/Relu:Relu", {}),
    ("cluster_0/_XlaRun:_XlaRun", {}),
    ("cluster_0/_XlaCompile:_XlaCompile", {}),
    ("IteratorGetNext:IteratorGetNext", {}),
    ("StatefulPartitionedCall:StatefulPartitionedCall", {}),
    ("ExecutorState::Process", {}),
    ("ThunkExecutor::Execute", {}),
    ("CpuExecutable::ExecuteAsyncOnStream", {}),
    ("fusion.3", {"hlo_module": "m"}),
    ("end: fusion.3", {}),
    ("CpuCompiler::RunHloPasses", {}),
    ("CpuCompiler::RunBackend", {"name": "a_inference_step_12__.5"}),
    ("XlaCompilationCache::Compile", {}),
    ("Iterator::Root::Prefetch", {}),
    ("tf.function-graph_building", {}),
    ("EagerExecute", {}),
    ("EagerLocalExecute: __inference_step_12", {}),
    ("EagerExecute", {"hlo_module": "m"}),
    ("ExecutorState::ProcessAsync::Start", {"kernel_type": "MatMul", "name": "async/MatMul"}),
    ("ExecutorState::ProcessAsync::Start", {"kernel_type": "CollectiveReduceV2"}),
    ("ExecutorState::ProcessAsync::Start", {}),
    ("train", {"step_num": 3, "_r": 1}),
    ("train", {"step_num": 4}),
    ("xla_guard_tap/Shape:Shape", {}),
)
_LINES = ("python", "tf_Compute/1", "tf_data_iterator/2", "tf_numa_-1_Eigen/3")


def _tree_events(draw: Any, start: int, end: int, depth: int) -> list[tuple]:
    """Events nested in [start, end) (us), some spilling out of it or without a duration."""
    events: list[tuple] = []
    at = start
    for _ in range(draw(st.integers(0, 3 if depth < 4 else 0))):
        if at >= end:
            break
        first = draw(st.integers(at, end - 1))
        stop = draw(st.integers(first, end))
        if draw(st.integers(0, 30)) == 0:
            stop += draw(st.integers(1, 5))  # ends after its parent: not nested
        name = draw(st.integers(0, len(_NAMES) - 1))
        events.append((name, first, stop - first))
        if stop > first:
            events.extend(_tree_events(draw, first, stop, depth + 1))
        at = stop
    return events


@st.composite
def _spaces(draw: Any) -> tuple[bytes, int, int]:
    """A serialized XSpace of 1-4 host lines, plus batch and slice sizes to read it with."""
    pb = xplane_pb2()
    space = pb.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    stats: dict[str, int] = {}
    for mid, (name, _) in enumerate(_NAMES, start=1):
        plane.event_metadata[mid].id = mid
        plane.event_metadata[mid].name = name
    for key in ("hlo_module", "name", "kernel_type", "step_num", "_r"):
        stats[key] = len(stats) + 1
        plane.stat_metadata[stats[key]].id = stats[key]
        plane.stat_metadata[stats[key]].name = key
    for lid in range(draw(st.integers(1, 4))):
        line = plane.lines.add(
            id=lid,
            name=draw(st.sampled_from(_LINES)),
            timestamp_ns=draw(st.sampled_from([0, 1000, 1_790_000_000_000_000_000])),
        )
        events = []
        at = 0
        for _ in range(draw(st.integers(0, 6))):
            span = draw(st.integers(0, 40))
            events.extend(_tree_events(draw, at, at + span, 0) if span else [])
            events.append((draw(st.integers(0, len(_NAMES) - 1)), at, span))
            at += span + draw(st.integers(0, 3))
        if draw(st.integers(0, 10)) == 0:
            events = list(reversed(events))  # out of order: scanned sorted
        else:
            events.sort(key=lambda e: (e[1], -e[2]))
        for index, first, length in events:
            event = line.events.add(
                metadata_id=index + 1, offset_ps=first * 1_000_000, duration_ps=length * 1_000_000
            )
            for key, value in _NAMES[index][1].items():
                stat = event.stats.add(metadata_id=stats[key])
                if isinstance(value, str):
                    stat.str_value = value
                else:
                    stat.int64_value = value
    return (
        space.SerializeToString(),
        draw(st.sampled_from([2, 7, 64, 8192])),
        draw(st.sampled_from([40, 300])),
    )


@settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=_spaces())
def test_column_scan_reports_what_the_event_scan_reports(case, tmp_path, monkeypatch):
    """Generated lines of every event kind, nesting or not, in batches and slices of any size: the
    streamed report (scan in columns) equals the parsed one (scan one event at a time), field by field."""
    data, batch, chunk = case
    monkeypatch.setattr(scan, "BATCH_EVENTS", batch)
    monkeypatch.setattr(reader, "CHUNK_BYTES", chunk)
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(data)
    streamed = analyze_trace(path, top_k=1000).to_dict()
    parsed = analyze_xspace(load_xspace(path), trace_path=str(path), host="t", top_k=1000).to_dict()
    assert streamed == parsed


@pytest.mark.parametrize(
    "name",
    [
        "jit",
        "mlp",
        "plain",
        "eager_loop",
        "jax_cpu",
        "tf220_async_launch",
        "tf220_lost_split_launch",
        "py_function",
    ],
)
@pytest.mark.parametrize("batch", [16, 1000])
def test_real_traces_in_small_batches_report_what_the_event_scan_reports(name, batch, tmp_path, monkeypatch):
    """Real traces cut into small batches (long lines carried across them): the parsed report."""
    monkeypatch.setattr(scan, "BATCH_EVENTS", batch)
    path = tmp_path / f"{name}.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes()))
    parsed = analyze_xspace(load_xspace(path), trace_path=str(path), host=name, top_k=1000).to_dict()
    assert analyze_trace(path, top_k=1000).to_dict() == parsed


def test_tree_gives_depth_and_parent_of_nested_events():
    """Nested events: depth from times alone, the parent one level up, nothing flagged."""
    start = np.array([0, 1, 2, 5, 10, 10], dtype=np.int64)
    end = np.array([9, 4, 3, 8, 12, 11], dtype=np.int64)
    depth, parent, bad = _tree(np, start, end)
    assert depth.tolist() == [0, 1, 2, 1, 0, 1]
    assert parent.tolist() == [-1, 0, 1, 0, -1, 4]
    assert not bad.any()


def test_tree_flags_an_event_ending_after_its_parent_and_one_out_of_order():
    """An event spilling out of its parent, and one starting before the previous one, are flagged."""
    _, _, bad = _tree(np, np.array([0, 2, 20], dtype=np.int64), np.array([5, 7, 21], dtype=np.int64))
    assert bad.tolist() == [False, True, False]
    _, _, bad = _tree(np, np.array([0, 10, 5], dtype=np.int64), np.array([1, 11, 6], dtype=np.int64))
    assert not bad[0] and bad[2]


def test_top_level_cut_is_the_last_event_after_all_before_it_ended():
    """The cut falls on the last root; an event inside an earlier one is no root."""
    start = np.array([0, 1, 10, 11, 20, 22], dtype=np.int64)
    dur = np.array([5, 2, 5, 1, 10, 1], dtype=np.int64)
    assert top_level_cut(np, start, dur) == 4
    assert top_level_cut(np, start[:4], dur[:4]) == 2
    assert top_level_cut(np, start[:2], dur[:2]) == 0
    assert top_level_cut(np, start[:1], dur[:1]) == 0


def test_op_sums_add_by_id_and_drain_into_the_op_table():
    """Op time and counts summed per metadata id; ids beyond the table go straight to the op table."""
    infos = {
        1: (0, (("MatMul", "a"), "op"), 0),
        5: (0, (("Relu", "b"), "op"), 0),
        1 << 21: (0, (("Add", "c"), "op"), 0),
    }
    ops: dict = {}
    table = __import__("collections").defaultdict(lambda: [0, 0])
    sums = OpSums()
    sums.add(np, np.array([1, 5, 1], dtype=np.int64), np.array([3, 4, 5], dtype=np.int64), table, infos)
    sums.add(np, np.array([5], dtype=np.int64), np.array([10], dtype=np.int64), table, infos)
    sums.add(np, np.array([1 << 21], dtype=np.int64), np.array([7], dtype=np.int64), table, infos)
    assert dict(table) == {("Add", "c"): [7, 1]}
    sums.drain(np, table, infos)
    assert dict(table) == {("Add", "c"): [7, 1], ("MatMul", "a"): [8, 2], ("Relu", "b"): [14, 2]}
    sums.drain(np, table, infos)
    assert table[("MatMul", "a")] == [8, 2] and not ops


@pytest.mark.parametrize("batch", [1, 2, 3, 8192])
def test_compilations_begin_after_the_previous_one_ended_across_batches(batch, tmp_path, monkeypatch):
    """Three compilations on one thread, the last two outside any kernel: each begins with its first
    compile pass after the previous compilation ended, however the line is cut into batches."""
    from _xspace import build_space

    monkeypatch.setattr(scan, "BATCH_EVENTS", batch)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 40)
    space = build_space(
        {
            "tf_Compute/1": [
                ("StatefulPartitionedCall:StatefulPartitionedCall", 0, 100),
                ("CpuCompiler::RunHloPasses", 10, 10),
                ("CpuCompiler::RunBackend", 20, 10, {"name": "a_inference_f_1__.1"}),
                ("CpuCompiler::RunHloPasses", 110, 10),
                ("CpuCompiler::RunBackend", 120, 10, {"name": "a_inference_g_2__.2"}),
                ("CpuCompiler::RunHloPasses", 140, 10),
                ("CpuCompiler::RunHloPasses", 150, 5),
                ("CpuCompiler::RunBackend", 160, 10, {"name": "a_inference_h_3__.3"}),
            ]
        }
    )
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    table = analyze_trace(path).compile_table
    assert [row.program for row in table] == ["f", "g", "h"]
    # The line starts at 1000 ns; times in us.
    assert [round(row.start_s * 1e6 - 1, 6) for row in table] == [10, 110, 140]
    assert [round(row.compile_s * 1e6, 6) for row in table] == [20, 20, 25]
    assert table == analyze_xspace(load_xspace(path)).compile_table


# Damage the batched read never reaches on a line it gave up early; only the re-read meets it.
_LATE_DAMAGE = {
    # An event whose length runs past the line's end.
    "framing": b"\x22\x7f\x08\x01",
    # An event holding a field of wire type 7, which protobuf refuses.
    "event": pb_field(0x22, b"\x08\x01\x10\x05\x18\x03\x0f"),
    # The line's name (field 2), after its events, not UTF-8.
    "header": pb_field(0x12, b"\xff\xfe"),
}


@pytest.mark.parametrize("damage", sorted(_LATE_DAMAGE))
def test_damage_only_the_rescan_of_a_failed_line_meets_names_the_file(damage, tmp_path, monkeypatch):
    """A line whose events overlap without nesting is given up after its first batch and read again from
    its start, one event at a time: it reports what the parsed trace does (its 1 ps events too), and damage
    further on is a TraceParseError naming the file."""
    monkeypatch.setattr(scan, "BATCH_EVENTS", 2)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 40)
    pb = xplane_pb2()
    plane = pb.XPlane(id=1, name="/host:CPU")
    plane.event_metadata[1].name = "dense/MatMul:MatMul"
    line = pb.XLine(id=1, name="tf_Compute/1", timestamp_ns=1000)
    for k in range(200):
        # In order, most 150 ps long and the next starting 100 ps later; every tenth 1 ps long.
        line.events.add(metadata_id=1, offset_ps=k * 100, duration_ps=1 if k % 10 == 0 else 150)
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(pb_field(0x0A, plane.SerializeToString() + pb_field(0x1A, line.SerializeToString())))
    parsed = analyze_xspace(load_xspace(path), trace_path=str(path), host="t").to_dict()
    assert analyze_trace(path).to_dict() == parsed
    assert [op["count"] for op in parsed["top_non_xla_ops"]] == [200]
    damaged = line.SerializeToString() + _LATE_DAMAGE[damage]
    path.write_bytes(pb_field(0x0A, plane.SerializeToString() + pb_field(0x1A, damaged)))
    with pytest.raises(TraceParseError) as raised:
        analyze_trace(path)
    assert str(raised.value).startswith(f"{path} is not a valid XSpace trace (protobuf decode failed: ")


@pytest.mark.parametrize("name", ["tf_data_private_threadpool/1", "tf_Compute/1"])
def test_a_line_named_after_its_events_reports_what_the_parsed_trace_does(name, tmp_path, monkeypatch):
    """A line whose name (field 2) comes after its events - a `tf_data` thread's time is input pipeline
    time, another's op time - and whose events overlap: its figures are the parsed trace's."""
    monkeypatch.setattr(scan, "BATCH_EVENTS", 2)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 40)
    pb = xplane_pb2()
    plane = pb.XPlane(id=1, name="/host:CPU")
    plane.event_metadata[1].name = "dense/MatMul:MatMul"
    events = pb.XLine(id=1, timestamp_ns=1000)
    for k in range(50):
        events.events.add(metadata_id=1, offset_ps=k * 100, duration_ps=150)
    line_bytes = events.SerializeToString() + pb.XLine(name=name).SerializeToString()
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(pb_field(0x0A, plane.SerializeToString() + pb_field(0x1A, line_bytes)))
    parsed = analyze_xspace(load_xspace(path), trace_path=str(path), host="t").to_dict()
    assert load_xspace(path).planes[0].lines[0].name == name
    assert (parsed["input_pipeline_time_s"] > 0) == name.startswith("tf_data")
    assert analyze_trace(path).to_dict() == parsed


def test_ops_with_metadata_ids_beyond_the_dense_table_are_counted_and_timed(tmp_path):
    """Metadata ids from 1 << 21 up (past the id-indexed table, summed in a dict instead), beside small
    ones: each op's count and time, streamed as parsed."""
    pb = xplane_pb2()
    plane = pb.XPlane(id=1, name="/host:CPU")
    ids = {3: "dense/MatMul:MatMul", 1 << 21: "dense/BiasAdd:BiasAdd", (1 << 40) + 7: "relu/Relu:Relu"}
    for mid, name in ids.items():
        plane.event_metadata[mid].name = name
    line = plane.lines.add(id=1, name="tf_Compute/1", timestamp_ns=1000)
    for k in range(30):
        line.events.add(metadata_id=list(ids)[k % 3], offset_ps=k * 100, duration_ps=10 + k % 3)
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(pb.XSpace(planes=[plane]).SerializeToString())
    report = analyze_trace(path, top_k=10)
    assert report.to_dict() == analyze_xspace(load_xspace(path), trace_path=str(path), host="t").to_dict()
    assert sorted((op.op_name, op.count, round(op.self_time_s * 1e12)) for op in report.top_non_xla_ops) == [
        ("dense/BiasAdd", 10, 110),
        ("dense/MatMul", 10, 100),
        ("relu/Relu", 10, 120),
    ]


@pytest.mark.parametrize(
    ("offset", "duration"),
    [(-5_000, 300), ((1 << 61) + 5, 300), (1_000, (1 << 61) + 3), ((1 << 62) - 10, 20)],
)
def test_lines_with_times_out_of_the_usual_range_report_what_the_parsed_trace_does(
    offset, duration, tmp_path
):
    """A negative start, a start or a duration near the int64 range, beside an ordinary line in the same
    batch (whose lines are laid apart in time to keep them from nesting): the parsed trace's figures."""
    pb = xplane_pb2()
    plane = pb.XPlane(id=1, name="/host:CPU")
    plane.event_metadata[1].name = "dense/MatMul:MatMul"
    plane.event_metadata[2].name = "dense/Relu:Relu"
    odd = plane.lines.add(id=1, name="tf_Compute/1", timestamp_ns=1000)
    odd.events.add(metadata_id=1, offset_ps=offset, duration_ps=duration)
    odd.events.add(metadata_id=2, offset_ps=offset + 10, duration_ps=5)
    usual = plane.lines.add(id=2, name="tf_Compute/2", timestamp_ns=1000)
    for k in range(4):
        usual.events.add(metadata_id=2, offset_ps=k * 100, duration_ps=40)
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(pb.XSpace(planes=[plane]).SerializeToString())
    parsed = analyze_xspace(load_xspace(path), trace_path=str(path), host="t", top_k=100).to_dict()
    assert analyze_trace(path, top_k=100).to_dict() == parsed
    assert sorted((op["op_name"], op["count"]) for op in parsed["top_non_xla_ops"]) == [
        ("dense/MatMul", 1),
        ("dense/Relu", 5),
    ]


@pytest.mark.parametrize("batch", [1, 2, 3, 4, 5, 8192])
def test_compilations_after_a_stray_pass_begin_where_the_rule_says_across_batches(
    batch, tmp_path, monkeypatch
):
    """A pass before a kernel holding two compilations, then a compiling wrapper around a marker:
    each begins with the first pass after the later of the previous end and its kernel's start,
    whichever event a batch starts with."""
    from _xspace import build_space

    monkeypatch.setattr(scan, "BATCH_EVENTS", batch)
    monkeypatch.setattr(reader, "CHUNK_BYTES", 40)
    space = build_space(
        {
            "tf_Compute/1": [
                ("CpuCompiler::RunHloPasses", 0, 10),
                ("StatefulPartitionedCall:StatefulPartitionedCall", 20, 80),
                ("CpuCompiler::RunHloPasses", 25, 10),
                ("CpuCompiler::RunBackend", 40, 10, {"name": "a_inference_f_1__.1"}),
                ("CpuCompiler::RunHloPasses", 55, 5),
                ("CpuCompiler::RunBackend", 70, 10, {"name": "a_inference_g_2__.2"}),
                ("CpuCompiler::RunHloPasses", 102, 5),
                ("XlaCompilationCache::Compile", 110, 40),
                ("CpuCompiler::RunBackend", 130, 10, {"name": "a_inference_h_3__.3"}),
            ]
        }
    )
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    table = analyze_trace(path).compile_table
    assert [row.program for row in table] == ["f", "g", "h"]
    # The line starts at 1000 ns; times in us.
    assert [round(row.start_s * 1e6 - 1, 6) for row in table] == [25, 55, 102]
    # Compile time is the compile events' union from begin to marker end (the wrapper clipped at 140).
    assert [round(row.compile_s * 1e6, 6) for row in table] == [20, 15, 35]
    assert table == analyze_xspace(load_xspace(path)).compile_table


_FIGURES = ("xla_time_s", "non_xla_op_time_s", "compile_thread_time_s", "xla_executions")

# Nested lines the batched scan books (figures in us; a figure not named is 0).
_NESTED = {
    # A plain op in a kernel that compiled is compile time, the kernel first in its batch.
    "plain_op_in_a_compiling_kernel_that_starts_the_batch": (
        {
            "t": [
                ("b/Mean:Mean", 0, 90),
                ("CpuCompiler::RunHloPasses", 10, 20),
                ("dense/MatMul:MatMul", 40, 10),
            ]
        },
        {"compile_thread_time_s": 90},
    ),
    # The compiling kernel is the inner one: its op is compile time, the outer kernel's own 110 us an op.
    "compiling_kernel_inside_a_plain_one": (
        {
            "t": [
                ("a/Sum:Sum", 0, 200),
                ("b/Mean:Mean", 10, 90),
                ("CpuCompiler::RunHloPasses", 20, 20),
                ("dense/MatMul:MatMul", 50, 10),
            ]
        },
        {"non_xla_op_time_s": 110, "compile_thread_time_s": 90},
    ),
    # A py_function's eager call recorded no launch, but pool-thread spans ran inside it: one
    # launch, its XLA time the spans' extent (20 to 45 us); the kernel keeps its whole 100 us.
    "eager_call_inside_a_kernel_without_a_launch": (
        {
            "t": [("a/EagerPyFunc:EagerPyFunc", 0, 100), ("EagerLocalExecute: __inference_step_12", 10, 70)],
            "tf_numa_-1_Eigen/3": [("ThunkExecutor::Execute", 20, 10), ("ThunkExecutor::Execute", 40, 5)],
        },
        {"xla_time_s": 25, "non_xla_op_time_s": 100, "xla_executions": 1},
    ),
}


@pytest.mark.parametrize("batch", [1, 2, 8192])
@pytest.mark.parametrize("case", sorted(_NESTED))
def test_nested_kernels_are_booked_as_worked_out_by_hand(case, batch, tmp_path, monkeypatch):
    """Kernels in kernels and calls in kernels: each figure as worked out by hand, on both read paths."""
    from _xspace import build_space

    monkeypatch.setattr(scan, "BATCH_EVENTS", batch)
    lines, given = _NESTED[case]
    space = build_space(lines)
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    expected = {
        name: given.get(name, 0)
        if name == "xla_executions"
        else pytest.approx(given.get(name, 0) * 1e-6, rel=1e-12)
        for name in _FIGURES
    }
    for report in (analyze_trace(path), analyze_xspace(space)):
        assert {name: getattr(report, name) for name in _FIGURES} == expected


@pytest.mark.parametrize("batch", [1, 2, 3, 8192])
def test_a_pass_starting_where_the_previous_compilation_ended_begins_the_next(batch, tmp_path, monkeypatch):
    """A compile pass starting exactly at the previous marker's end opens the next compilation,
    the next marker in this batch or a later one."""
    from _xspace import build_space

    monkeypatch.setattr(scan, "BATCH_EVENTS", batch)
    space = build_space(
        {
            "tf_Compute/1": [
                ("CpuCompiler::RunHloPasses", 10, 10),
                ("CpuCompiler::RunBackend", 20, 10, {"name": "a_inference_f_1__.1"}),
                ("CpuCompiler::RunHloPasses", 30, 10),
                ("CpuCompiler::RunBackend", 50, 10, {"name": "a_inference_g_2__.2"}),
            ]
        }
    )
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    table = analyze_trace(path).compile_table
    # The line starts at 1000 ns; times in us.
    assert [
        (row.program, round(row.start_s * 1e6 - 1, 6), round(row.compile_s * 1e6, 6)) for row in table
    ] == [
        ("f", 10, 20),
        ("g", 30, 20),
    ]
    assert table == analyze_xspace(space).compile_table


@pytest.mark.parametrize(
    "depth",
    [
        np.random.default_rng(0).integers(0, 4, 5000),
        np.random.default_rng(1).integers(-3, 40000, 5000),
        np.array([40000, 0, 40000, 1, 32768, -40000, -32768, 2, 32767, 0]),
        np.array([3, -40000, 0, 1, -40000, 2]),
        np.array([32768, 0, -32768, 1, 32767, 0]),
    ],
    ids=["small", "past_int16", "edges", "below_int16", "one_past_int16"],
)
def test_by_depth_is_the_stable_order_by_depth_for_any_depths(depth):
    """Events ordered by depth, ties by position - what the parent search needs - for depths in
    int16's range (the radix sort) and out of it, at its exact bounds."""
    from keras_xla_guard.trace._columns import _by_depth

    assert _by_depth(np, depth).tolist() == sorted(range(len(depth)), key=lambda i: int(depth[i]))


def test_a_line_with_no_name_and_no_timestamp_is_read_as_the_parsed_trace_reads_it(tmp_path):
    """Proto3 leaves an empty name and a zero timestamp out of the file: the streamed line still starts
    at 0 with no name (no absorbing category), as the parsed trace has it."""
    from _xspace import build_space

    space = build_space(
        {
            "": [
                ("dense/MatMul:MatMul", 0, 10),
                ("CpuCompiler::RunHloPasses", 20, 10),
                ("CpuCompiler::RunBackend", 30, 10, {"name": "a_inference_f_1__.1"}),
                ("dense/Relu:Relu", 50, 5),
            ]
        }
    )
    space.planes[0].lines[0].timestamp_ns = 0
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    streamed, parsed = analyze_trace(path), analyze_xspace(load_xspace(path))
    assert streamed.non_xla_op_time_s == parsed.non_xla_op_time_s == 15_000_000 * 1e-12
    assert streamed.xla_time_s == parsed.xla_time_s == 0.0
    assert [(row.program, row.start_s) for row in streamed.compile_table] == [("f", 20_000_000 * 1e-12)]
    assert streamed.compile_table == parsed.compile_table
