"""`host_launches` on host planes built event by event: which step marker
holds each launch (the innermost, ends inclusive), marker steps (`step_num`,
else the index), driver-API launches apart, legacy `TraceContext` roots, and
the planes it skips."""

from __future__ import annotations

import pytest
from _gpu_trace import PS_PER_US, T0_NS, _Plane

from keras_xla_guard.errors import TraceParseError
from keras_xla_guard.trace._device import host_launches
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
    host.event(line, "inner", 10, 20, _r=1)  # no step_num: its index
    host.event(line, "cuLaunchKernel", 15, 1, correlation_id=11)  # inside inner
    host.event(line, "cuLaunchKernel", 50, 1, correlation_id=12)  # after inner, inside train
    host.event(line, "ExecutorState::Process", 60, 1, correlation_id=13)  # a launch, not a driver call
    host.event(line, "cuLaunchKernel", 200, 1, correlation_id=14)  # outside every marker
    host.event(line, "train", 300, 100, step_num=6, _r=1)
    host.event(line, "cuMemcpyHtoDAsync_v2", 300, 1, correlation_id=15)  # at the start
    host.event(line, "cuLaunchKernel", 400, 1, correlation_id=16)  # at the end
    legacy = _Plane(space, "/host:CPU:1", 1)
    legacy_line = legacy.line(2, "keras")
    legacy.event(legacy_line, "cuLaunchKernel", 1050, 1, correlation_id=21)
    legacy.event(legacy_line, "TraceContext", 1000, 100)
    return space


def test_each_launch_goes_to_the_innermost_marker_holding_it():
    """Inner marker for 11; train for 12, 13; none for 14; the second train for 15 and 16 (ends count)."""
    found = host_launches(_space(), "t")
    assert found.markers == [
        (_ps(0), _ps(100), 5),
        (_ps(10), _ps(30), 1),
        (_ps(300), _ps(400), 6),
        (_ps(1000), _ps(1100), 3),
    ]
    assert found.groups == {11: 1, 12: 0, 13: 0, 15: 2, 16: 2, 21: 3}


def test_only_driver_calls_are_device_work_launches_at_their_start():
    """cu* driver calls are listed with their start, in trace order; the Process event (13) is grouped, not listed."""
    found = host_launches(_space(), "t")
    launches = [(11, 15), (12, 50), (14, 200), (15, 300), (16, 400), (21, 1050)]
    assert found.launches == [(corr, _ps(us)) for corr, us in launches]


def _edge_space():
    space = xplane_pb2().XSpace(hostnames=["h"])
    # Only Keras' legacy roots, no `_r` and no correlation id on the plane.
    legacy = _Plane(space, "/host:legacy", 3)
    legacy.event(legacy.line(1, "keras"), "TraceContext", 2000, 10)
    host = _Plane(space, "/host:CPU", 0)
    line = host.line(1, "python")
    host.event(line, "train", 0, 100, step_num="five", _r=1)  # a step that is no integer: its index
    host.event(line, "train", 10, 20, step_num=0, _r=1)  # step 0 is a step, not a missing one
    host.event(line, "cuLaunchKernel", 100, 1, correlation_id=31)  # at the outer marker's very end
    return space


def test_legacy_roots_alone_zero_steps_and_ends_held_behind_an_inner_marker():
    """A legacy-only plane keeps its marker; step 0 stays 0; a launch at an outer end behind an ended inner marker."""
    found = host_launches(_edge_space(), "t")
    assert found.markers == [(_ps(0), _ps(100), 0), (_ps(10), _ps(30), 0), (_ps(2000), _ps(2010), 2)]
    assert found.groups == {31: 0}
    assert found.launches == [(31, _ps(100))]


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
