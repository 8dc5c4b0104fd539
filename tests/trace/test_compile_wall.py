"""Wall-clock compile time of a trace: compile intervals over all host threads, overlaps once."""

from __future__ import annotations

import pytest
from _gpu_trace import PS_PER_US, T0_NS, _Plane
from _xspace import build_space

from keras_xla_guard.errors import TraceTooLargeError
from keras_xla_guard.trace.compile_wall import compile_intervals_ps, compile_wall_s, union_length
from keras_xla_guard.trace.xplane import xplane_pb2


def test_union_length_counts_overlaps_once():
    """The union of intervals: overlapping and nested ones count once."""
    assert union_length([(0, 10), (5, 15), (20, 25)]) == 20
    assert union_length([(20, 25), (0, 30), (2, 3)]) == 30
    assert union_length([]) == 0


def test_compile_intervals_cover_parallel_compile_threads_once():
    """Compile events on two threads that overlap add their union, not their sum."""
    space = build_space(
        {
            "python": [("JitCompiler::Compile", 0, 100), ("MatMul:MatMul", 200, 50)],
            "tf_Compute/1": [("CpuCompiler::RunBackend", 50, 100)],
        }
    )
    intervals = compile_intervals_ps(space)
    assert sorted(intervals) == [(1_000_000, 101_000_000), (51_000_000, 151_000_000)]
    assert union_length(intervals) == 150_000_000


def test_compile_intervals_come_from_host_planes_only_whatever_their_order():
    """A device plane, the metadata plane and a host plane without compiles before the host's are passed over."""
    space = xplane_pb2().XSpace()
    for name, pid, event in (
        ("/device:GPU:0", 1, "JitCompiler::Compile"),
        ("/host:metadata", 2, "JitCompiler::Compile"),
        ("/host:quiet", 3, "MatMul:MatMul"),
        ("/host:CPU", 4, "JitCompiler::Compile"),
    ):
        plane = _Plane(space, name, pid)
        plane.event(plane.line(1, "python"), event, 2, 3)
    base = T0_NS * 1000
    assert compile_intervals_ps(space) == [(base + 2 * PS_PER_US, base + 5 * PS_PER_US)]


def test_compile_wall_s_of_a_file_is_its_intervals_union_in_seconds(tmp_path):
    """`compile_wall_s` reads the file given and returns the union of its compile intervals, in seconds."""
    space = build_space(
        {
            "python": [("JitCompiler::Compile", 0, 100), ("MatMul:MatMul", 200, 50)],
            "tf_Compute/1": [("CpuCompiler::RunBackend", 50, 100), ("CpuCompiler::RunHloPasses", 300, 7)],
        }
    )
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    # [0, 150) and [300, 307) us.
    assert compile_wall_s(path) == pytest.approx(157e-6, rel=1e-12)
    assert compile_wall_s(str(path), max_bytes=path.stat().st_size) == pytest.approx(157e-6, rel=1e-12)
    with pytest.raises(TraceTooLargeError, match=str(path.stat().st_size)):
        compile_wall_s(path, max_bytes=path.stat().st_size - 1)
