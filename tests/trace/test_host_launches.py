"""`host_launches` on host planes built event by event: which step marker
holds each launch (the innermost, ends inclusive), marker steps (`step_num`,
else the index), driver-API launches apart, legacy `TraceContext` roots, and
the planes it skips."""

from __future__ import annotations

from _gpu_trace import PS_PER_US, T0_NS, _Plane

from keras_xla_guard.trace._device import host_launches
from keras_xla_guard.trace.xplane import xplane_pb2

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
