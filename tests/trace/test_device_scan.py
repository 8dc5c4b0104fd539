"""`scan_device_plane` on hand-built device planes, every `DeviceTotals` field
read whole: zero and one-picosecond events, interned (reference) and
`uint64` stats, transfers known by their stat alone, correlation id 0,
loose XLA kernels, collectives by their HLO instruction, group id 0, runs
touching across streams, kernels grouped by the host execution that
launched them (idle gaps inside a run, plain kernels between runs,
concurrent streams), and several planes adding into one total, each with
its own figures.

Times are picoseconds from a line timestamp of 5 ns (5,000 ps), so every
start and end below is known by construction."""

from __future__ import annotations

from typing import Any

import pytest
from _gpu_trace import _Plane

from keras_xla_guard.errors import TraceParseError
from keras_xla_guard.trace._device import DeviceFigures, DeviceTotals, scan_device_plane
from keras_xla_guard.trace._host_launches import HostLaunches
from keras_xla_guard.trace.xplane import open_xspace, xplane_pb2

_BASE_NS = 5
_BASE = _BASE_NS * 1000


class _Device:
    """A device plane; `event` adds one event whose stats are `(name, kind, value)` with kind
    `ref` (interned in stat metadata), `str`, `int`, `uint` or `double`."""

    def __init__(self, space: Any = None, name: str = "/device:GPU:0", pid: int = 1) -> None:
        self.space = space if space is not None else xplane_pb2().XSpace()
        self.builder = _Plane(self.space, name, pid)
        self.plane = self.builder.plane

    def line(self, line_id: int, name: str) -> Any:
        line = self.builder.line(line_id, name)
        line.timestamp_ns = _BASE_NS
        return line

    def event(
        self, line: Any, name: str, offset_ps: int, duration_ps: int, *stats: tuple[str, str, Any]
    ) -> None:
        event = line.events.add(
            metadata_id=self.builder.event_id(name), offset_ps=offset_ps, duration_ps=duration_ps
        )
        for key, kind, value in stats:
            stat = event.stats.add(metadata_id=self.builder.stat_id(key))
            if kind == "ref":
                stat.ref_value = self.builder.stat_id(value)
            elif kind == "str":
                stat.str_value = value
            elif kind == "int":
                stat.int64_value = value
            elif kind == "uint":
                stat.uint64_value = value
            else:
                stat.double_value = value


def _no_host() -> HostLaunches:
    raise AssertionError("the host's launches were asked for, though no XLA kernel has a correlation id")


def _empty_host() -> HostLaunches:
    return HostLaunches({}, [], [], {})


def _scan(*devices: _Device, launches=_no_host, source: str = "t") -> DeviceTotals:
    totals = DeviceTotals()
    for device in devices:
        scan_device_plane(device.plane, totals, launches, source)
    return totals


def test_module_lines_alone_count_their_positive_runs_and_add_across_planes():
    """0 ps module events are no run, 1 ps ones are; a second plane's module line adds to the first's."""
    one = _Device()
    line = one.line(1, "XLA Modules")
    for dur in (0, 1, 5, -3):
        one.event(line, "jit_step(1)", 100, dur)
    two = _Device(one.space, "/device:GPU:1", 2)
    two.event(two.line(1, "XLA Modules - from #4"), "jit_step(1)", 0, 10)
    two.event(two.line(2, "Stream #4(Kernel)"), "empty stream line has only this instant", 0, 0)
    totals = _scan(one, two)
    assert (totals.active, totals.xla_ps, totals.runs, totals.programs) == (True, 16, 3, {})
    assert totals.devices == [
        DeviceFigures("/device:GPU:0", 6, 6, 2, 0, 0, 0),
        DeviceFigures("/device:GPU:1", 10, 10, 1, 0, 0, 0),
    ]


def test_a_stream_line_after_a_module_line_is_read_and_the_module_line_is_not():
    """Stream kernels win over the module line before them: the plane is read once, from its streams."""
    device = _Device()
    device.event(device.line(1, "XLA Modules"), "jit_step(3)", 0, 1000)
    device.event(device.line(2, "Other line"), "ignored", 0, 500)
    device.event(
        device.line(3, "Stream #1(Kernel)"),
        "fusion_kernel",
        10,
        40,
        ("hlo_module", "str", "jit_step"),
        ("program_id", "int", 3),
        ("hlo_op", "str", "fusion.1"),
        ("group_id", "int", 2),
    )
    totals = _scan(device)
    assert (totals.xla_ps, totals.runs, totals.programs) == (40, 1, {"jit_step(3)": [1, 40]})
    # No correlation id: no host execution names its run, xprof's grouping does.
    assert (totals.xla_kernels, totals.unattributed_kernels, totals.op_ps, totals.ops) == (1, 1, 0, {})


