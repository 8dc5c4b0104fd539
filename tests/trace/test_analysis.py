"""Tests for keras_xla_guard.trace.analysis on real and synthetic traces."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from _oracle import RAW_REL, raw_figures, span_seconds
from _xspace import build_space

from keras_xla_guard import (
    CoverageReport,
    OpStat,
    ProgramStat,
    TraceNotFoundError,
    analyze_trace,
    analyze_xspace,
    combine_reports,
)
from keras_xla_guard.trace.xplane import find_trace_files, load_xspace

# --------------------------------------------------------------- real traces


@pytest.mark.slow
def test_jit_compile_fit_is_almost_all_xla(jit_fit):
    """A jit_compile=True model's XLA time, launches and share are its raw launch events' sums."""
    report = jit_fit.callback.reports[1]
    assert report.status == "ok", report.reason
    assert (report.xla_time_s, report.xla_executions, report.xla_time_fraction) == pytest.approx(
        raw_figures(report.trace_path, report.non_xla_op_time_s), rel=RAW_REL
    )
    assert report.xla_time_s > 0
    # make_dataset() gives 512 / 32 = 16 batches; the default skip_steps=2
    # leaves 14 profiled steps, each one run of the compiled step.
    assert report.steps_profiled == 14
    assert report.xla_executions == 14
    # The step was compiled in epoch 0, outside the window.
    assert report.compilations == 0


@pytest.mark.slow
def test_plain_fit_has_no_xla_and_lists_model_kernels(plain_fit):
    """jit_compile=False gives fraction 0 and names the matmul/add kernels."""
    report = plain_fit.callback.reports[1]
    assert report.xla_time_fraction == 0.0
    assert report.xla_executions == 0
    assert report.non_xla_op_time_s > 0
    types = {op.op_type for op in report.top_non_xla_ops}
    assert types & {"MatMul", "_MklMatMul", "_MklNativeFusedMatMul", "_FusedMatMul"}
    assert types & {"AddV2", "Add", "BiasAdd", "BiasAddGrad", "_MklNativeFusedMatMul"}
    assert len(report.top_non_xla_ops) == 10
    times = [op.self_time_s for op in report.top_non_xla_ops]
    assert times == sorted(times, reverse=True)


@pytest.mark.slow
def test_analyze_trace_of_log_dir_matches_callback_report(jit_fit):
    """analyze_trace(log_dir) reads the newest run and agrees with the callback."""
    report = analyze_trace(jit_fit.log_dir)
    cb_report = jit_fit.callback.reports[1]
    assert report.trace_paths == cb_report.trace_paths
    assert report.xla_time_s == pytest.approx(cb_report.xla_time_s)
    assert report.epoch is None


@pytest.mark.slow
def test_analyze_trace_accepts_a_file_path(plain_fit):
    """A path to one .xplane.pb file is analyzed as that file."""
    path = plain_fit.callback.reports[1].trace_path
    assert path is not None and path.endswith(".xplane.pb")
    report = analyze_trace(path)
    assert report.trace_paths == (path,)
    assert report.hosts and report.hosts[0]


@pytest.mark.slow
def test_top_op_self_times_agree_with_xprof(plain_fit):
    """Per-op self times agree with xprof's framework_op_stats within 5%."""
    from xprof.convert import raw_to_tool_data

    report = plain_fit.callback.reports[1]
    path = report.trace_path
    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "framework_op_stats", {})
    table = json.loads(data)[0]
    cols = [c["id"] for c in table["cols"]]
    xprof = {}
    for row in table["rows"]:
        rec = dict(zip(cols, [c["v"] for c in row["c"]]))
        xprof[(rec["type"], rec["operation"])] = rec
    compared = 0
    for op in report.top_non_xla_ops[:5]:
        rec = xprof[(op.op_type, op.op_name)]
        assert op.self_time_s * 1e6 == pytest.approx(rec["total_self_time"], rel=0.05)
        assert op.count == rec["occurrences"]
        compared += 1
    assert compared == 5


@pytest.mark.slow
def test_compilation_inside_window_is_counted(tmp_path):
    """Profiling the first epoch from step 0 counts the one XLA compile."""
    from _helpers import fit_with_guard

    fit = fit_with_guard(True, tmp_path, epochs=1, profile_epochs=0, skip_steps=0)
    report = fit.callback.reports[0]
    # One batch shape (512 rows in batches of 32): one compile; skip_steps=0
    # and 16 batches: 16 profiled steps, each one run of the executable.
    assert report.compilations == 1
    assert (report.steps_profiled, report.xla_executions) == (16, 16)
    # Compile time holds the backend compile span read from the raw proto
    # (not a wall-clock threshold, which a faster machine could undercut).
    assert report.compile_time_s >= span_seconds(report.trace_path, "CpuCompiler::RunBackend") > 0
    assert report.compiled_modules and "one_step_on_data" in report.compiled_modules[0]
    # The launch that compiled counts only its program run as XLA time.
    assert (report.xla_time_s, report.xla_executions, report.xla_time_fraction) == pytest.approx(
        raw_figures(report.trace_path, report.non_xla_op_time_s), rel=RAW_REL
    )


# A real TF 2.20 trace (Keras 3.10, `jit_compile=True`, 16 steps of
# `make_dataset()`, three copies of the run competing for the two cores) in
# which TensorFlow dropped the kernel events around one step's program run
# and kept the run's own `ThunkExecutor::Execute`.
_ASYNC_LAUNCH = Path(__file__).parent / "data" / "tf220_async_launch.xplane.pb.gz"


