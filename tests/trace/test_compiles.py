"""The compile table's pure parts: compile episodes, program names, signature attribution.

The real-trace checks (5 compilations of a bucketed fit, exact steps and
signatures, wall times adding up to `compile_wall_s`) are in
`tests/test_warmup.py`; these synthetic traces pin the edge cases.
"""

from __future__ import annotations

import pytest
from _xspace import build_space

from keras_xla_guard.trace.compiles import (
    CompileFacts,
    CompileRecord,
    attribute_compiles,
    compile_records,
    program_of,
)
from keras_xla_guard.trace.report import CoverageReport


def _table(space, tmp_path):
    """The compile table of `space` read three ways - parsed (`compile_records`), scanned
    (`analyze_xspace`) and streamed from a file (`analyze_trace`) - which must agree."""
    from keras_xla_guard import analyze_trace
    from keras_xla_guard.trace.analysis import analyze_xspace

    rows = compile_records(space)
    assert analyze_xspace(space).compile_table == rows
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert analyze_trace(path).compile_table == rows
    return rows


def _kernel(start, dur, step_module="a_inference_one_step_on_data_805__.8"):
    """A jit step kernel at `start` (us) that compiles for 60 us, then runs."""
    return [
        ("ExecutorState::ProcessAsync::Start", start, dur, {"kernel_type": "StatefulPartitionedCall"}),
        ("HLO passes through layout assignment", start + 10, 10),
        ("CpuCompiler::RunBackend", start + 25, 45, {"name": step_module}),
        ("CpuExecutable::ExecuteAsyncOnStream", start + 75, 5),
    ]


def test_one_record_per_run_backend_from_first_pass_to_backend_end(tmp_path):
    """A compilation spans its first HLO pass to RunBackend's end, minus gaps no thread compiled in."""
    space = build_space(
        {
            "tf_Compute/1": _kernel(0, 100) + _kernel(200, 100),
            "python": [("train", 0, 150, {"step_num": 3}), ("train", 190, 150, {"step_num": 4})],
        }
    )
    rows = _table(space, tmp_path)
    assert [r.program for r in rows] == ["one_step_on_data", "one_step_on_data"]
    # 10 us of passes + 45 us backend; the 5 us gap between them is not compile time.
    assert [r.compile_s for r in rows] == [pytest.approx(55e-6), pytest.approx(55e-6)]
    assert [r.step for r in rows] == [3, 4]
    assert rows[1].start_s > rows[0].start_s


def test_compile_work_on_other_threads_counts_once(tmp_path):
    """Codegen threads working while the backend runs add nothing; work in its gaps adds its length."""
    space = build_space(
        {
            "tf_Compute/1": _kernel(0, 100),
            "tf_xla-cpu-codegen/1": [("FusionCompiler::Compile", 30, 20), ("FusionCompiler::Compile", 21, 3)],
        }
    )
    (row,) = _table(space, tmp_path)
    assert row.compile_s == pytest.approx(58e-6)
    assert row.step is None


def test_trace_without_compilation_has_an_empty_table():
    """No RunBackend event: no rows."""
    assert (
        compile_records(build_space({"tf_Compute/1": [("CpuExecutable::ExecuteAsyncOnStream", 0, 5)]})) == ()
    )


@pytest.mark.parametrize(
    "module, program",
    [
        ("a_inference_one_step_on_data_805__.8", "one_step_on_data"),
        ("a_inference_train_step_12__.3", "train_step"),
        ("cluster_0__XlaCompiledKernel_true__XlaNumConstantArgs_0_.7", "cluster_0"),
        ("jit_f.4", "jit_f"),
    ],
)
def test_program_of_names_the_function_or_cluster(module, program):
    """HLO module names map to the TF function or cluster they came from."""
    assert program_of(module) == program


def test_attribution_matches_steps_then_order_and_adds_cache_hits():
    """Rows take the signature first seen at their step; new signatures left over are cache hits."""
    table = (CompileRecord("f", "m", 0.1, 0.5, step=4), CompileRecord("f", "m", 0.2, 0.5, step=None))
    new = [("A", 0), ("B", 4), ("C", 6), ("D", 9)]
    rows, hits = attribute_compiles(table, new, steps=(0, 8))
    assert hits == 1
    assert [(r.signature, r.step, r.cache_hit) for r in rows] == [
        ("A", 0, False),
        ("B", 4, False),
        ("C", 6, True),
    ]