def test_interned_uint64_and_plain_stats_of_one_stream_line_are_booked_exactly():
    """Reference strings, uint64 ids, correlation id 0, instant and 1 ps kernels, transfers by stat or name."""
    device = _Device()
    line = device.line(1, "Stream #7(Kernel,MemcpyH2D)")
    device.event(
        line,
        "fusion_kernel",
        0,
        100,
        ("hlo_module", "ref", "jit_step"),
        ("hlo_op", "ref", "fusion.3"),
        ("program_id", "uint", 5),
        ("correlation_id", "uint", 0),
        ("group_id", "uint", 4),
        ("op_type", "ref", "Dense"),
        ("op_name", "ref", "model/dense"),
    )
    device.event(line, "instant_kernel", 150, 0, ("correlation_id", "int", 7))
    device.event(
        line, "tiny_kernel", 160, 1, ("tf_op", "ref", "dense/MatMul:MatMul"), ("correlation_id", "int", 8)
    )
    device.event(
        line, "copy_kernel", 200, 50, ("memcpy_details", "ref", "size:64"), ("correlation_id", "int", 0)
    )
    device.event(line, "Memset", 260, 10, ("correlation_id", "int", 9))
    device.event(line, "Memcpy without correlation", 280, 5)
    totals = _scan(device, launches=_empty_host)
    assert (totals.active, totals.xla_ps, totals.runs) == (True, 100, 1)
    assert totals.programs == {"jit_step(5)": [1, 100]}
    assert totals.xla_ops == {("Dense", "model/dense"): [100, 1]}
    assert (totals.op_ps, totals.ops) == (1, {("MatMul", "dense/MatMul"): [1, 1]})
    assert (totals.transfer_ps, totals.transfer_launches) == (65, [(0, 50), (9, 10)])
    assert totals.correlations == {0, 7, 8, 9}
    assert (totals.xla_kernels, totals.unattributed_kernels, totals.step_busy, totals.step_launches) == (
        1,
        1,
        {},
        {},
    )
    assert (totals.collective_ps, totals.collective_kernels, totals.collective_overlap_ps) == (0, 0, 0)
    assert totals.devices == [DeviceFigures("/device:GPU:0", 100, 100, 1, 1, 65, 0)]
    assert (totals.graph_ps, totals.graph_kernels, totals.graph_programs) == (0, 0, set())


def test_loose_xla_kernels_add_up_and_are_named_by_their_interned_annotation():
    """Two XLA ops outside any module: their time summed, no run; a `ns::` HLO path names by its last part."""
    device = _Device()
    line = device.line(1, "Stream #1(Kernel)")
    device.event(line, "k1", 0, 20, ("hlo_op", "str", "a::b::fusion.7"))
    device.event(
        line,
        "k2",
        30,
        30,
        ("hlo_op", "ref", "fusion.9"),
        ("op_type", "ref", "Conv2D"),
        ("op_name", "ref", "model/conv"),
    )
    totals = _scan(device)
    assert (totals.xla_ps, totals.runs, totals.programs, totals.xla_kernels) == (50, 0, {}, 0)
    assert totals.xla_ops == {("fusion", "fusion.7"): [20, 1], ("Conv2D", "model/conv"): [30, 1]}
    assert (totals.op_ps, totals.unattributed_kernels) == (0, 0)
    # XLA time of no run: busy 50 ps, no span.
    assert totals.devices == [DeviceFigures("/device:GPU:0", 50, 0, 0, 0, 0, 0)]