def _async_launch_space():
    import gzip

    from keras_xla_guard.trace.xplane import xplane_pb2

    return xplane_pb2().XSpace.FromString(gzip.decompress(_ASYNC_LAUNCH.read_bytes()))


def _loose_thunks(space):
    """(line, event) of each ThunkExecutor::Execute outside every async kernel on its line."""
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    name = {i: m.name for i, m in plane.event_metadata.items()}
    loose = []
    for line in plane.lines:
        kernels = [
            (e.offset_ps, e.offset_ps + e.duration_ps)
            for e in line.events
            if name[e.metadata_id] == "ExecutorState::ProcessAsync::Start"
        ]
        for e in line.events:
            if name[e.metadata_id] == "ThunkExecutor::Execute" and not any(
                s <= e.offset_ps and e.offset_ps + e.duration_ps <= t for s, t in kernels
            ):
                loose.append((line, e))
    return plane, name, loose


def test_tf220_trace_has_one_step_run_outside_its_kernel():
    """The kept TF 2.20 trace: 16 step calls, 16 program runs, one with no kernel around it."""
    plane, name, loose = _loose_thunks(_async_launch_space())
    events = [(line.name, name[e.metadata_id]) for line in plane.lines for e in line.events]
    calls = [
        n
        for line_name, n in events
        if line_name == "python" and n.startswith("EagerLocalExecute: __inference_train_function")
    ]
    assert len(calls) == 16
    assert sum(n == "ThunkExecutor::Execute" for _, n in events) == 16
    assert "CpuExecutable::ExecuteAsyncOnStream" not in {n for _, n in events}
    assert len(loose) == 1


def test_step_run_on_a_pool_thread_counts_once_with_its_time(tmp_path):
    """A step run whose kernel events TF dropped is one launch, and its time is XLA time."""
    import gzip

    space = _async_launch_space()
    path = tmp_path / "async.xplane.pb"
    path.write_bytes(gzip.decompress(_ASYNC_LAUNCH.read_bytes()))
    streamed = analyze_trace(path)
    parsed = analyze_xspace(space)
    assert streamed.xla_executions == parsed.xla_executions == 16
    assert streamed.xla_time_s == parsed.xla_time_s
    _, _, [(line, thunk)] = _loose_thunks(space)
    line.events.remove(thunk)
    without = analyze_xspace(space)
    assert without.xla_executions == 15
    assert parsed.xla_time_s - without.xla_time_s == pytest.approx(thunk.duration_ps * 1e-12, rel=1e-9)


# A real TF 2.20 trace of a wide jit model (6 x Dense(512), batch 256, steps
# 2..11 of `tests/test_callback.py`'s wide-model test, five copies sharing
# two cores), whose program XLA splits over pool threads. TensorFlow dropped
# the last step's kernel events; its main and split ThunkExecutor spans stayed.
_LOST_SPLIT_LAUNCH = Path(__file__).parent / "data" / "tf220_lost_split_launch.xplane.pb.gz"


def test_tf220_split_trace_lost_one_steps_kernel_but_kept_its_runs(tmp_path):
    """10 step calls, 9 launching kernels, hundreds of split spans: 10 launches, streamed and parsed."""
    import gzip

    from keras_xla_guard.trace.xplane import xplane_pb2

    data = gzip.decompress(_LOST_SPLIT_LAUNCH.read_bytes())
    space = xplane_pb2().XSpace.FromString(data)
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    name = {i: m.name for i, m in plane.event_metadata.items()}
    events = [(line.name, name[e.metadata_id], e) for line in plane.lines for e in line.events]
    calls = [n for line_name, n, _ in events if n.startswith("EagerLocalExecute: __inference_train_function")]
    kernel_type = next(i for i, m in plane.stat_metadata.items() if m.name == "kernel_type")
    launching = [
        e
        for _, n, e in events
        if n == "ExecutorState::ProcessAsync::Start"
        and any(
            st.metadata_id == kernel_type
            and plane.stat_metadata[st.ref_value].name == "StatefulPartitionedCall"
            for st in e.stats
        )
    ]
    thunks = [n for _, n, _ in events if n == "ThunkExecutor::Execute"]
    assert (len(calls), len(launching)) == (10, 9)
    assert len(thunks) > 100
    path = tmp_path / "split.xplane.pb"
    path.write_bytes(data)
    assert analyze_trace(path).xla_executions == analyze_xspace(space).xla_executions == 10


# ----------------------------------------------------- auto-clustering on CPU

_AUTOCLUSTER = """
import json, os, tempfile
import tensorflow as tf
tf.config.optimizer.set_jit(True)
import sys; sys.path.insert(0, "tests")
from _helpers import fit_with_guard
from keras_xla_guard import analyze_trace, analyze_xspace
from keras_xla_guard.trace.xplane import load_xspace
fit = fit_with_guard("auto", tempfile.mkdtemp(), epochs=2, profile_epochs=1)
r = fit.callback.reports[1]
# The scan in columns (a file) against the scan one event at a time (a parsed XSpace).
(path,) = r.trace_paths
same = analyze_trace(path, top_k=1000) == analyze_xspace(
    load_xspace(path), trace_path=path, host=analyze_trace(path).hosts[0], top_k=1000
)
print(json.dumps({"status": r.status, "fraction": r.xla_time_fraction,
                  "top": [o.op_type for o in r.top_non_xla_ops],
                  "jit": tf.config.optimizer.get_jit(), "same": same}))
"""


