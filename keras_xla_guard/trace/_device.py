"""Accelerator planes: XLA program runs, plain TF kernels, transfers and collectives.

A GPU plane (`/device:GPU:N`) as the profiler writes it has one line per
CUDA stream, `Stream #<id>(<event types>)`, written by XLA's CUPTI
collector (`xla/backends/profiler/gpu/cupti_collector.cc`). Each event is a
kernel (`kernel_details` stat), a memory copy (`memcpy_details`) or a
memset (`memset_details`); the annotation stack the kernel ran under adds
`tf_op` (its outermost name) and the keys of its annotations: XLA's
`XlaModule:#hlo_module=...,program_id=...#` and
`Thunk:#name=...,hlo_op=...#` (with `--xla_gpu_trace_annotation_level=1`
also `op_name`, `op_type`, `source_file`, `shape`;
`xla/backends/gpu/runtime/annotation.cc`). A kernel that ran inside a CUDA
graph (an XLA command buffer) carries `cuda_graph_id`, and its annotation
is the one its graph was launched under; with CUPTI's graph-level tracing
(`gpu_enable_cupti_activity_graph_trace`) a whole graph run is one
`CudaGraphExec:<id>` event with `cuda_graph_exec_id`
(`xla/backends/profiler/gpu/cupti_buffer_events.cc`).

XProf derives "XLA Modules" lines from those stats when it loads a trace
(`GenerateDerivedTimeLines`, `xprof/utils/derived_timeline.cc`): on each
stream, consecutive kernels (graph runs included) of one program
(`hlo_module` and `program_id`) in one step group (`group_id`) become one
module event, spanning the first kernel's start to the last one's end;
memory copies and kernels of other code do not interrupt it. This module
follows that rule, and then counts a program's runs on several streams
that overlap in time (a collective on its own stream beside the compute)
once, as the union of their spans, where xprof keeps one per stream:

- XLA time is the sum of those runs, launches their count, and each
  program's time its runs' sum.
- Step groups: a kernel's `group_id` stat where xprof already set one;
  otherwise the step marker (a host event with the `_r` stat, or Keras'
  `TraceContext`) whose span holds the host event that launched it (same
  `correlation_id`); a kernel with neither takes the group of the XLA
  kernel before it on its plane (as xprof's `ProcessUngroupedEvents` does
  with the event before it).
- Memory copies and memsets are transfers, never ops, whatever annotation
  they ran under.
- Collective kernels (NCCL's, and XLA's all-reduce, all-gather,
  reduce-scatter, all-to-all, collective-permute, send and recv ops) are
  their own figure: inside an XLA program they stay in its runs, outside
  any program they are in neither XLA nor plain-op time.
- Kernels inside CUDA graphs count for the program their graph ran in,
  marked as not split per op; a graph with no program annotation is XLA
  time of the program `(command buffer)` (only XLA builds CUDA graphs in a
  TensorFlow or JAX process).
- Other kernels are plain TF ops named by their `tf_op` stat
  (`<op_name>:<OpType>`), or by the kernel name when they have none.

Planes without such stream kernels (TPU planes, whose runtime writes
"XLA Modules" itself, or traces holding only xprof's derived lines) are
read from their "XLA Modules" lines instead; a plane is never read both
ways, so nothing is counted twice. Pure: no Keras, no TensorFlow.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from keras_xla_guard.trace._events import stat_str, stats_str
from keras_xla_guard.trace.classify import split_tf_op
from keras_xla_guard.trace.xplane import iter_lines, stat_index

__all__ = ["COMMAND_BUFFER", "DeviceTotals", "HostLaunches", "host_launches", "scan_device_plane"]

_MODULE_LINE = "XLA Modules"
# XProf >= 2.2x writes one derived module line per stream, "XLA Modules - from #<id>".
_MODULE_LINE_PER_STREAM = "XLA Modules - from #"
_TRANSFER_STATS = ("memcpy_details", "memset_details")
_TRANSFER_NAMES = ("Memcpy", "Memset")
# Step markers XProf groups by: any TraceMe with the `_r` (is root) stat,
# and the legacy root Keras' TensorBoard callback writes.
_ROOT_STAT = "_r"
_LEGACY_ROOT = "TraceContext"
# CUDA driver calls that put work on a device, as CUPTI's callbacks name
# them on the host (`cuLaunchKernel`, `cuMemcpyHtoDAsync_v2`,
# `cuMemsetD32Async`, `cuGraphLaunch (CudaGraph:7)`): each has a device
# event with its correlation id unless the device's was lost.
_LAUNCH_API = ("cuLaunch", "cuMemcpy", "cuMemset", "cuGraphLaunch")
# The program a CUDA graph without an XLA module annotation is booked to.
COMMAND_BUFFER = "(command buffer)"
_GRAPH_EXEC_NAME = "CudaGraphExec:"
# XLA's collective HLO ops (async pairs and numbered clones included).
_COLLECTIVE_HLO = re.compile(
    r"^(?:all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute"
    r"|collective-broadcast|send|recv)(?:-start|-done)?(?:\.\d+)?$"
)
# NCCL's kernels: `ncclDevKernel_AllReduce_Sum_f32_RING_LL`, `ncclKernel_...`.
_NCCL_KERNEL = re.compile(r"nccl", re.IGNORECASE)
_HLO_SUFFIX = re.compile(r"\.\d+$")


class _Kernel(NamedTuple):
    """One XLA kernel on a stream line, in line order."""

    start: int
    end: int
    module: str
    program: int
    group: int | None
    corr: int
    graph: bool


class DeviceTotals:
    """What the device planes of one trace hold (picoseconds).

    Attributes:
        active: Whether any plane had events on its stream or module lines.
        xla_ps: Time of XLA program runs.
        runs: XLA program runs (launches).
        programs: Program label -> [runs, ps].
        graph_programs: Labels of programs whose kernels ran inside CUDA
            graphs (command buffers), so not split per op.
        graph_ps: Device time of kernels that ran inside CUDA graphs.
        graph_kernels: How many there were (a graph-level event counts one).
        transfer_ps: Time of memory copies and memsets.
        collective_ps: Time of collective kernels.
        collective_overlap_ps: The part of it during which other streams
            of its plane ran non-collective kernels.
        collective_kernels: How many collective kernels there were.
        op_ps: Time of plain (non-XLA) kernels.
        ops: `(op_type, op_name)` -> [ps, count] of plain kernels.
        xla_ops: `(op_type, op_name)` -> [ps, count] of XLA kernels, named
            by the richest annotation they carry.
        xla_kernels: XLA kernels met on stream lines.
        unmarked_kernels: XLA kernels on planes where no kernel could be
            placed in a step (no `group_id`, no launch inside a step marker).
        correlations: Correlation ids of every device event.
        step_runs: Index of a host step marker -> the (start, end) of each
            program run the device ran for that step (runs of one program
            on several streams merged), for runs placed in steps by host
            markers.
        transfer_launches: `(correlation id, ps)` of each copy and memset
            with a correlation id.
    """

    def __init__(self) -> None:
        self.active = False
        self.xla_ps = 0
        self.runs = 0
        self.programs: dict[str, list[int]] = {}
        self.graph_programs: set[str] = set()
        self.graph_ps = 0
        self.graph_kernels = 0
        self.transfer_ps = 0
        self.collective_ps = 0
        self.collective_overlap_ps = 0
        self.collective_kernels = 0
        self.op_ps = 0
        self.ops: dict[tuple[str, str], list[int]] = {}
        self.xla_ops: dict[tuple[str, str], list[int]] = {}
        self.xla_kernels = 0
        self.unmarked_kernels = 0
        self.correlations: set[int] = set()
        self.step_runs: dict[int, list[tuple[int, int]]] = {}
        self.transfer_launches: list[tuple[int, int]] = []

    def add_op(self, key: tuple[str, str], ps: int) -> None:
        """Books one plain kernel."""
        self.op_ps += ps
        _add(self.ops, key, ps)

    def add_run(self, program: str, ps: int) -> None:
        """Books one XLA program run."""
        self.xla_ps += ps
        self.runs += 1
        rec = self.programs.setdefault(program, [0, 0])
        rec[0] += 1
        rec[1] += ps


def _add(table: dict[tuple[str, str], list[int]], key: tuple[str, str], ps: int) -> None:
    rec = table.setdefault(key, [0, 0])
    rec[0] += ps
    rec[1] += 1


class HostLaunches:
    """The host planes' step markers and device work launches.

    Attributes:
        groups: CUPTI correlation id -> index (in `markers`) of the step
            marker whose span holds the launch; launches outside every
            marker are left out.
        markers: `(start ps, end ps, step)` of each step marker, in time
            order; `step` is its `step_num` stat, or its index when it has
            none (Keras' `TraceContext`).
        launches: `(correlation id, start ps)` of each driver call that
            puts work on a device (kernel launches, copies, memsets, graph
            launches).
    """

    def __init__(
        self, groups: dict[int, int], markers: list[tuple[int, int, int]], launches: list[tuple[int, int]]
    ) -> None:
        self.groups = groups
        self.markers = markers
        self.launches = launches


def host_launches(space: Any, source: str) -> HostLaunches:
    """Reads the host planes' step markers and kernel launches.

    Args:
        space: The trace.
        source: Name used in error messages.

    Returns:
        The markers' grouping of launches and the launches themselves.
    """
    found: list[tuple[int, int, int]] = []
    launches: list[tuple[int, int]] = []
    device_work: list[tuple[int, int]] = []
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        ids = stat_index(plane)
        root_id, corr_id = ids.get(_ROOT_STAT, -1), ids.get("correlation_id", -1)
        step_id = ids.get("step_num", -1)
        legacy = {mid for mid, md in plane.event_metadata.items() if md.name == _LEGACY_ROOT}
        if root_id < 0 and corr_id < 0 and not legacy:
            continue
        api = {mid for mid, md in plane.event_metadata.items() if md.name.startswith(_LAUNCH_API)}
        for line in iter_lines(plane, source=source):
            base = line.timestamp_ns * 1000
            for event in line.events:
                start = base + event.offset_ps
                rooted, step = event.metadata_id in legacy, -1
                for stat in event.stats:
                    if stat.metadata_id == root_id:
                        rooted = True
                    elif stat.metadata_id == step_id:
                        step = _int_value(stat)
                    elif stat.metadata_id == corr_id:
                        launches.append((_int_value(stat), start))
                        if event.metadata_id in api:
                            device_work.append(launches[-1])
                if rooted:
                    found.append((start, start + event.duration_ps, step))
    markers = sorted(set(found))
    markers = [(a, b, step if step >= 0 else i) for i, (a, b, step) in enumerate(markers)]
    roots = [(a, b) for a, b, _ in markers]
    starts = [start for start, _ in roots]
    # reach[i]: the latest end among markers 0..i, so that the walk back
    # below stops at once when no earlier marker can hold the launch.
    reach = list(itertools.accumulate((end for _, end in roots), max))
    group_of: dict[int, int] = {}
    for corr, at in launches:
        # The innermost marker holding the launch: the latest that started
        # before it and has not ended.
        i = bisect.bisect_right(starts, at) - 1
        while i >= 0 and roots[i][1] < at and reach[i] >= at:
            i -= 1
        if i >= 0 and roots[i][1] >= at:
            group_of[corr] = i
    return HostLaunches(group_of, markers, device_work)


def _int_value(stat: Any) -> int:
    kind = stat.WhichOneof("value")
    return int(getattr(stat, kind)) if kind in ("int64_value", "uint64_value") else -1


class _Ids(NamedTuple):
    """Stat metadata ids of one plane (-1 when the plane has no such stat)."""

    hlo_op: int
    module: int
    program: int
    group: int
    corr: int
    tf_op: int
    graph: frozenset[int]
    transfer: frozenset[int]
    op_name: int
    op_type: int
    name: int
    prefix: int

    @classmethod
    def of(cls, plane: Any) -> _Ids:
        ids = stat_index(plane)
        get = ids.get
        return cls(
            get("hlo_op", -1),
            get("hlo_module", -1),
            get("program_id", -1),
            get("group_id", -1),
            get("correlation_id", -1),
            get("tf_op", -1),
            frozenset(ids[n] for n in ("cuda_graph_id", "cuda_graph_exec_id") if n in ids),
            frozenset(ids[n] for n in _TRANSFER_STATS if n in ids),
            get("op_name", -1),
            get("op_type", -1),
            get("name", -1),
            get("prefix", -1),
        )


def scan_device_plane(
    plane: Any, totals: DeviceTotals, launches: Callable[[], HostLaunches], source: str
) -> None:
    """Books one accelerator plane into `totals`.

    Args:
        plane: A `/device:` plane (parsed, or of `open_xspace`).
        totals: Where the plane's figures are added.
        launches: Gives the host's launches (`host_launches`); called only
            when a kernel of an XLA program carries no `group_id`.
        source: Name used in error messages.
    """
    ids = _Ids.of(plane)
    module_events: list[int] = []
    loose_xla_ps = 0
    # Per stream line, its XLA kernels in line order.
    streams: list[list[_Kernel]] = []
    # (start, end) of collective and of other kernels, and each one's stream.
    collectives: list[tuple[int, int, int]] = []
    compute: list[tuple[int, int, int]] = []
    for stream, line in enumerate(iter_lines(plane, source=source)):
        if line.name == _MODULE_LINE or line.name.startswith(_MODULE_LINE_PER_STREAM):
            if line.events:
                totals.active = True
            # Instant or negative-length events carry no time (only edited
            # or damaged traces have the latter).
            module_events.extend(e.duration_ps for e in line.events if e.duration_ps > 0)
            continue
        if not line.name.startswith("Stream"):
            continue
        base = line.timestamp_ns * 1000
        kernels: list[_Kernel] = []
        for event in line.events:
            totals.active = True
            dur = event.duration_ps
            module, hlo_op, program, group, corr, transfer, graph = "", "", -1, None, -1, False, False
            for stat in event.stats:
                sid = stat.metadata_id
                if sid == ids.module:
                    module = stat_str(plane, stat)
                elif sid == ids.hlo_op:
                    hlo_op = stat_str(plane, stat)
                elif sid == ids.program:
                    program = _int_value(stat)
                elif sid == ids.group:
                    # xprof's groups are non-negative integers; negative
                    # ones stand for host markers (`_resolve_groups`), so
                    # any other value is no group at all.
                    group = _int_value(stat)
                    group = group if group >= 0 else None
                elif sid == ids.corr:
                    corr = _int_value(stat)
                elif sid in ids.transfer:
                    transfer = True
                elif sid in ids.graph:
                    graph = _int_value(stat) != 0
            if corr >= 0:
                totals.correlations.add(corr)
            if dur <= 0:
                continue
            start = base + event.offset_ps
            name = _event_name(plane, event)
            graph = graph or name.startswith(_GRAPH_EXEC_NAME)
            if transfer or name.startswith(_TRANSFER_NAMES):
                totals.transfer_ps += dur
                if corr >= 0:
                    totals.transfer_launches.append((corr, dur))
                continue
            collective = bool(_NCCL_KERNEL.search(name) or _COLLECTIVE_HLO.match(hlo_op.rsplit("::", 1)[-1]))
            if collective:
                totals.collective_ps += dur
                totals.collective_kernels += 1
                collectives.append((start, start + dur, stream))
            else:
                compute.append((start, start + dur, stream))
            if graph:
                totals.graph_ps += dur
                totals.graph_kernels += 1
                module = module or COMMAND_BUFFER
            if module:
                kernels.append(_Kernel(start, start + dur, module, program, group, corr, graph))
                _add(totals.xla_ops, _xla_op_key(plane, event, ids, hlo_op, graph, module, program), dur)
            elif hlo_op:
                # An XLA op outside any module annotation: XLA time, no run.
                loose_xla_ps += dur
                _add(totals.xla_ops, _xla_op_key(plane, event, ids, hlo_op, graph, module, program), dur)
            elif not collective:
                totals.add_op(_op_key(plane, event, ids.tf_op), dur)
        if kernels:
            streams.append(kernels)
    totals.collective_overlap_ps += _overlap(collectives, compute)
    if not streams and not loose_xla_ps:
        totals.xla_ps += sum(module_events)
        totals.runs += len(module_events)
        return
    totals.xla_ps += loose_xla_ps
    groups = _resolve_groups(streams, launches)
    xla_kernels = sum(len(k) for k in streams)
    totals.xla_kernels += xla_kernels
    if all(g is None for found in groups.values() for g in found):
        totals.unmarked_kernels += xla_kernels
    runs: dict[tuple[str, int | None], list[tuple[int, int]]] = {}
    for kernels in streams:
        run_key: tuple[str, int, int | None] | None = None
        run_start = run_end = 0
        for kernel, group in zip(kernels, groups[id(kernels)]):
            if kernel.graph:
                totals.graph_programs.add(_program_label(kernel.module, kernel.program))
            key = (kernel.module, kernel.program, group)
            if key == run_key:
                run_end = max(run_end, kernel.end)
                continue
            if run_key is not None:
                runs.setdefault((_program_label(*run_key[:2]), run_key[2]), []).append((run_start, run_end))
            run_key, run_start, run_end = key, kernel.start, kernel.end
        if run_key is not None:
            runs.setdefault((_program_label(*run_key[:2]), run_key[2]), []).append((run_start, run_end))
    for (label, group), spans in runs.items():
        for start, end in _merged(spans):
            totals.add_run(label, end - start)
            if group is not None and group < 0:
                # Host groups are -1 - marker index (see _resolve_groups).
                totals.step_runs.setdefault(-1 - group, []).append((start, end))


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A program's runs in one step, those that overlap in time (on several streams) made one."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _overlap(collectives: list[tuple[int, int, int]], compute: list[tuple[int, int, int]]) -> int:
    """Time during which collective kernels ran while another stream ran other kernels."""
    total = 0
    for stream in {s for _, _, s in collectives}:
        mine = _merged([(a, b) for a, b, s in collectives if s == stream])
        others = _merged([(a, b) for a, b, s in compute if s != stream])
        i = j = 0
        while i < len(mine) and j < len(others):
            total += max(0, min(mine[i][1], others[j][1]) - max(mine[i][0], others[j][0]))
            if mine[i][1] < others[j][1]:
                i += 1
            else:
                j += 1
    return total


def _resolve_groups(
    streams: list[list[_Kernel]], launches: Callable[[], HostLaunches]
) -> dict[int, list[int | None]]:
    """Each kernel's step group: its own, its launch's, or the one before it on the plane."""
    found: dict[int, list[int | None]] = {}
    host: dict[int, int] | None = None
    timeline: list[tuple[int, int, int]] = []
    for kernels in streams:
        own: list[int | None] = []
        for i, kernel in enumerate(kernels):
            group = kernel.group
            if group is None and kernel.corr >= 0:
                if host is None:
                    host = launches().groups
                launch_group = host.get(kernel.corr)
                # Host groups are told apart from xprof's own ids by sign.
                group = None if launch_group is None else -1 - launch_group
            own.append(group)
            timeline.append((kernel.start, id(kernels), i))
        found[id(kernels)] = own
    last: int | None = None
    for _, key, i in sorted(timeline):
        group = found[key][i]
        if group is None:
            found[key][i] = last
        else:
            last = group
    return found


def _program_label(module: str, program: int) -> str:
    """XProf's module event name: `<hlo_module>(<program_id>)`, or the module alone."""
    return f"{module}({program})" if program >= 0 else module


def _event_name(plane: Any, event: Any) -> str:
    md = plane.event_metadata.get(event.metadata_id)
    return md.name if md is not None else ""


def _xla_op_key(
    plane: Any, event: Any, ids: _Ids, hlo_op: str, graph: bool, module: str, program: int
) -> tuple[str, str]:
    """An XLA kernel's op, named by the richest annotation it carries.

    A kernel inside a CUDA graph carries its graph launch's annotation, not
    its own: it is booked to its program, as one `(command buffer)` op.
    Otherwise the framework op XLA's detailed annotation names (`op_name`,
    `op_type`), else the op's scope under the module's common prefix
    (`prefix`/`name`, the basic annotation), else the HLO instruction.
    """
    if graph:
        return COMMAND_BUFFER, _program_label(module, program)
    instruction = hlo_op.rsplit("::", 1)[-1]
    kind = stats_str(plane, event, ids.op_type) or _HLO_SUFFIX.sub("", instruction) or "?"
    op_name = stats_str(plane, event, ids.op_name)
    if op_name:
        return kind, op_name
    name = stats_str(plane, event, ids.name)
    if name:
        prefix = stats_str(plane, event, ids.prefix)
        return kind, f"{prefix}/{name}" if prefix else name
    return kind, instruction or _event_name(plane, event)


def _op_key(plane: Any, event: Any, tf_op_id: int) -> tuple[str, str]:
    label = stats_str(plane, event, tf_op_id)
    parsed = split_tf_op(label) if label else None
    if parsed is not None:
        return parsed[1], parsed[0]
    return "(device kernel)", label or _event_name(plane, event) or "?"
