"""Per step of a window: wall time, the time XLA programs ran, the host gap, launches and transfers.

Real traces: `data/jax_cpu.xplane.pb.gz` (Keras 3 on JAX, 4 steps marked
by `jax.profiler.StepTraceAnnotation`, the Python tracer off; made by
`tests/trace/_jax_trace.py`) and the TF 2.21 traces of `_golden.py`. The
oracle is xprof's own conversion of the same file: its input pipeline
tool's step times, and the program spans of its trace viewer (the JAX
launches `CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice`, the
program runs `ThunkExecutor::Execute`, TF's `CpuExecutable::ExecuteAsyncOnStream`)
clipped to its "train N" step events. Device steps come from the raw GPU
traces of `tests/_gpu_trace.py`.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from _gpu_trace import STEP_US, collective_fit
from _gpu_trace import jit_fit as gpu_fit
from _xspace import build_space

from keras_xla_guard import analyze_trace, analyze_xspace
from keras_xla_guard.trace._proto import xplane_pb2
from keras_xla_guard.trace.compile_wall import union_length
from keras_xla_guard.trace.report import StepStat
from keras_xla_guard.trace.steps import device_steps

DATA = Path(__file__).resolve().parent / "data"
_US = 1e-6
# The spans during which an XLA program runs, as the traces name them.
_PROGRAM_SPANS = (
    "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice",
    "ThunkExecutor::Execute",
    "CpuExecutable::ExecuteAsyncOnStream",
)
_LAUNCHES = ("CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice", "CpuExecutable::ExecuteAsyncOnStream")


def _stored(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes()))
    return path


def _xprof_steps(path: Path) -> dict[int, dict[str, float]]:
    """Step number -> its marker's span, program time and launches in xprof's trace viewer (us), and
    its step time in xprof's input pipeline tool (ms; that tool leaves out the first and last steps of a
    window it finds incomplete, `None` there)."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([str(path)], "input_pipeline_analyzer", {})
    table = json.loads(data)[1]
    cols = [c["id"] for c in table["cols"]]
    rows = [dict(zip(cols, [c.get("v") for c in row["c"]])) for row in table["rows"]]
    step_ms = {int(r["stepnum"].split()[-1]): r["stepTimeMs"] for r in rows}
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(path)], "trace_viewer", {})
    events = [e for e in json.loads(data)["traceEvents"] if e.get("ph") == "X"]
    markers = {
        int(e["name"].split()[-1]): (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e["name"].startswith("train ")
    }
    out = {}
    for step, (start, end) in markers.items():
        spans = [
            (max(e["ts"], start), min(e["ts"] + e["dur"], end))
            for e in events
            if e["name"] in _PROGRAM_SPANS and e["ts"] < end and e["ts"] + e["dur"] > start and e["dur"] > 0
        ]
        launches = sum(1 for e in events if e["name"] in _LAUNCHES and start <= e["ts"] < end)
        out[step] = {
            "wall_us": end - start,
            "step_ms": step_ms.get(step),
            "busy_us": union_length(spans),
            "launches": launches,
        }
    return out


@pytest.fixture(scope="module")
def jax_trace(tmp_path_factory: pytest.TempPathFactory):
    """The stored JAX CPU trace and its report."""
    path = _stored(tmp_path_factory.mktemp("jax"), "jax_cpu")
    return path, analyze_trace(path)


def test_jax_cpu_steps_hold_the_window(jax_trace):
    """4 steps of 3 launches each (two inline programs and jit_train_step); step 0 waits on the compile."""
    _, report = jax_trace
    assert [(s.step, s.launches) for s in report.steps] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert sum(s.launches for s in report.steps) == report.xla_executions == 12
    for s in report.steps:
        assert s.idle_s == pytest.approx(s.wall_s - s.busy_s, abs=1e-12)
        assert 0 < s.busy_s < s.wall_s
        assert s.transfer_s is None
    # The compile (1.3 s) is step 0's host gap: nearly all of its wall time.
    (compile_row,) = report.compile_table
    assert compile_row.step == 0
    assert report.steps[0].idle_s > compile_row.compile_s


@pytest.mark.tf
def test_jax_cpu_steps_match_xprof(jax_trace):
    """Wall time equals xprof's step time; busy time and launches its trace viewer's program spans (1%)."""
    path, report = jax_trace
    oracle = _xprof_steps(path)
    assert sorted(oracle) == [s.step for s in report.steps]
    for s in report.steps:
        assert s.wall_s == pytest.approx(oracle[s.step]["step_ms"] * 1e-3, rel=1e-6)
        assert s.wall_s == pytest.approx(oracle[s.step]["wall_us"] * _US, rel=1e-6)
        assert s.busy_s == pytest.approx(oracle[s.step]["busy_us"] * _US, rel=0.01)
        assert s.launches == oracle[s.step]["launches"]


@pytest.mark.slow
def test_tensorflow_steps_match_xprof(jit_fit, plain_fit):
    """The guard's own step markers on real TF fits: one launch a step under jit_compile, none without."""
    for fit, launches in ((jit_fit, 1), (plain_fit, 0)):
        report = fit.callback.reports[1]
        oracle = _xprof_steps(Path(report.trace_paths[0]))
        assert [s.step for s in report.steps] == sorted(oracle)
        assert len(report.steps) == report.steps_profiled
        assert any(oracle[s.step]["step_ms"] is not None for s in report.steps)
        for s in report.steps:
            assert s.launches == launches == oracle[s.step]["launches"]
            assert s.wall_s == pytest.approx(oracle[s.step]["wall_us"] * _US, rel=1e-6)
            if oracle[s.step]["step_ms"] is not None:
                assert s.wall_s == pytest.approx(oracle[s.step]["step_ms"] * 1e-3, rel=1e-6)
            assert s.busy_s == pytest.approx(oracle[s.step]["busy_us"] * _US, rel=0.01)
        assert (sum(s.busy_s for s in report.steps) > 0) == bool(launches)


def _renamed(path: Path, out: Path, name: str) -> int:
    """Writes `path` with every line that holds a step marker renamed `name`; returns how many were."""
    pb = xplane_pb2()
    space = pb.XSpace.FromString(path.read_bytes())
    renamed = 0
    for plane in space.planes:
        ids = {m.name: m.id for m in plane.stat_metadata.values()}
        for line in plane.lines:
            if any(ids.get("_r") in {s.metadata_id for s in e.stats} for e in line.events):
                line.name = name
                renamed += 1
    out.write_bytes(space.SerializeToString())
    return renamed


def _renamed_without_root(path: Path, out: Path, name: str, reverse: bool) -> None:
    """Writes `path` with its `python` line renamed `name` and the `_r` stat taken off its events
    (`reverse`: and those events in reverse order, which the streaming reader scans one at a time)."""
    pb = xplane_pb2()
    space = pb.XSpace.FromString(path.read_bytes())
    (plane,) = [p for p in space.planes if p.name == "/host:CPU"]
    root = next(m.id for m in plane.stat_metadata.values() if m.name == "_r")
    (line,) = [line for line in plane.lines if line.name == "python"]
    line.name = name
    events = []
    for event in line.events:
        copy = pb.XEvent()
        copy.CopyFrom(event)
        kept = [s for s in copy.stats if s.metadata_id != root]
        del copy.stats[:]
        copy.stats.extend(kept)
        events.append(copy)
    del line.events[:]
    line.events.extend(events[::-1] if reverse else events)
    out.write_bytes(space.SerializeToString())


@pytest.mark.parametrize("reverse", [False, True], ids=["in_order", "reversed"])
@pytest.mark.parametrize("name", ["python", "python3", "train-cli"])
def test_train_events_without_a_root_stat_date_compiles_whatever_the_threads_name(tmp_path, name, reverse):
    """`train` events with a `step_num` but no `_r` (a custom loop's own markers) are no steps, yet
    date the compiles of other threads: in the real TF 2.20 trace, compiled on a `tf_Compute` thread,
    the compile's step is found on the markers' line whatever it is named, in both readers, also
    where the line is out of order (scanned one event at a time, then read again for its facts)."""
    original = analyze_trace(_stored(tmp_path, "tf220_async_launch"))
    (row,) = original.compile_table
    assert row.step == 0
    out = tmp_path / "edited.xplane.pb"
    _renamed_without_root(_stored(tmp_path, "tf220_async_launch"), out, name, reverse)
    edited = analyze_trace(out)
    assert edited.steps is None
    assert edited.compile_table == original.compile_table
    assert (
        analyze_xspace(xplane_pb2().XSpace.FromString(out.read_bytes())).compile_table
        == original.compile_table
    )


@pytest.mark.parametrize("name", ["python3", "python3.11", "train-cli", "[pytest-xdist r"])
def test_jax_steps_do_not_depend_on_the_python_threads_name(jax_trace, tmp_path, name):
    """The main thread's line is named after the program (`python3`, a console script, a `setproctitle`
    title): renamed in the real JAX trace, it gives the same steps in both readers."""
    path, report = jax_trace
    out = tmp_path / "renamed.xplane.pb"
    assert _renamed(path, out, name) == 1
    assert len(report.steps) == 4
    assert analyze_trace(out).steps == report.steps
    assert analyze_xspace(xplane_pb2().XSpace.FromString(out.read_bytes())).steps == report.steps


@pytest.mark.slow
def test_tensorflow_steps_and_compiles_do_not_depend_on_the_python_threads_name(jit_fit, tmp_path):
    """On the guard's own TF trace, the markers' thread renamed `python3` keeps every step and the
    compile table's step of each compile (the markers carry `_r`, so they are found on any thread)."""
    report = jit_fit.callback.reports[1]
    original = analyze_trace(report.trace_paths[0])
    out = tmp_path / "renamed.xplane.pb"
    assert _renamed(Path(report.trace_paths[0]), out, "python3") == 1
    renamed = analyze_trace(out)
    assert len(original.steps) == report.steps_profiled
    assert renamed.steps == original.steps
    assert renamed.compile_table == original.compile_table
    assert renamed.xla_time_fraction == original.xla_time_fraction


_NAMED_THREAD_PROBE = """
import ctypes, sys
# What setproctitle and a console script do: the main thread gets another name.
ctypes.CDLL(None).prctl(15, b"train-cli", 0, 0, 0)
import tensorflow as tf

f = tf.function(lambda x: tf.reduce_sum(x * 2.0), jit_compile=True)
f(tf.ones((4, 4)))
tf.profiler.experimental.start(sys.argv[1])
for step in range(3):
    with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
        f(tf.ones((4, 4))).numpy()
tf.profiler.experimental.stop()
"""


@pytest.mark.slow
def test_tensorflow_names_the_python_line_after_the_thread_and_steps_are_still_found(tmp_path):
    """TF names a host line after its OS thread: a main thread named `train-cli` (as `setproctitle` or a
    console script names it) writes its markers on a `train-cli` line, where the steps xprof finds are found."""
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-c", _NAMED_THREAD_PROBE, str(tmp_path / "logs")],
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    (path,) = (tmp_path / "logs").rglob("*.xplane.pb")
    space = xplane_pb2().XSpace.FromString(path.read_bytes())
    names = {line.name for plane in space.planes for line in plane.lines}
    assert "train-cli" in names
    assert "python" not in names
    report = analyze_trace(path)
    assert [s.step for s in report.steps] == [0, 1, 2] == sorted(_xprof_steps(path))
    assert [s.launches for s in report.steps] == [1, 1, 1]


_UNROOTED_MARKERS_PROBE = """
import ctypes, sys
ctypes.CDLL(None).prctl(15, b"train-cli", 0, 0, 0)
import tensorflow as tf

inner = tf.function(lambda x: tf.reduce_sum(x * 2.0), jit_compile=True)
batches = iter(tf.data.Dataset.from_tensor_slices(tf.ones((6, 4))).batch(2).repeat())


@tf.function
def step_fn(it):
    return inner(next(it))


tf.profiler.experimental.start(sys.argv[1])
for step in range(3):
    # A custom loop's own step marker, without `_r`: not a step to xprof.
    with tf.profiler.experimental.Trace("train", step_num=step):
        step_fn(batches).numpy()
tf.profiler.experimental.stop()
"""


@pytest.mark.slow
def test_tensorflow_compile_on_another_thread_takes_its_step_from_a_renamed_main_thread(tmp_path):
    """A real TF custom loop whose main thread is `train-cli` and whose `train` markers lack `_r`:
    the jit function compiles on a `tf_Compute` thread, and the compile table still gives step 0."""
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-c", _UNROOTED_MARKERS_PROBE, str(tmp_path / "logs")],
        check=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    (path,) = (tmp_path / "logs").rglob("*.xplane.pb")
    space = xplane_pb2().XSpace.FromString(path.read_bytes())
    (plane,) = [p for p in space.planes if p.name == "/host:CPU"]
    names = {m.id: m.name for m in plane.event_metadata.values()}
    holding = {
        line.name
        for line in plane.lines
        for e in line.events
        if names[e.metadata_id] == "train" or names[e.metadata_id].endswith("Compiler::RunBackend")
    }
    assert "train-cli" in holding and any(n.startswith("tf_Compute") for n in holding)
    report = analyze_trace(path)
    assert report.steps is None
    assert [(row.program, row.step) for row in report.compile_table] == [("_lambda_", 0)]
    assert analyze_xspace(space).compile_table == report.compile_table


def test_a_program_span_across_two_steps_is_split_between_them():
    """A span from 50 to 150 us over steps 0-100 and 100-200: 50 us each; its launch counts in step 0."""
    space = build_space(
        {
            "python": [
                ("train", 0, 100, {"_r": 1, "step_num": 7}),
                ("train", 100, 100, {"_r": 1, "step_num": 8}),
                ("CpuExecutable::ExecuteAsyncOnStream", 50, 100),
            ]
        }
    )
    report = analyze_xspace(space)
    assert [(s.step, s.launches) for s in report.steps] == [(7, 1), (8, 0)]
    assert [s.busy_s for s in report.steps] == pytest.approx([50 * _US, 50 * _US])
    assert [s.idle_s for s in report.steps] == pytest.approx([50 * _US, 50 * _US])


def test_markers_need_a_root_stat_and_a_step_number():
    """Events named like markers without `_r` or `step_num` are no steps (TensorFlow's `FunctionRun` has
    `_r` alone); no marker: steps unknown (`None`, not an empty list) and an entry saying how to mark them."""
    space = build_space(
        {
            "python": [
                ("train", 0, 100, {"step_num": 1}),
                ("train", 100, 100, {"_r": 1}),
                ("FunctionRun", 200, 100, {"_r": 1, "id": 4}),
                ("CpuExecutable::ExecuteAsyncOnStream", 10, 20),
            ]
        }
    )
    report = analyze_xspace(space)
    assert report.steps is None
    assert [q.code for q in report.trace_quality] == ["no_step_markers"]
    assert report.to_dict()["steps"] is None


def test_device_steps_are_the_runs_and_transfers_of_each_marker(tmp_path):
    """Raw GPU trace: per step 900 us wall, one run of 3 kernels busy 120 us (its 130 us span holds two
    5 us gaps, which are idle time), 42 us of transfers, 780 us idle."""
    report = analyze_trace(gpu_fit(6).write(tmp_path / "gpu.xplane.pb"))
    assert [(s.step, s.launches) for s in report.steps] == [(n, 1) for n in range(6)]
    for s in report.steps:
        assert (s.wall_s, s.busy_s, s.idle_s) == pytest.approx((900 * _US, 120 * _US, 780 * _US))
        assert s.transfer_s == pytest.approx(42 * _US)


def test_device_steps_count_a_program_on_two_streams_once(tmp_path):
    """The all-reduce beside the compute adds no launch and no busy time to its step: it fills the
    compute kernels' gaps, so the step is busy for the run's whole 130 us."""
    report = analyze_trace(collective_fit(6).write(tmp_path / "nccl.xplane.pb"))
    assert [(s.launches, s.transfer_s) for s in report.steps] == [(1, 0.0)] * 6
    assert [s.busy_s for s in report.steps] == pytest.approx([130 * _US] * 6)


def test_device_steps_need_host_markers(tmp_path):
    """Steps known only from xprof's group ids (no host marker; TensorFlow's `FunctionRun` around each
    call) give no per-step figures: steps unknown, never one per `FunctionRun`."""
    report = analyze_trace(gpu_fit(6, with_steps=False, group_ids=True).write(tmp_path / "g.xplane.pb"))
    assert report.steps is None
    assert report.xla_executions == 6


def test_steps_survive_the_run_file_round_trip(tmp_path):
    """A report's steps come back from JSON equal."""
    from keras_xla_guard import CoverageReport

    report = analyze_trace(gpu_fit(2).write(tmp_path / "gpu.xplane.pb"))
    assert report.steps and CoverageReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    assert STEP_US == 1000.0


def test_device_steps_come_out_in_time_order_with_their_own_runs_and_transfers():
    """Markers given out of time order: steps sorted by start, each with the runs and transfers of its index."""
    ps = 1_000_000_000  # 1 ms
    markers = [(2 * ps, 3 * ps, 7), (0, ps, 6)]
    busy = {0: [(2 * ps, 2 * ps + ps // 2)], 1: [(0, ps // 4), (ps // 2, 3 * ps // 4)]}
    transfers = {0: ps // 8}
    assert device_steps(markers, busy, {0: 1, 1: 2}, transfers) == (
        StepStat(step=6, wall_s=1e-3, busy_s=0.5e-3, idle_s=0.5e-3, launches=2, transfer_s=0.0),
        StepStat(step=7, wall_s=1e-3, busy_s=0.5e-3, idle_s=0.5e-3, launches=1, transfer_s=ps // 8 * 1e-12),
    )


@pytest.mark.parametrize("kind", ["int64_value", "uint64_value", "str_value"])
def test_a_step_number_is_an_integer_of_either_kind(kind, tmp_path):
    """`step_num` written as int64 (TensorFlow) or uint64 makes the same two steps, parsed or streamed;
    written as a string it makes no step."""
    space = build_space(
        {
            "python": [
                ("train", 0, 100, {"_r": 1, "step_num": 3}),
                ("train", 100, 100, {"_r": 1, "step_num": 4}),
                ("CpuExecutable::ExecuteAsyncOnStream", 10, 20),
            ]
        }
    )
    plane = space.planes[0]
    step_id = next(i for i, m in plane.stat_metadata.items() if m.name == "step_num")
    for event in plane.lines[0].events:
        for stat in event.stats:
            if stat.metadata_id == step_id:
                value = stat.int64_value
                stat.ClearField("int64_value")
                setattr(stat, kind, str(value) if kind == "str_value" else value)
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    for steps in (analyze_xspace(space).steps, analyze_trace(path).steps):
        if kind == "str_value":
            assert steps is None
            continue
        assert [(s.step, s.launches, s.transfer_s) for s in steps] == [(3, 1, None), (4, 0, None)]
        assert [(s.wall_s, s.busy_s, s.idle_s) for s in steps] == [
            pytest.approx((100 * _US, 20 * _US, 80 * _US), rel=1e-12),
            pytest.approx((100 * _US, 0.0, 100 * _US), rel=1e-12),
        ]


def test_device_steps_keep_runs_past_the_marker_and_steps_without_runs():
    """Device time is not clipped to the host marker: a run outlasting its step is all busy, none idle;
    a step busy from first to last instant is idle 0; a step with no run is all idle."""
    ps = 1e-12
    markers = [(0, 100, 1), (200, 300, 2), (400, 500, 3)]
    steps = device_steps(markers, {0: [(10, 150)], 1: [(200, 300)]}, {0: 1, 1: 1}, {1: 7})
    assert steps == (
        StepStat(step=1, wall_s=100 * ps, busy_s=140 * ps, idle_s=0.0, launches=1, transfer_s=0.0),
        StepStat(step=2, wall_s=100 * ps, busy_s=100 * ps, idle_s=0.0, launches=1, transfer_s=7 * ps),
        StepStat(step=3, wall_s=100 * ps, busy_s=0.0, idle_s=100 * ps, launches=0, transfer_s=0.0),
    )


def test_a_launch_half_a_microsecond_into_a_step_is_that_steps(tmp_path):
    """Launch times are on the trace's clock (line start + offset, in ps) as markers are: a launch
    0.5 us after the marker's start belongs to it, parsed and streamed; one at its end, or 500 ps before
    the next one's start, belongs to no step."""
    space = build_space(
        {
            "python": [
                ("train", 10, 100, {"_r": 1, "step_num": 1}),
                ("train", 200, 100, {"_r": 1, "step_num": 2}),
            ],
            "tf_Compute/1": [
                ("CpuExecutable::ExecuteAsyncOnStream", 10.5, 20),
                ("CpuExecutable::ExecuteAsyncOnStream", 110, 20),
                ("CpuExecutable::ExecuteAsyncOnStream", 199.9995, 20),
            ],
        }
    )
    assert space.planes[0].lines[1].events[2].offset_ps == 199_999_500
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    for steps in (analyze_xspace(space).steps, analyze_trace(path).steps):
        assert [(s.step, s.launches) for s in steps] == [(1, 1), (2, 0)]


# Two events overlapping without nesting send the line to the scan one event at a time.
@pytest.mark.parametrize(
    "between",
    [[], [("ExecutorState::Process", 150, 20), ("ExecutorState::Process", 160, 20)]],
    ids=["nested", "overlapping"],
)
def test_a_one_picosecond_marker_is_a_step_and_a_one_picosecond_program_run_is_busy_time(between, tmp_path):
    """Durations count down to 1 ps: a 1 ps marker is a step, a 1 ps program run 1 ps of its step's busy time."""
    space = build_space(
        {
            "python": [
                ("train", 0, 100, {"_r": 1, "step_num": 1}),
                ("CpuExecutable::ExecuteAsyncOnStream", 10, 1e-6),
                *between,
                ("train", 200, 1e-6, {"_r": 1, "step_num": 2}),
            ]
        }
    )
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    for report in (analyze_xspace(space), analyze_trace(path)):
        assert [(s.step, s.launches) for s in report.steps] == [(1, 1), (2, 0)]
        assert [s.wall_s for s in report.steps] == pytest.approx([100 * _US, 1e-12], rel=1e-9, abs=0)
        assert [s.busy_s for s in report.steps] == pytest.approx([1e-12, 0.0], rel=1e-9, abs=0)


def test_program_runs_on_other_threads_are_their_steps_busy_time(tmp_path):
    """Markers on the Python thread, runs on two compute threads: each step's busy time is the union
    of the runs inside it, whichever thread ran them."""
    space = build_space(
        {
            "python": [
                ("train", 0, 100, {"_r": 1, "step_num": 1}),
                ("train", 100, 100, {"_r": 1, "step_num": 2}),
            ],
            "tf_Compute/1": [
                ("CpuExecutable::ExecuteAsyncOnStream", 10, 30),
                ("CpuExecutable::ExecuteAsyncOnStream", 120, 10),
            ],
            "tf_Compute/2": [("CpuExecutable::ExecuteAsyncOnStream", 30, 20)],
        }
    )
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    for report in (analyze_xspace(space), analyze_trace(path)):
        assert [(s.step, s.launches) for s in report.steps] == [(1, 2), (2, 1)]
        # Step 1: [10, 40) and [30, 50) make 40 us; step 2: 10 us.
        assert [s.busy_s for s in report.steps] == pytest.approx([40 * _US, 10 * _US], rel=1e-9, abs=0)


def test_a_stat_name_defined_twice_is_read_at_its_lowest_id_by_every_reader(tmp_path):
    """A hand-edited plane naming a second, unused stat `step_num`: the markers (scan, parsed or
    streamed, and `step_markers`) and the compile table all read the first id, so the steps stay."""
    from keras_xla_guard.trace.steps import step_markers
    from keras_xla_guard.trace.xplane import stat_index

    space = build_space(
        {
            "python": [
                ("train", 0, 100, {"_r": 1, "step_num": 3}),
                ("train", 100, 100, {"_r": 1, "step_num": 4}),
                ("CpuExecutable::ExecuteAsyncOnStream", 10, 20),
                ("CpuCompiler::RunBackend", 120, 30, {"name": "a_inference_f_1__.1"}),
            ]
        }
    )
    plane = space.planes[0]
    first = stat_index(plane)["step_num"]
    for duplicate in (first + 100, first + 50):
        plane.stat_metadata[duplicate].id = duplicate
        plane.stat_metadata[duplicate].name = "step_num"
    assert stat_index(plane)["step_num"] == first
    assert [step for _, _, step in step_markers(plane, plane.lines[0])] == [3, 4]
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    for report in (analyze_xspace(space), analyze_trace(path)):
        assert [(s.step, s.launches) for s in report.steps] == [(3, 1), (4, 0)]
        assert [row.step for row in report.compile_table] == [4]


def test_a_marker_inside_another_is_part_of_its_step(tmp_path):
    """A `StepTraceAnnotation` inside the guard's `train` marker (both `_r` and `step_num`) is no step of
    its own, as in xprof's grouping: one step holding the launch, parsed and streamed; a marker that only
    overlaps another stays a step."""
    space = build_space(
        {
            "python": [
                ("train", 0, 100, {"_r": 1, "step_num": 5}),
                ("train", 10, 50, {"_r": 1, "step_num": 9}),
                ("CpuExecutable::ExecuteAsyncOnStream", 20, 10),
                ("train", 200, 100, {"_r": 1, "step_num": 6}),
            ],
            "other": [("train", 250, 100, {"_r": 1, "step_num": 7})],
        }
    )
    path = tmp_path / "nested.xplane.pb"
    path.write_bytes(space.SerializeToString())
    for report in (analyze_xspace(space), analyze_trace(path)):
        assert [(s.step, s.launches, s.wall_s) for s in report.steps] == [
            (5, 1, pytest.approx(100 * _US)),
            (6, 0, pytest.approx(100 * _US)),
            (7, 0, pytest.approx(100 * _US)),
        ]