@pytest.mark.slow
def test_autoclustering_with_cpu_global_jit_runs_under_xla():
    """set_jit(True) plus TF_XLA_FLAGS=--tf_xla_cpu_global_jit at import clusters ops; the report of
    the scan in columns equals the one of the scan one event at a time."""
    from _helpers import run_python

    out = run_python(_AUTOCLUSTER, env={"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit"})
    assert out["status"] == "ok"
    assert out["fraction"] > 0.5
    assert out["same"] is True


@pytest.mark.slow
def test_set_jit_without_cpu_flag_runs_nothing_under_xla():
    """On CPU, set_jit(True) alone leaves every op a plain kernel (fraction 0)."""
    from _helpers import run_python

    out = run_python(_AUTOCLUSTER, env={"TF_XLA_FLAGS": ""})
    assert out["jit"] == "autoclustering"
    assert out["status"] == "ok"
    assert out["fraction"] == 0.0
    assert out["top"]


# ------------------------------------------------------ synthetic edge cases


def test_kernel_containing_executable_is_an_xla_launch():
    """A kernel that directly contains an executable span counts as XLA, with its launch."""
    space = build_space(
        {
            "tf_Compute/1": [
                (
                    "ExecutorState::ProcessAsync::Start",
                    0,
                    100,
                    {"name": "StatefulPartitionedCall", "kernel_type": "StatefulPartitionedCall"},
                ),
                ("CpuExecutable::ExecuteAsyncOnStream", 10, 80),
                ("fusion.1", 20, 30, {"hlo_module": "m", "hlo_op": "fusion.1"}),
                ("dense/MatMul:MatMul", 200, 50),
            ]
        }
    )
    r = analyze_xspace(space)
    assert r.xla_time_s == pytest.approx(100e-6)
    assert r.non_xla_op_time_s == pytest.approx(50e-6)
    assert r.xla_executions == 1
    assert r.xla_time_fraction == pytest.approx(100 / 150)
    assert [(o.op_type, o.op_name, o.count) for o in r.top_non_xla_ops] == [("MatMul", "dense/MatMul", 1)]


def test_autocluster_ops_are_classified_by_type():
    """_XlaRun is XLA, a non-compiling _XlaCompile is XLA overhead, _XlaMerge a plain op."""
    space = build_space(
        {
            "tf_Compute/1": [
                ("cluster_0/xla_compile:_XlaCompile", 0, 10),
                ("cluster_0/xla_run:_XlaRun", 20, 100),
                ("CpuExecutable::ExecuteAsyncOnStream", 30, 80),
                ("cluster_0/merge:_XlaMerge", 130, 5),
            ]
        }
    )
    r = analyze_xspace(space)
    assert r.xla_time_s == pytest.approx(110e-6)
    assert r.non_xla_op_time_s == pytest.approx(5e-6)
    assert r.xla_executions == 1


def test_compile_inside_launch_is_compile_time_and_counted():
    """RunBackend counts one compilation; the compiling kernel's time is compile time."""
    space = build_space(
        {
            "tf_Compute/1": [
                (
                    "ExecutorState::ProcessAsync::Start",
                    0,
                    1000,
                    {"name": "StatefulPartitionedCall", "kernel_type": "StatefulPartitionedCall"},
                ),
                ("const_fold/Shape:Shape", 10, 20),
                ("HLO passes through layout assignment", 100, 100),
                ("CpuCompiler::RunBackend", 300, 500, {"name": "a_inference_step_1__.5"}),
                ("CpuExecutable::ExecuteAsyncOnStream", 900, 90),
            ]
        }
    )
    r = analyze_xspace(space)
    assert r.compilations == 1
    assert r.compiled_modules == ("a_inference_step_1__.5",)
    # Thread time: the kernel's 1000 us but the 90 us launch. Wall-clock: the
    # passes' 100 us and the backend's 500 us, the compile table's one row.
    assert r.compile_thread_time_s == pytest.approx(910e-6)
    assert r.compile_time_s == pytest.approx(600e-6) == sum(row.compile_s for row in r.compile_table)
    assert r.xla_time_s == pytest.approx(90e-6)
    assert r.non_xla_op_time_s == 0
    assert r.xla_executions == 1


def test_input_pipeline_and_eager_time_are_separate_from_ops():
    """tf.data threads, iterator kernels and eager dispatch are not non-XLA op time."""
    space = build_space(
        {
            "python": [("EagerLocalExecute: __inference_f", 0, 100)],
            "tf_data_iterator_resource/1": [("PrefetchProduce", 0, 40), ("map/Cast:Cast", 5, 10)],
            "tf_Compute/1": [
                ("IteratorGetNext:IteratorGetNext", 0, 30),
                ("Iterator::Root", 5, 20),
                ("dense/Relu:Relu", 50, 7),
            ],
        }
    )
    r = analyze_xspace(space)
    assert r.input_pipeline_time_s == pytest.approx(70e-6)
    assert r.eager_overhead_s == pytest.approx(100e-6)
    assert r.non_xla_op_time_s == pytest.approx(7e-6)
    assert [o.op_type for o in r.top_non_xla_ops] == ["Relu"]


def test_worker_thread_xla_not_double_counted():
    """HLO work on a pool thread inside a launch timed elsewhere is not added again."""
    space = build_space(
        {
            "tf_Compute/1": [("x/xla_run:_XlaRun", 0, 100), ("CpuExecutable::ExecuteAsyncOnStream", 5, 90)],
            "tf_numa_-1_Eigen/2": [
                ("ThunkExecutor::Execute", 10, 60),
                ("fusion", 12, 50, {"hlo_module": "m"}),
            ],
        }
    )
    r = analyze_xspace(space)
    assert r.xla_time_s == pytest.approx(100e-6)
    assert r.xla_executions == 1