def test_attribution_without_steps_pairs_in_order():
    """Without step markers or steps, compilations pair with new signatures in order."""
    table = (CompileRecord("f", "m", 0.1, 0.5), CompileRecord("f", "m", 0.2, 0.5))
    rows, hits = attribute_compiles(table, [("A", None), ("B", None)], steps=None)
    assert hits == 0
    assert [r.signature for r in rows] == ["A", "B"]


def test_report_round_trips_its_compile_table():
    """to_dict/from_dict keep the compile table and cache figures."""
    report = CoverageReport(
        compilations=1,
        compile_table=(
            CompileRecord("f", "m", 0.1, 0.5, False, 2, "x: f32[8]"),
            CompileRecord("", cache_hit=True, step=5),
        ),
        cache_hits=1,
        persistent_cache="/tmp/c",
    )
    assert CoverageReport.from_dict(report.to_dict()) == report
    with pytest.raises(ValueError, match="compile_table"):
        CoverageReport.from_dict({"compile_table": [{"nope": 1}]})


def test_attribution_keeps_a_rows_step_leaves_out_the_window_end_and_puts_unknown_steps_first():
    """A step-5 signature is outside window (0, 5); a row keeps its own step; rows and hits without a step sort first."""
    table = (
        CompileRecord("f", "m1", 0.1, 0.5, step=5),
        CompileRecord("g", "m2", 0.2, 0.5, step=None),
        CompileRecord("h", "m3", 0.3, 0.5, step=0),
    )
    new = [("A", 0), ("B", 4), ("C", 5), ("D", None), ("E", None)]
    rows, hits = attribute_compiles(table, new, steps=(0, 5))
    assert hits == 1
    assert rows == (
        CompileRecord("g", "m2", 0.2, 0.5, step=None, signature="D"),
        CompileRecord("", cache_hit=True, step=None, signature="E"),
        CompileRecord("h", "m3", 0.3, 0.5, step=0, signature="A"),
        CompileRecord("f", "m1", 0.1, 0.5, step=5, signature="B"),
    )


_MODULE = "a_inference_one_step_on_data_805__.8"
_KERNEL = ("ExecutorState::ProcessAsync::Start", {"kernel_type": "StatefulPartitionedCall"})


def test_a_compilation_starts_no_earlier_than_the_kernel_right_around_it(tmp_path):
    """An earlier pass on the thread, outside the kernel the backend ran in, is not this compilation's."""
    space = build_space(
        {
            "tf_Compute/1": [
                ("HLO passes through layout assignment", 0, 10),
                (_KERNEL[0], 20, 80, _KERNEL[1]),
                ("CpuCompiler::RunBackend", 30, 30, {"name": _MODULE}),
            ]
        }
    )
    (row,) = _table(space, tmp_path)
    assert row.compile_s == pytest.approx(30e-6, rel=1e-9)


def test_a_kernel_starting_with_the_backend_still_holds_it(tmp_path):
    """Kernel and RunBackend starting together: the kernel (the longer) is around it, the earlier pass left out."""
    space = build_space(
        {
            "tf_Compute/1": [
                ("HLO passes through layout assignment", 0, 10),
                ("CpuCompiler::RunBackend", 20, 40, {"name": _MODULE}),
                (_KERNEL[0], 20, 80, _KERNEL[1]),
            ]
        }
    )
    (row,) = _table(space, tmp_path)
    assert row.compile_s == pytest.approx(40e-6, rel=1e-9)


def test_without_name_or_step_num_stats_a_compilation_has_no_module_and_no_step(tmp_path):
    """A plane with neither a `name` nor a `step_num` stat: no module and no step, though stat id 1
    (`kernel_type` here, a string on RunBackend and an integer on `train`) is on both events."""
    from keras_xla_guard import analyze_trace
    from keras_xla_guard.trace.analysis import analyze_xspace

    space = build_space(
        {
            "tf_Compute/1": [
                ("ExecutorState::ProcessAsync::Start", 0, 100, {"kernel_type": 7}),
                ("HLO passes through layout assignment", 10, 10),
                ("CpuCompiler::RunBackend", 25, 45, {"kernel_type": "a_inference_one_step_on_data_805__.8"}),
                ("CpuExecutable::ExecuteAsyncOnStream", 75, 5),
            ],
            "python": [("train", 0, 150, {"kernel_type": 3})],
        }
    )
    assert space.planes[0].stat_metadata[1].name == "kernel_type"
    want = (
        CompileRecord(program="?", module="", start_s=11e-6, compile_s=55e-6, cache_hit=False, step=None),
    )
    assert compile_records(space) == want
    assert analyze_xspace(space).compile_table == want
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert analyze_trace(path).compile_table == want