def test_a_collective_is_known_by_the_last_part_of_a_scoped_hlo_op():
    """`ns::inner::all-reduce.2` is a collective; its overlap with another stream's kernel is exact."""
    device = _Device()
    comm, compute = device.line(1, "Stream #1(Kernel)"), device.line(2, "Stream #2(Kernel)")
    stats = (("hlo_module", "str", "jit_step"), ("program_id", "int", 1), ("group_id", "int", 3))
    device.event(comm, "ar1", 100, 40, *stats, ("hlo_op", "str", "ns::inner::all-reduce.2"))
    device.event(comm, "ar2", 200, 40, *stats, ("hlo_op", "str", "x::all-gather"))
    device.event(compute, "f1", 120, 100, *stats, ("hlo_op", "str", "fusion.1"))
    device.event(compute, "f2", 230, 100, *stats, ("hlo_op", "str", "fusion.2"))
    totals = _scan(device)
    assert (totals.collective_ps, totals.collective_kernels) == (80, 2)
    # ar1 [100, 140] meets f1 [120, 220] for 20; ar2 [200, 240] meets f1 for 20 and f2 [230, 330] for 10.
    assert totals.collective_overlap_ps == 50
    assert totals.xla_ops == {
        ("all-reduce", "all-reduce.2"): [40, 1],
        ("all-gather", "all-gather"): [40, 1],
        ("fusion", "fusion.1"): [100, 1],
        ("fusion", "fusion.2"): [100, 1],
    }
    # One program, one group: the two streams' runs [100, 240] and [120, 330] merge into one.
    assert (totals.xla_ps, totals.runs, totals.programs) == (230, 1, {"jit_step(1)": [1, 230]})


def test_collectives_apart_from_other_kernels_overlap_nothing():
    """A collective stream with nothing beside it overlaps 0 ps, not a rounding picosecond."""
    device = _Device()
    line = device.line(1, "Stream #1(Kernel)")
    device.event(line, "ncclDevKernel_AllReduce", 0, 10, ("correlation_id", "int", 1))
    device.event(line, "ncclDevKernel_AllReduce", 20, 10, ("correlation_id", "int", 2))
    other = device.line(2, "Stream #2(Kernel)")
    device.event(other, "plain", 40, 10)
    totals = _scan(device)
    assert (totals.collective_ps, totals.collective_kernels, totals.collective_overlap_ps) == (20, 2, 0)
    assert (totals.op_ps, totals.ops, totals.xla_ps) == (10, {("(device kernel)", "plain"): [10, 1]}, 0)


def test_runs_of_one_program_touching_across_streams_are_two_runs():
    """Stream 1 runs [0, 10] and stream 2 [10, 20] of one program and group: they touch, they do not overlap."""
    device = _Device()
    stats = (("hlo_module", "str", "jit_step"), ("hlo_op", "str", "fusion"), ("group_id", "int", 1))
    device.event(device.line(1, "Stream #1(Kernel)"), "a", 0, 10, *stats)
    device.event(device.line(2, "Stream #2(Kernel)"), "b", 10, 10, *stats)
    totals = _scan(device)
    assert (totals.xla_ps, totals.runs, totals.programs) == (20, 2, {"jit_step": [2, 20]})


def test_host_grouped_runs_land_in_their_markers_step_at_absolute_picoseconds():
    """No group_id: correlation 0 and 5 find markers 2 and 0 on the host; xprof's group 0 is no host marker."""
    device = _Device()
    line = device.line(1, "Stream #1(Kernel)")
    stats = (("hlo_module", "str", "jit_step"), ("hlo_op", "str", "fusion"))
    device.event(line, "a", 0, 10, *stats, ("correlation_id", "int", 0))
    device.event(
        line,
        "b",
        50,
        10,
        ("hlo_module", "str", "other"),
        ("hlo_op", "str", "f"),
        ("correlation_id", "int", 5),
    )
    device.event(line, "c", 100, 10, *stats, ("group_id", "int", 0))
    asked = []

    def launches() -> HostLaunches:
        asked.append(1)
        return HostLaunches({0: 2, 5: 0}, [], [], {})

    totals = _scan(device, launches=launches)
    assert asked == [1]
    assert totals.step_busy == {2: [(_BASE, _BASE + 10)], 0: [(_BASE + 50, _BASE + 60)]}
    assert totals.step_launches == {2: 1, 0: 1}
    assert (totals.runs, totals.xla_kernels, totals.unattributed_kernels) == (3, 3, 3)


@pytest.mark.parametrize("group", [("group_id", "str", "7"), ("group_id", "int", -1)])
def test_a_group_id_that_is_no_xprof_group_is_no_group(group):
    """A `group_id` written as a string or a negative integer puts its kernel in no step: before, it
    read as -1, the key of the host's first step marker."""
    device = _Device()
    line = device.line(1, "Stream #1(Kernel)")
    device.event(line, "a", 0, 10, ("hlo_module", "str", "jit_step"), ("hlo_op", "str", "fusion"), group)
    totals = _scan(device)
    assert (totals.step_busy, totals.step_launches) == ({}, {})
    assert (totals.runs, totals.xla_kernels, totals.unattributed_kernels) == (1, 1, 1)