_STEP = "EagerLocalExecute: __inference_train_function_7"


def test_call_without_a_recorded_launch_counts_its_loose_run_once():
    """A tf.function call with no launch but loose ThunkExecutor spans: one launch, their extent as XLA time."""
    space = build_space(
        {
            "python": [(_STEP, 0, 200)],
            "tf_Compute/2": [("ThunkExecutor::Execute", 20, 30), ("fusion", 25, 20, {"hlo_module": "m"})],
            "tf_numa_-1_Eigen/3": [
                ("ThunkExecutor::Execute", 60, 30),
                ("fusion.1", 61, 20, {"hlo_module": "m"}),
                ("ThunkExecutor::Execute", 95, 5),
            ],
            "tf_Compute/4": [("dense/MatMul:MatMul", 300, 30)],
        }
    )
    r = analyze_xspace(space)
    assert r.xla_executions == 1
    assert r.xla_time_s == pytest.approx(80e-6)  # 20 us to 100 us
    assert r.non_xla_op_time_s == pytest.approx(30e-6)


def test_loose_spans_in_a_call_that_launched_are_its_split_work():
    """Split spans that outlast their launch's kernel add no launch when the call recorded one."""
    space = build_space(
        {
            "python": [(_STEP, 0, 200), (_STEP, 300, 100), (_STEP, 500, 50)],
            "tf_Compute/1": [
                ("x/xla_run:_XlaRun", 10, 100),
                ("CpuExecutable::ExecuteAsyncOnStream", 15, 90),
                ("y/xla_run:_XlaRun", 310, 20),
                ("ThunkExecutor::Execute", 312, 10),
            ],
            "tf_numa_-1_Eigen/2": [
                ("ThunkExecutor::Execute", 120, 30),
                ("ThunkExecutor::Execute", 160, 30),
                ("ThunkExecutor::Execute", 340, 40),
                ("ThunkExecutor::Execute", 510, 10),
            ],
        }
    )
    r = analyze_xspace(space)
    # Calls 1 and 2 launched; call 3's loose span is a launch whose kernel is missing.
    assert r.xla_executions == 3
    assert r.xla_time_s == pytest.approx(130e-6)


def test_a_launch_at_a_calls_very_end_is_its_launch_and_calls_without_spans_stop_nothing():
    """Call 1 has no launch and no loose span, call 2 launched at its last instant, call 3 only ran
    loose spans: its one launch, their extent as XLA time; call 2's loose span adds nothing."""
    space = build_space(
        {
            "python": [(_STEP, 0, 100), (_STEP, 200, 100), (_STEP, 400, 100)],
            "tf_Compute/1": [("x/xla_run:_XlaRun", 300, 20)],
            "tf_numa_-1_Eigen/2": [("ThunkExecutor::Execute", 250, 10), ("ThunkExecutor::Execute", 420, 30)],
        }
    )
    r = analyze_xspace(space)
    assert r.xla_executions == 2
    assert r.xla_time_s == 50_000_000 * 1e-12


def test_loose_spans_outside_any_call_are_not_launches():
    """Without the eager call around them (e.g. a trace without Python events), loose spans count nothing."""
    space = build_space(
        {
            "tf_numa_-1_Eigen/2": [("ThunkExecutor::Execute", 50, 30), ("ThunkExecutor::Execute", 150, 30)],
        }
    )
    r = analyze_xspace(space)
    assert r.xla_executions == 0
    assert r.xla_time_s == pytest.approx(60e-6)  # pool-thread XLA time, as before


def test_device_plane_times_take_precedence():
    """With an active accelerator plane, coverage uses the device's XLA kernels vs TF kernels.

    The stream kernels' own stats decide; a module line beside them (one
    that disagrees here) is never added to them.
    """
    space = build_space(
        {"tf_Compute/1": [("a/MatMul:MatMul", 0, 10)]},
        extra_planes={
            "/device:GPU:0": {
                "XLA Modules": [("jit_step(1)", 0, 300)],
                "Stream #1(Compute)": [
                    ("fusion_kernel", 0, 250, {"hlo_op": "fusion", "hlo_module": "jit_step"}),
                    ("volta_sgemm", 400, 100, {"tf_op": "dense/MatMul:MatMul"}),
                ],
            }
        },
    )
    r = analyze_xspace(space)
    assert r.time_base == "device"
    assert r.xla_time_s == pytest.approx(250e-6)
    assert r.non_xla_op_time_s == pytest.approx(100e-6)
    assert [(o.op_type, o.op_name) for o in r.top_non_xla_ops] == [("MatMul", "dense/MatMul")]
    assert r.xla_executions == 1


def test_unsorted_events_give_the_same_result():
    """Event order in the line does not change the result (nesting is by time)."""
    events = [
        (
            "ExecutorState::ProcessAsync::Start",
            0,
            100,
            {"name": "S", "kernel_type": "StatefulPartitionedCall"},
        ),
        ("CpuExecutable::ExecuteAsyncOnStream", 10, 80),
        ("b/Add:AddV2", 150, 20),
    ]
    a = analyze_xspace(build_space({"t": events}))
    b = analyze_xspace(build_space({"t": list(reversed(events))}))
    assert a == b


def test_empty_host_plane_reports_zero_with_a_note():
    """A trace with no op execution gives fraction 0 and says so."""
    r = analyze_xspace(build_space({"python": []}))
    assert r.xla_time_fraction == 0.0
    assert r.notes == ("the trace holds no op execution: nothing to measure",)