def test_a_one_picosecond_backend_run_is_one_compilation(tmp_path):
    """RunBackend lasting 1 ps (the shortest the profiler writes) is still a compilation, of 1 ps."""
    from keras_xla_guard import analyze_trace
    from keras_xla_guard.trace.analysis import analyze_xspace

    module = "a_inference_one_step_on_data_805__.8"
    space = build_space(
        {
            "tf_Compute/1": [
                ("ExecutorState::ProcessAsync::Start", 0, 100, {"kernel_type": "StatefulPartitionedCall"}),
                ("CpuCompiler::RunBackend", 25, 1e-6, {"name": module}),
                ("CpuExecutable::ExecuteAsyncOnStream", 75, 5),
            ]
        }
    )
    assert space.planes[0].lines[0].events[1].duration_ps == 1
    # The line starts at 1 us (build_space's timestamp_ns=1000).
    want = (
        CompileRecord(
            program="one_step_on_data",
            module=module,
            start_s=26e-6,
            compile_s=1e-12,
            cache_hit=False,
            step=None,
        ),
    )
    assert compile_records(space) == want
    assert analyze_xspace(space).compile_table == want
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    assert analyze_trace(path).compile_table == want


def test_kernels_that_compile_then_run_count_every_run_and_all_compile_time(tmp_path):
    """Two runs, then two kernels that compile (each with a plain op nested, TF's constant folding) and
    run: four executions, and both compilations' time with their nested ops - parsed and streamed alike."""
    from keras_xla_guard import analyze_trace
    from keras_xla_guard.trace.analysis import analyze_xspace

    def compiling(start):
        return [
            (_KERNEL[0], start, 200, _KERNEL[1]),
            ("dense/MatMul:MatMul", start + 2, 6),
            ("HLO passes through layout assignment", start + 10, 10),
            ("CpuCompiler::RunBackend", start + 25, 45, {"name": _MODULE}),
            ("CpuExecutable::ExecuteAsyncOnStream", start + 80, 20),
        ]

    def running(start):
        return [(_KERNEL[0], start, 100, _KERNEL[1]), ("CpuExecutable::ExecuteAsyncOnStream", start + 10, 20)]

    space = build_space({"tf_Compute/1": running(0) + running(200) + compiling(400) + compiling(700)})
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    parsed = analyze_xspace(space, trace_path=str(path), host="t")
    assert analyze_trace(path).to_dict() == parsed.to_dict()
    assert parsed.xla_executions == 4
    # A compiling kernel's time is compile time, all but its XLA run: 200 - 20 us, twice.
    assert parsed.compile_thread_time_s == pytest.approx(2 * (200 - 20) * 1e-6, rel=1e-9)


@pytest.mark.parametrize(
    ("value", "module", "program"),
    [
        ("inline", _MODULE, "one_step_on_data"),
        ("ref", _MODULE, "one_step_on_data"),
        ("dangling_ref", "", "?"),
        ("none", "", "?"),
    ],
)
def test_the_module_name_is_read_inline_or_through_a_reference(value, module, program, tmp_path):
    """RunBackend's `name` stat as a string, as a reference to a stat metadata name (how the profiler
    stores repeated strings), as a reference to nothing, or with no value at all."""
    space = build_space(
        {
            "tf_Compute/1": [
                (_KERNEL[0], 0, 100, _KERNEL[1]),
                ("CpuCompiler::RunBackend", 25, 45, {"name": _MODULE}),
                ("CpuExecutable::ExecuteAsyncOnStream", 75, 5),
            ]
        }
    )
    plane = space.planes[0]
    [stat] = plane.lines[0].events[1].stats
    if value != "inline":
        stat.ClearField("str_value")
    if value in ("ref", "dangling_ref"):
        stat.ref_value = 99
        if value == "ref":
            plane.stat_metadata[99].id = 99
            plane.stat_metadata[99].name = _MODULE
    [row] = _table(space, tmp_path)
    assert (row.module, row.program) == (module, program)


