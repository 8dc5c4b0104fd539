"""`host_launches` on host planes built event by event: which step marker
holds each launch (ends inclusive), which events are markers (`_r` with an
integer `step_num`, outermost only: `FunctionRun` and other `_r` events
without `step_num` are none, nor is a legacy `TraceContext`), driver-API
launches apart (CUDA's and ROCm's), the program execution each driver call
was made in (the `<module>:XLA GPU module` event around it, on its own line
or, for ROCm's `Host Threads/<tid>` lines, on the thread whose executions
hold its calls), and the planes it skips."""

from __future__ import annotations

import pytest
from _gpu_trace import PS_PER_US, T0_NS, _Plane

from keras_xla_guard.errors import TraceParseError
from keras_xla_guard.trace._host_launches import host_launches
from keras_xla_guard.trace.xplane import open_xspace, xplane_pb2

_BASE = T0_NS * 1000


def _ps(us: float) -> int:
    return _BASE + round(us * PS_PER_US)


def _space():
    space = xplane_pb2().XSpace(hostnames=["h"])
    # Planes host_launches must pass over: a device plane, a host plane without markers or launches.
    _Plane(space, "/device:GPU:0", 9).event(_Plane(space, "/device:GPU:1", 8).line(1, "s"), "k", 0, 1)
    quiet = _Plane(space, "/host:quiet", 7)
    quiet.event(quiet.line(1, "t"), "work", 0, 5, other=3)
    host = _Plane(space, "/host:CPU", 0)
    line = host.line(1, "python")
    host.event(line, "train", 0, 100, step_num=5, _r=1)
    host.event(line, "FunctionRun", 10, 20, _r=1, id=3)  # `_r` without step_num: no marker
    host.event(line, "train", 12, 5, step_num=9, _r=1)  # inside the outer marker: no step of its own
    host.event(line, "cuLaunchKernel", 15, 1, correlation_id=11)  # inside FunctionRun, inside train
    host.event(line, "cuLaunchKernel", 50, 1, correlation_id=12)
    host.event(line, "ExecutorState::Process", 60, 1, correlation_id=13)  # grouped, no device work
    host.event(line, "cuLaunchKernel", 200, 1, correlation_id=14)  # outside every marker
    host.event(line, "train", 300, 100, step_num=6, _r=1)
    host.event(line, "cuMemcpyHtoDAsync_v2", 300, 1, correlation_id=15)  # at the start
    host.event(line, "cuLaunchKernel", 400, 1, correlation_id=16)  # at the end
    host.event(line, "cuLaunchHostFunc", 350, 1, correlation_id=17)  # a host callback: no device work
    legacy = _Plane(space, "/host:CPU:1", 1)
    legacy_line = legacy.line(2, "keras")
    legacy.event(legacy_line, "cuLaunchKernel", 1050, 1, correlation_id=21)
    legacy.event(legacy_line, "TraceContext", 1000, 100)  # legacy root without step_num: no marker
    return space


def test_markers_are_outermost_events_with_root_and_step_number():
    """Two `train` markers with `step_num`; FunctionRun, the nested marker and TraceContext are none."""
    assert host_launches(_space(), "t").markers == [(_ps(0), _ps(100), 5), (_ps(300), _ps(400), 6)]


def test_each_launch_goes_to_the_marker_holding_it():
    """train for 11, 12, 13; none for 14 or 21; the second train for 15, 16 and 17 (ends count)."""
    assert host_launches(_space(), "t").groups == {11: 0, 12: 0, 13: 0, 15: 1, 16: 1, 17: 1}


def test_only_driver_calls_that_put_work_on_a_device_are_launches_at_their_start():
    """cu* driver calls are listed with their start, in trace order; the Process event (13) and the
    host callback (17) are not."""
    launches = [(11, 15), (12, 50), (14, 200), (15, 300), (16, 400), (21, 1050)]
    assert host_launches(_space(), "t").launches == [(corr, _ps(us)) for corr, us in launches]