_EAGER_NOTE = (
    "no TF op kernel or XLA program ran in this window: its ops ran eagerly, one at a time from Python "
    "({ops}), which XLA never compiles and the profiler records without op events (their time is part "
    "of eager_overhead_s, {s} s). XLA runs only inside a function: wrap the train step in "
    "tf.function(jit_compile=True) - whether XLA pays on this machine is not measured here: measure it "
    "first with keras_xla_guard.compare"
)


@pytest.mark.parametrize(
    ("types", "named"),
    [
        (["MatMul", "Mul"], "MatMul, Mul"),
        (
            ["Sum", "Relu", "MatMul", "Mul", "AddV2", "BiasAdd", "Reshape"],
            "AddV2, BiasAdd, MatMul, Mul, Relu and 2 more",
        ),
    ],
)
def test_ops_run_eagerly_are_named_in_the_note_with_the_fix(types, named):
    """Only eager op spans (no kernel, no XLA): the note names the op types (5, sorted, then a count) and the eager time."""
    events = [(f"EagerLocalExecute: {t}", 100 * i, 40) for i, t in enumerate(types)]
    r = analyze_xspace(build_space({"python": events}))
    assert (r.xla_time_s, r.non_xla_op_time_s, r.xla_time_fraction) == (0.0, 0.0, 0.0)
    assert r.eager_overhead_s == pytest.approx(40e-6 * len(types), rel=1e-12)
    assert r.notes == (_EAGER_NOTE.format(ops=named, s=f"{40e-6 * len(types):.3f}"),)


def test_a_function_call_alone_is_not_an_eager_op():
    """`EagerLocalExecute: __inference_*` is a tf.function's call: with no op inside, nothing ran eagerly."""
    r = analyze_xspace(build_space({"python": [("EagerLocalExecute: __inference_step_3", 0, 50)]}))
    assert r.notes == ("the trace holds no op execution: nothing to measure",)


def test_top_k_limits_and_validates():
    """top_k bounds the op table; a negative top_k is a ValueError naming it."""
    events = [(f"op{i}:Relu", i * 10, 5 + i) for i in range(5)]
    r = analyze_xspace(build_space({"t": events}), top_k=2)
    assert [o.op_name for o in r.top_non_xla_ops] == ["op4", "op3"]
    with pytest.raises(ValueError, match="top_k=-1"):
        analyze_xspace(build_space({"t": events}), top_k=-1)


def test_top_ops_rank_ties_by_type_then_name_and_keep_a_zero_self_time_positive():
    """Equal self times rank by op type, then name, top_k cutting inside the tie; an op whose child
    fills it has self time +0.0; a name holding the guard scope only as a word or as the op itself is
    a user op."""
    import math

    events = [
        ("b/x:Relu", 0, 4),
        ("a/x:Relu", 10, 4),
        ("c/x:Add", 20, 4),
        ("my_xla_guard_tap_2/y:Mul", 30, 9),
        ("scope/xla_guard_tap:Neg", 40, 1),
        ("outer:Tanh", 50, 2),
        ("outer/inner:Sign", 50, 2),
    ]
    r = analyze_xspace(build_space({"t": events}), top_k=10)
    assert [(o.op_type, o.op_name, o.self_time_s) for o in r.top_non_xla_ops] == [
        ("Mul", "my_xla_guard_tap_2/y", pytest.approx(9e-6, rel=1e-12)),
        ("Add", "c/x", pytest.approx(4e-6, rel=1e-12)),
        ("Relu", "a/x", pytest.approx(4e-6, rel=1e-12)),
        ("Relu", "b/x", pytest.approx(4e-6, rel=1e-12)),
        ("Sign", "outer/inner", pytest.approx(2e-6, rel=1e-12)),
        ("Neg", "scope/xla_guard_tap", pytest.approx(1e-6, rel=1e-12)),
        ("Tanh", "outer", 0.0),
    ]
    assert math.copysign(1.0, r.top_non_xla_ops[-1].self_time_s) == 1.0
    assert r.guard_op_time_s == 0.0
    cut = analyze_xspace(build_space({"t": events}), top_k=3)
    assert [o.op_name for o in cut.top_non_xla_ops] == ["my_xla_guard_tap_2/y", "c/x", "a/x"]
    both = combine_reports([r, r], top_k=3)
    assert [(o.op_name, o.count) for o in both.top_non_xla_ops] == [
        ("my_xla_guard_tap_2/y", 2),
        ("c/x", 2),
        ("a/x", 2),
    ]
    assert math.copysign(1.0, combine_reports([r, r]).top_non_xla_ops[-1].self_time_s) == 1.0


def test_combine_reports_sums_hosts():
    """Combining two host reports sums times and recomputes the fraction."""
    a = analyze_xspace(build_space({"t": [("x/xla_run:_XlaRun", 0, 30)]}), host="a")
    b = analyze_xspace(build_space({"t": [("y/MatMul:MatMul", 0, 10)]}), host="b")
    c = combine_reports([a, b])
    assert c.hosts == ("a", "b")
    assert c.xla_time_fraction == pytest.approx(0.75)
    assert c.top_non_xla_ops[0].op_name == "y/MatMul"
    with pytest.raises(ValueError):
        combine_reports([])


def test_combine_reports_refuses_a_report_that_measured_nothing():
    """Beside other reports, one that is not ok is a ValueError quoting its status, not a sum with None."""
    ok = analyze_xspace(build_space({"t": [("x/xla_run:_XlaRun", 0, 30)]}), host="a")
    skipped = dataclasses.replace(ok, status="skipped", reason="chief only")
    with pytest.raises(ValueError, match="status='skipped', reason='chief only'"):
        combine_reports([ok, skipped])