def test_kernels_no_marker_or_execution_holds_are_grouped_as_xprof_derives_runs_on_every_plane():
    """Two planes whose kernels no host marker or execution holds: one derived run per plane, busy
    time the kernels' (10 ps each), span first start to last end."""
    first, second = _Device(), _Device(name="/device:GPU:1", pid=2)
    stats = (("hlo_module", "str", "jit_step"), ("hlo_op", "str", "fusion"), ("correlation_id", "int", 3))
    for device, n in ((first, 2), (second, 3)):
        line = device.line(1, "Stream #1(Kernel)")
        for i in range(n):
            device.event(line, "k", 100 * i, 10, *stats)
    totals = _scan(first, second, launches=_empty_host)
    assert (totals.xla_kernels, totals.unattributed_kernels, totals.step_busy) == (5, 5, {})
    # One run per plane, first kernel's start to last one's end: [0, 110] and [0, 210].
    assert (totals.runs, totals.xla_ps, totals.span_ps) == (2, 50, 320)
    assert [(d.device, d.xla_ps, d.span_ps, d.runs) for d in totals.devices] == [
        ("/device:GPU:0", 20, 110, 1),
        ("/device:GPU:1", 30, 210, 1),
    ]


def test_kernels_are_grouped_by_the_host_execution_that_launched_them():
    """Executions 0 and 1 of one program, a plain kernel between them: two runs (xprof's derived rule
    would merge them, no group telling them apart); run 0 idles 30 ps between its kernels: busy 20 ps,
    span 50 ps; run 1's kernels on two streams at once count each moment once."""
    device = _Device()
    main, side = device.line(1, "Stream #1(Kernel)"), device.line(2, "Stream #2(Kernel)")
    stats = (("hlo_module", "str", "jit_step"), ("program_id", "int", 2), ("hlo_op", "str", "fusion"))
    device.event(main, "a", 0, 10, *stats, ("correlation_id", "int", 1))
    device.event(main, "b", 40, 10, *stats, ("correlation_id", "int", 2))
    device.event(main, "plain", 60, 10, ("correlation_id", "int", 3))
    device.event(main, "c", 100, 30, *stats, ("correlation_id", "int", 4))
    device.event(side, "d", 110, 30, *stats, ("correlation_id", "int", 5))
    host = HostLaunches({}, [], [], {1: 0, 2: 0, 4: 1, 5: 1})
    totals = _scan(device, launches=lambda: host)
    assert (totals.runs, totals.programs, totals.unattributed_kernels) == (2, {"jit_step(2)": [2, 60]}, 0)
    # Busy: 10 + 10 + union([100, 130], [110, 140]) = 60; spans: 50 + 40 = 90.
    assert totals.devices == [DeviceFigures("/device:GPU:0", 60, 90, 2, 10, 0, 0)]
    assert (totals.xla_ps, totals.span_ps, totals.op_ps) == (60, 90, 10)


def test_an_execution_takes_the_step_of_its_first_kernel():
    """An execution whose launches straddle two markers is one run, in its first kernel's step, whose
    busy time holds all of the run's kernels."""
    device = _Device()
    line = device.line(1, "Stream #1(Kernel)")
    stats = (("hlo_module", "str", "m"), ("hlo_op", "str", "f"))
    device.event(line, "late", 50, 10, *stats, ("correlation_id", "int", 2))
    device.event(line, "early", 0, 10, *stats, ("correlation_id", "int", 1))
    host = HostLaunches({1: 3, 2: 4}, [], [], {1: 7, 2: 7})
    totals = _scan(device, launches=lambda: host)
    assert totals.step_launches == {3: 1}
    assert totals.step_busy == {3: [(_BASE + 50, _BASE + 60), (_BASE, _BASE + 10)]}


def test_a_lazy_device_line_naming_undefined_metadata_names_the_source_in_its_error(tmp_path):
    """A device line read from `open_xspace` whose first event names no metadata raises naming the source given."""
    device = _Device()
    line = device.line(1, "Stream #1(Kernel)")
    device.event(line, "k", 0, 10, ("hlo_op", "str", "fusion"))
    line.events[0].metadata_id = 999
    path = tmp_path / "gpu.xplane.pb"
    path.write_bytes(device.space.SerializeToString())
    totals = DeviceTotals()
    with pytest.raises(
        TraceParseError, match="^run-7 is not a consistent XSpace trace: event metadata id 999 is undefined"
    ):
        scan_device_plane(open_xspace(path).planes[0], totals, _no_host, "run-7")