def test_calls_inside_an_execution_on_their_own_line_belong_to_it():
    """Two executions of one program on the launching thread: the calls inside each are its own, a call
    between them and one on another thread with no execution belong to none."""
    space = xplane_pb2().XSpace(hostnames=["h"])
    host = _Plane(space, "/host:CPU", 0)
    line = host.line(1, "tf_Compute/1")
    host.event(line, "jit_step:XLA GPU module", 10, 10)
    host.event(line, "cuLaunchKernel", 11, 1, correlation_id=1)
    host.event(line, "cuGraphLaunch (CudaGraph:3)", 20, 0, correlation_id=2)  # at the very end
    host.event(line, "cuLaunchKernel", 25, 1, correlation_id=3)
    host.event(line, "jit_step:XLA GPU module", 30, 10)
    host.event(line, "cuLaunchKernel", 31, 1, correlation_id=4)
    # Another thread's launch, inside its own op's TraceMe, while the first thread's execution runs.
    other = host.line(2, "tf_Compute/2")
    host.event(other, "model/dense/BiasAdd:BiasAdd", 11.5, 2)
    host.event(other, "cuLaunchKernel", 12, 1, correlation_id=5)
    executions = host_launches(space, "t").executions
    assert executions == {1: 0, 2: 0, 4: 1}


def test_rocm_calls_on_a_line_of_their_own_belong_to_the_thread_whose_executions_hold_them():
    """ROCm writes its driver calls on `Host Threads/<tid>`: each such line is matched with the
    thread whose executions hold most of its calls, even where two threads' executions overlap."""
    space = xplane_pb2().XSpace(hostnames=["h"])
    host = _Plane(space, "/host:CPU", 0)
    a, b = host.line(1, "py_xla_execute/1"), host.line(2, "py_xla_execute/2")
    calls_a, calls_b = host.line(583, "Host Threads/583"), host.line(586, "Host Threads/586")
    host.event(a, "jit_conv:XLA GPU module", 0, 10)  # execution 0 (numbered in trace order: a, then b)
    host.event(b, "jit_conv:XLA GPU module", 20, 10)  # execution 2
    host.event(a, "jit_conv:XLA GPU module", 40, 10)  # execution 1, overlapping execution 3
    host.event(b, "jit_conv:XLA GPU module", 41, 10)  # execution 3
    host.event(calls_a, "hipModuleLaunchKernel", 1, 1, correlation_id=1)
    host.event(calls_a, "hipExtModuleLaunchKernel", 42, 1, correlation_id=2)
    host.event(calls_b, "hipModuleLaunchKernel", 21, 1, correlation_id=3)
    host.event(calls_b, "hipModuleLaunchKernel", 43, 1, correlation_id=4)
    found = host_launches(space, "t")
    assert found.executions == {1: 0, 2: 1, 3: 2, 4: 3}
    assert [corr for corr, _ in found.launches] == [1, 2, 3, 4]


def test_step_zero_is_a_step_and_a_step_number_that_is_no_integer_is_no_marker():
    """`step_num=0` makes step 0; a string `step_num` makes no marker; launches at a marker's end count."""
    space = xplane_pb2().XSpace(hostnames=["h"])
    host = _Plane(space, "/host:CPU", 0)
    line = host.line(1, "python")
    host.event(line, "train", 0, 100, step_num="five", _r=1)
    host.event(line, "train", 10, 20, step_num=0, _r=1)
    host.event(line, "cuLaunchKernel", 30, 1, correlation_id=31)  # at the marker's very end
    host.event(line, "cuLaunchKernel", 90, 1, correlation_id=32)
    found = host_launches(space, "t")
    assert found.markers == [(_ps(10), _ps(30), 0)]
    assert found.groups == {31: 0}


def test_a_lazy_host_line_naming_undefined_metadata_names_the_source_in_its_error(tmp_path):
    """A host line read from `open_xspace` whose first event names no metadata raises naming the source given."""
    space = xplane_pb2().XSpace(hostnames=["h"])
    host = _Plane(space, "/host:CPU", 0)
    line = host.line(1, "python")
    host.event(line, "train", 0, 100, step_num=1, _r=1)
    line.events[0].metadata_id = 999
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(space.SerializeToString())
    with pytest.raises(
        TraceParseError, match="^run-9 is not a consistent XSpace trace: event metadata id 999"
    ):
        host_launches(open_xspace(path), "run-9")