def test_combine_reports_leaves_a_figure_one_report_lacks_unknown():
    """An optional figure one report lacks (None, as a run file may hold it) combines to None, not a partial sum."""
    space = build_space({"t": [("x/xla_run:_XlaRun", 0, 30), ("xla_guard_tap/Shape:Shape", 40, 5)]})
    a = analyze_xspace(space, host="a")
    b = dataclasses.replace(a, hosts=("b",), eager_overhead_s=None)
    c = combine_reports([a, b])
    assert c.eager_overhead_s is None
    assert c.guard_op_time_s == pytest.approx(10e-6)
    assert c.xla_time_s == pytest.approx(60e-6)


def test_guard_tap_ops_are_booked_apart_from_the_models():
    """Ops in the xla_guard_tap scope count as guard_op_time_s, not non-XLA op time or top ops."""
    space = build_space(
        {
            "t": [
                ("f/xla_run:_XlaRun", 0, 90),
                ("xla_guard_tap/ResourceScatterUpdate:ResourceScatterUpdate", 100, 6),
                ("cond/then/xla_guard_tap/AssignAddVariableOp:AssignAddVariableOp", 110, 4),
                ("dense/Relu:Relu", 120, 10),
            ],
        }
    )
    r = analyze_xspace(space)
    assert r.guard_op_time_s == pytest.approx(10e-6)
    assert r.non_xla_op_time_s == pytest.approx(10e-6)
    assert r.xla_time_fraction == pytest.approx(0.9)
    assert [o.op_type for o in r.top_non_xla_ops] == ["Relu"]
    assert combine_reports([r, r]).guard_op_time_s == pytest.approx(20e-6)


def test_report_to_dict_is_json_serializable():
    """to_dict() round-trips through json with the documented keys."""
    r = analyze_xspace(build_space({"t": [("y/MatMul:MatMul", 0, 10)]}), trace_path="/x/h.xplane.pb")
    d = json.loads(json.dumps(r.to_dict()))
    for key in (
        "xla_time_s",
        "non_xla_op_time_s",
        "xla_time_fraction",
        "xla_executions",
        "compilations",
        "compile_time_s",
        "top_non_xla_ops",
        "input_pipeline_time_s",
        "trace_path",
        "epoch",
        "steps_profiled",
        "window_wall_s",
    ):
        assert key in d
    # `layer` is the guard's to fill in (it knows the model); a trace alone names none.
    assert d["top_non_xla_ops"][0] == {
        "op_type": "MatMul",
        "op_name": "y/MatMul",
        "self_time_s": pytest.approx(10e-6),
        "count": 1,
        "layer": None,
    }
    assert d["trace_path"] == "/x/h.xplane.pb"


def test_missing_path_raises_trace_not_found(tmp_path):
    """A missing path or an empty directory is a TraceNotFoundError naming it."""
    with pytest.raises(TraceNotFoundError, match="nope"):
        analyze_trace(tmp_path / "nope")
    with pytest.raises(TraceNotFoundError, match="No \\*.xplane.pb"):
        analyze_trace(tmp_path)


def test_newest_run_is_chosen(tmp_path):
    """A log dir resolves to the run written last; --all style lists every run."""
    import os
    import time

    for i, run in enumerate(["2026_01_01_00_00_00", "2025_01_01_00_00_00"]):
        d = tmp_path / "plugins" / "profile" / run
        d.mkdir(parents=True)
        f = d / "host.xplane.pb"
        f.write_bytes(build_space({"t": [(f"op{i}:Relu", 0, 1)]}).SerializeToString())
        os.utime(f, (time.time() + i, time.time() + i))
    newest = find_trace_files(tmp_path)
    assert [p.parent.name for p in newest] == ["2025_01_01_00_00_00"]
    assert len(find_trace_files(tmp_path, all_runs=True)) == 2
    assert analyze_trace(tmp_path).top_non_xla_ops[0].op_name == "op1"
    assert load_xspace(newest[0]).planes[0].name == "/host:CPU"
    assert Path(newest[0]).exists()


def test_compares_profiles_are_not_the_log_dirs_runs_but_a_users_compare_dir_is(tmp_path):
    """`compare/<mode>/plugins/profile/<time>_<mode>/` is left out of a log dir, even when newer; read when named."""
    import os
    import time

    def run(directory: Path, op: str, age: int) -> Path:
        directory.mkdir(parents=True)
        f = directory / "host.xplane.pb"
        f.write_bytes(build_space({"t": [(f"{op}:Relu", 0, 1)]}).SerializeToString())
        os.utime(f, (time.time() - age, time.time() - age))
        return f

    logs = tmp_path / "logs"
    guard = run(logs / "plugins" / "profile" / "2026_01_01_00_00_00_epoch1", "guard", 100)
    plain = run(logs / "compare" / "plain" / "plugins" / "profile" / "2026_01_02_00_00_00_plain", "plain", 10)
    jit = run(
        logs / "compare" / "jit_compile" / "plugins" / "profile" / "2026_01_02_00_00_01_jit_compile", "jit", 5
    )
    assert find_trace_files(logs) == [guard]
    assert find_trace_files(logs, all_runs=True) == [guard]
    assert analyze_trace(logs).top_non_xla_ops[0].op_name == "guard"
    assert find_trace_files(logs / "compare", all_runs=True) == [plain, jit]
    assert find_trace_files(logs / "compare" / "plain") == [plain]
    guard.unlink()
    with pytest.raises(TraceNotFoundError) as caught:
        find_trace_files(logs)
    assert str(caught.value).endswith(
        "Only compare's profiles are there, which are not a log dir's runs: "
        f"pass {str(logs / 'compare')!r} to read them."
    )
    # A directory of the user's own named `compare`, runs not named after their mode's directory: read.
    own = run(tmp_path / "mine" / "compare" / "a" / "plugins" / "profile" / "2026_01_03_00_00_00", "own", 1)
    assert find_trace_files(tmp_path / "mine") == [own]