def _compile_at(start, module=_MODULE):
    """A kernel at `start` (us) whose compilation begins at `start + 10` and ends at `start + 70`."""
    return [
        (_KERNEL[0], start, 100, _KERNEL[1]),
        ("HLO passes through layout assignment", start + 10, 10),
        ("CpuCompiler::RunBackend", start + 25, 45, {"name": module}),
    ]


@pytest.mark.parametrize("first", ["/host:metadata", "/device:GPU:0", "/host:quiet"])
def test_planes_before_the_host_plane_do_not_end_the_search(first, tmp_path):
    """A metadata, device or host plane first (none compiles): the host plane's compilations are still found."""
    space = build_space({}, plane_name=first, extra_planes={"/host:CPU": {"tf_Compute/1": _compile_at(0)}})
    assert [p.name for p in space.planes] == [first, "/host:CPU"]
    assert [row.module for row in _table(space, tmp_path)] == [_MODULE]


def test_a_compilation_belongs_to_the_step_whose_start_or_end_it_begins_at(tmp_path):
    """Step bounds are inclusive: a compilation beginning at a step's first or last instant is that step's."""
    space = build_space(
        {
            "tf_Compute/1": _compile_at(400) + _compile_at(700),
            "python": [
                ("train", 410, 40, {"_r": 1, "step_num": 5}),
                ("train", 600, 110, {"_r": 1, "step_num": 6}),
            ],
        }
    )
    rows = _table(space, tmp_path)
    assert [row.step for row in rows] == [5, 6]
    assert [row.start_s for row in rows] == pytest.approx([411e-6, 711e-6], rel=1e-12)


def test_programs_compiled_at_the_same_time_on_two_threads_keep_their_line_order(tmp_path):
    """Two compilations with the same bounds on two threads: two rows, in line order, the shared time once."""
    other = "a_inference_test_step_9__.3"
    space = build_space({"tf_Compute/1": _compile_at(0), "tf_Compute/2": _compile_at(0, other)})
    rows = _table(space, tmp_path)
    assert [(row.module, row.start_s) for row in rows] == [(_MODULE, 11e-6), (other, 11e-6)]
    assert [row.compile_s for row in rows] == [pytest.approx(55e-6, rel=1e-9), 0.0]
    from keras_xla_guard.trace.analysis import analyze_xspace

    # The report's compile time is the rows' sum: the shared time once.
    assert analyze_xspace(space).compile_time_s == rows[0].compile_s


def test_compile_records_reads_only_the_lines_asked_for_and_takes_known_facts_as_given():
    """`lines` limits the lines read (a plane not named: none); `known` lines are taken, not read again."""
    space = build_space(
        {
            "tf_Compute/1": _compile_at(0, "a_inference_f_1__.1"),
            "tf_Compute/2": _compile_at(200, "a_inference_g_2__.2"),
        }
    )
    assert [row.program for row in compile_records(space)] == ["f", "g"]
    assert [row.program for row in compile_records(space, lines={"/host:CPU": {1}})] == ["g"]
    assert compile_records(space, lines={"/host:other": {0, 1}}) == ()
    # Line 0's facts as if an analysis found them: a compilation the line does not hold (the
    # line starts at 1000 ns: 1_000_000 ps on the trace's clock).
    fake = CompileFacts(
        spans=[(1_000_000, 3_000_000)], steps=[], found=[(1_000_000, 3_000_000, "a_inference_h_3__.3")]
    )
    rows = compile_records(space, lines={"/host:CPU": {0, 1}}, known={"/host:CPU": {0: fake}})
    assert [(row.program, row.start_s, row.compile_s) for row in rows] == [
        ("h", pytest.approx(1e-6, rel=1e-12), pytest.approx(2e-6, rel=1e-12)),
        ("g", pytest.approx(211e-6, rel=1e-12), pytest.approx(55e-6, rel=1e-12)),
    ]


def test_rows_are_in_the_order_compilations_began_whatever_their_lines_order(tmp_path):
    """Thread 2 began compiling 1 us before thread 1, the two overlapping: thread 2's row first."""
    first, second = "a_inference_first_1__.1", "a_inference_second_2__.2"
    space = build_space({"tf_Compute/1": _compile_at(1, second), "tf_Compute/2": _compile_at(0, first)})
    rows = _table(space, tmp_path)
    assert [(row.module, row.start_s) for row in rows] == [
        (first, pytest.approx(11e-6, rel=1e-12)),
        (second, pytest.approx(12e-6, rel=1e-12)),
    ]