@pytest.mark.parametrize("path", [None, 3, b"logs"])
def test_analyze_trace_rejects_a_non_path_with_value_error(path):
    """analyze_trace(None) and other non-paths raise ValueError quoting the value."""
    with pytest.raises(ValueError, match=f"Received: path={path!r}"):
        analyze_trace(path)


def test_combine_reports_adds_each_op_and_program_over_hosts_and_ranks_ties_by_name():
    """The same op or program on two hosts is one row with times and counts added; equal times rank by name."""
    a = CoverageReport(
        hosts=("a",),
        xla_time_s=1.0,
        non_xla_op_time_s=1.0,
        top_non_xla_ops=(OpStat("MatMul", "d/MatMul", 0.25, 2), OpStat("Relu", "d/Relu", 0.5, 1)),
        top_xla_ops=(OpStat("fusion", "f.1", 0.125, 3),),
        programs=(ProgramStat("p(1)", 2, 0.5, True), ProgramStat("b(2)", 1, 0.25, True)),
    )
    b = CoverageReport(
        hosts=("b",),
        xla_time_s=1.0,
        non_xla_op_time_s=1.0,
        top_non_xla_ops=(OpStat("MatMul", "d/MatMul", 0.5, 4), OpStat("Add", "d/Add", 0.75, 1)),
        top_xla_ops=(OpStat("fusion", "f.1", 0.25, 5), OpStat("fusion", "f.2", 0.375, 1)),
        programs=(ProgramStat("z(3)", 1, 0.25, False), ProgramStat("p(1)", 1, 0.25, True)),
    )
    c = combine_reports([a, b])
    assert c.top_non_xla_ops == (
        OpStat("Add", "d/Add", 0.75, 1),
        OpStat("MatMul", "d/MatMul", 0.75, 6),
        OpStat("Relu", "d/Relu", 0.5, 1),
    )
    assert c.top_xla_ops == (OpStat("fusion", "f.1", 0.375, 8), OpStat("fusion", "f.2", 0.375, 1))
    assert c.programs == (
        ProgramStat("p(1)", 3, 0.75, True),
        ProgramStat("b(2)", 1, 0.25, True),
        ProgramStat("z(3)", 1, 0.25, False),
    )


def test_combining_real_host_reports_and_a_device_report_gives_each_figure_its_rule(tmp_path):
    """Two stored real host traces (jit, plain) and a raw GPU trace combined: every figure computed here
    from the three by its rule - sums, the largest window, concatenated paths, hosts, compile rows,
    de-duplicated modules and quality entries, the device's time base, transfers and collectives of
    the reports that have them, the fraction recomputed - and the rest taken from the first report."""
    import gzip

    from _gpu_trace import jit_fit as gpu_fit

    from tests.trace._golden import DATA

    paths = []
    for name in ("jit", "plain"):
        path = tmp_path / f"{name}.xplane.pb"
        path.write_bytes(gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes()))
        paths.append(path)
    paths.append(gpu_fit(3).write(tmp_path / "gpu.xplane.pb"))
    reports = [analyze_trace(p, top_k=1000) for p in paths]
    a, b, g = reports
    assert (a.time_base, b.time_base, g.time_base) == ("host", "host", "device")
    assert a.transfer_time_s is None and g.transfer_time_s > 0
    assert [r.window_wall_s is None for r in reports] == [False, False, True]
    c = combine_reports(reports, top_k=1000)

    def total(field):
        values = [getattr(r, field) for r in reports]
        return None if None in values else sum(values)

    def ordered(field):
        return tuple(dict.fromkeys(x for r in reports for x in getattr(r, field)))

    xla, non = sum(r.xla_time_s for r in reports), sum(r.non_xla_op_time_s for r in reports)
    want = {
        **{f.name: getattr(a, f.name) for f in dataclasses.fields(a)},
        "trace_paths": tuple(str(p) for p in paths),
        "hosts": tuple(h for r in reports for h in r.hosts),
        "time_base": "device",
        "window_wall_s": max(r.window_wall_s for r in reports if r.window_wall_s is not None),
        "xla_time_s": xla,
        "non_xla_op_time_s": non,
        "xla_time_fraction": xla / (xla + non),
        "compile_table": tuple(row for r in reports for row in r.compile_table),
        "compiled_modules": ordered("compiled_modules"),
        "trace_quality": ordered("trace_quality"),
        "notes": ordered("notes"),
        "transfer_time_s": g.transfer_time_s,
        "collective_time_s": g.collective_time_s,
        "xla_run_span_s": g.xla_run_span_s,
        "devices": g.devices,
        "top_non_xla_ops": c.top_non_xla_ops,
        "top_xla_ops": c.top_xla_ops,
        "programs": c.programs,
    }
    for field in (
        "xla_executions",
        "compilations",
        "compile_time_s",
        "compile_thread_time_s",
        "input_pipeline_time_s",
        "eager_overhead_s",
        "eager_op_time_s",
        "tracing_time_s",
        "guard_op_time_s",
    ):
        want[field] = total(field)
    assert a.hosts == ("jit",) and len(c.compile_table) == len(a.compile_table) > 0
    assert {f.name: getattr(c, f.name) for f in dataclasses.fields(c)} == want
    # The op tables: each op once, its time and count the sums over the reports.
    sums: dict = {}
    for r in reports:
        for op in r.top_non_xla_ops:
            t, n = sums.get((op.op_type, op.op_name), (0.0, 0))
            sums[(op.op_type, op.op_name)] = (t + op.self_time_s, n + op.count)
    combined = {(o.op_type, o.op_name): (o.self_time_s, o.count) for o in c.top_non_xla_ops}
    assert sorted(combined) == sorted(sums)
    assert [combined[k][1] for k in sorted(sums)] == [sums[k][1] for k in sorted(sums)]
    assert [combined[k][0] for k in sorted(sums)] == pytest.approx(
        [sums[k][0] for k in sorted(sums)], rel=1e-12
    )
    # Two host reports: host time, and no transfers or collectives to add.
    h = combine_reports([a, b])
    assert (h.time_base, h.transfer_time_s, h.collective_time_s) == ("host", None, None)
    # Equal XLA and op time: half; no time at all: 0, not a division by zero.
    even = CoverageReport(hosts=("x",), xla_time_s=1.0, non_xla_op_time_s=1.0)
    idle = CoverageReport(hosts=("x",), xla_time_s=0.0, non_xla_op_time_s=0.0)
    assert (
        combine_reports([even, even]).xla_time_fraction,
        combine_reports([idle, idle]).xla_time_fraction,
    ) == (
        0.5,
        0.0,
    )
    with pytest.raises(ValueError) as raised:
        combine_reports([])
    assert str(raised.value) == "`reports` must hold at least one report. Received: []"


def test_equal_xla_and_op_time_is_half_and_top_k_zero_lists_no_op(tmp_path):
    """10 us of XLA beside 10 us of plain ops is a fraction of exactly 0.5; `top_k=0` is allowed and
    lists no op, XLA or plain."""
    space = build_space({"t": [("cluster_0/_XlaRun:_XlaRun", 0, 10), ("dense/MatMul:MatMul", 20, 10)]})
    report = analyze_xspace(space)
    assert (report.xla_time_fraction, report.xla_executions) == (0.5, 1)
    assert [o.op_type for o in report.top_non_xla_ops] == ["MatMul"]
    none = analyze_xspace(space, top_k=0)
    assert (none.top_non_xla_ops, none.top_xla_ops, none.xla_time_fraction) == ((), (), 0.5)


def test_top_k_bounds_the_tables_of_a_run_of_several_hosts(tmp_path):
    """`analyze_trace` of a run directory whose two hosts ran different ops keeps `top_k` rows in the
    combined table, the largest of both hosts' rows."""
    import gzip

    run = tmp_path / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for host, name in (("a", "plain"), ("b", "py_function")):
        data = gzip.decompress(
            (Path(__file__).resolve().parent / "data" / f"{name}.xplane.pb.gz").read_bytes()
        )
        (run / f"{host}.xplane.pb").write_bytes(data)
    rows = [
        op for host in ("a", "b") for op in analyze_trace(run / f"{host}.xplane.pb", top_k=2).top_non_xla_ops
    ]
    assert len({(o.op_type, o.op_name) for o in rows}) == 4
    two = analyze_trace(run, top_k=2)
    assert two.hosts == ("a", "b")
    assert two.top_non_xla_ops == tuple(sorted(rows, key=lambda o: -o.self_time_s)[:2])


def test_a_report_of_a_space_given_no_path_or_host_names_none():
    """`analyze_xspace` without `trace_path` or `host` leaves both tuples empty; given, each holds one."""
    space = build_space({"t": [("dense/MatMul:MatMul", 0, 10)]})
    plain = analyze_xspace(space)
    assert (plain.trace_paths, plain.hosts) == ((), ())
    named = analyze_xspace(space, trace_path="a/h.xplane.pb", host="h")
    assert (named.trace_paths, named.hosts) == (("a/h.xplane.pb",), ("h",))


def test_combine_reports_adds_compile_figures_and_keeps_the_first_reports_own_fields():
    """Two hosts that both compiled: counts and times added, modules and notes once each in order, rows
    of both, the longer window; fields not summed (the epoch) are the first report's."""
    from keras_xla_guard.trace.compiles import CompileRecord

    a = CoverageReport(
        epoch=1,
        window_wall_s=2.0,
        compilations=2,
        compile_time_s=0.5,
        compile_thread_time_s=0.75,
        compiled_modules=("m1", "m2"),
        compile_table=(CompileRecord("f", "m1", 0.1, 0.2), CompileRecord("g", "m2", 0.4, 0.3)),
        notes=("n1", "n2"),
        hosts=("a",),
    )
    b = CoverageReport(
        epoch=2,
        window_wall_s=3.0,
        compilations=3,
        compile_time_s=0.25,
        compile_thread_time_s=1.0,
        compiled_modules=("m2", "m3"),
        compile_table=(CompileRecord("h", "m3", 0.2, 0.25),),
        notes=("n2", "n3"),
        hosts=("b",),
    )
    c = combine_reports([a, b])
    assert (c.epoch, c.hosts, c.window_wall_s) == (1, ("a", "b"), 3.0)
    assert (c.compilations, c.compile_time_s, c.compile_thread_time_s) == (5, 0.75, 1.75)
    assert c.compiled_modules == ("m1", "m2", "m3")
    assert c.compile_table == a.compile_table + b.compile_table
    assert c.notes == ("n1", "n2", "n3")
