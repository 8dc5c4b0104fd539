"""Accelerator planes: XLA program runs, plain TF kernels, transfers and collectives, per device.

A GPU plane (`/device:GPU:N`) as the profiler writes it has one line per
stream, `Stream #<id>(<event types>)`, written by XLA's CUPTI collector
(`xla/backends/profiler/gpu/cupti_collector.cc`; ROCm's
`rocm_collector.cc` writes the same). Each event is a kernel
(`kernel_details` stat), a memory copy (`memcpy_details`) or a memset
(`memset_details`); the annotation stack the kernel ran under adds `tf_op`
(its outermost name) and the keys of its annotations: XLA's
`XlaModule:#hlo_module=...,program_id=...#` and
`Thunk:#name=...,hlo_op=...#` (with `--xla_gpu_trace_annotation_level=1`
also `op_name`, `op_type`, `source_file`, `shape`;
`xla/backends/gpu/runtime/annotation.cc`). A kernel that ran inside a CUDA
graph (an XLA command buffer) carries `cuda_graph_id`, and its annotation
is the one its graph was launched under; with CUPTI's graph-level tracing
(`gpu_enable_cupti_activity_graph_trace`) a whole graph run is one
`CudaGraphExec:<id>` event with `cuda_graph_exec_id`
(`xla/backends/profiler/gpu/cupti_buffer_events.cc`).

Per device plane:

- XLA time is the device-busy time of XLA kernels: the union of their
  intervals over the plane's streams, so kernels of concurrent streams
  count once and the idle gaps inside a program run not at all. xprof's
  `hlo_stats` sums the same kernels' device time (equal where streams do
  not overlap).
- Launches are program executions: a kernel belongs to the execution
  whose host `XLA GPU module` event made its driver call
  (`_host_launches`: correlation id -> launching host event). A kernel
  the host does not tie to an execution (a trace without the host's
  driver calls) is grouped as xprof derives its "XLA Modules" lines
  (`GenerateDerivedTimeLines`, `xprof/utils/derived_timeline.cc`): on each
  stream, consecutive kernels of one program (`hlo_module` and
  `program_id`) in one step group make one run, and runs of one program
  and step that overlap on several streams are one.
- A run's span, its first kernel's start to its last kernel's end, is its
  own figure (`xla_run_span_s`: busy time plus the gaps inside runs).
- Step groups: a kernel's `group_id` stat where xprof already set one;
  else the host step marker whose span holds the driver call that
  launched it (same `correlation_id`); a kernel with neither takes the
  group of the XLA kernel before it on its plane (as xprof's
  `ProcessUngroupedEvents` does with the event before it). A host
  execution's runs take the group of their first kernel.
- Memory copies and memsets are transfers, never ops, whatever annotation
  they ran under.
- Collective kernels (NCCL's and RCCL's, and XLA's all-reduce,
  all-gather, reduce-scatter, all-to-all, collective-permute, send and
  recv ops) are their own figure: inside an XLA program they stay XLA
  time, outside any program they are in neither XLA nor plain-op time.
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

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from keras_xla_guard.trace._events import stat_str, stats_str
from keras_xla_guard.trace._host_launches import HostLaunches
from keras_xla_guard.trace.classify import GUARD_SCOPE, is_guard_op, split_tf_op
from keras_xla_guard.trace.compile_wall import union_length
from keras_xla_guard.trace.xplane import iter_lines, stat_index

__all__ = ["COMMAND_BUFFER", "DeviceFigures", "DeviceTotals", "scan_device_plane"]

_MODULE_LINE = "XLA Modules"
# XProf >= 2.2x writes one derived module line per stream, "XLA Modules - from #<id>".
_MODULE_LINE_PER_STREAM = "XLA Modules - from #"
_TRANSFER_STATS = ("memcpy_details", "memset_details")
_TRANSFER_NAMES = ("Memcpy", "Memset", "CopyDeviceToDevice", "CopyHostToDevice", "CopyDeviceToHost")
# The program a CUDA graph without an XLA module annotation is booked to.
COMMAND_BUFFER = "(command buffer)"
_GRAPH_EXEC_NAME = "CudaGraphExec:"
# XLA's collective HLO ops (async pairs and numbered clones included).
_COLLECTIVE_HLO = re.compile(
    r"^(?:all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|collective-permute"
    r"|collective-broadcast|send|recv)(?:-start|-done)?(?:\.\d+)?$"
)
# NCCL's and RCCL's kernels: `ncclDevKernel_AllReduce_Sum_f32_RING_LL`, `ncclKernel_...`.
_NCCL_KERNEL = re.compile(r"nccl", re.IGNORECASE)
_HLO_SUFFIX = re.compile(r"\.\d+$")
Span = tuple[int, int]


class _Kernel(NamedTuple):
    """One XLA kernel on a stream line, in line order."""

    start: int
    end: int
    module: str
    program: int
    group: int | None
    corr: int
    graph: bool


class DeviceFigures(NamedTuple):
    """One device plane's figures (picoseconds).

    Attributes:
        device: The plane's name, e.g. `"/device:GPU:0"`.
        xla_ps: Device-busy time of its XLA kernels (union over streams).
        span_ps: Its XLA runs' spans, first kernel's start to last
            kernel's end of each, summed.
        runs: Its XLA program runs (launches).
        op_ps: Time of its plain (non-XLA) kernels.
        transfer_ps: Time of its memory copies and memsets.
        collective_ps: Time of its collective kernels.
        guard_ps: Of `op_ps`, the time of the guard's own ops (its
            signature tap's kernels, `classify.GUARD_SCOPE`).
    """

    device: str
    xla_ps: int
    span_ps: int
    runs: int
    op_ps: int
    transfer_ps: int
    collective_ps: int
    guard_ps: int = 0


class DeviceTotals:
    """What the device planes of one trace hold (picoseconds), summed over planes and per plane.

    Attributes:
        active: Whether any plane had events on its stream or module lines.
        devices: Each plane with activity, in trace order (`DeviceFigures`).
        xla_ps: Device-busy time of XLA kernels, each plane's union, summed.
        span_ps: Spans of the XLA program runs, summed.
        runs: XLA program runs (launches).
        programs: Program label -> [runs, busy ps].
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
        unattributed_kernels: XLA kernels whose launch the host planes do
            not tie to a program execution (grouped into runs as xprof
            derives them).
        correlations: Correlation ids of every device event.
        step_busy: Index of a host step marker -> the intervals of the XLA
            kernels of its runs, on every plane.
        step_launches: Index of a host step marker -> its runs.
        transfer_launches: `(correlation id, ps)` of each copy and memset
            with a correlation id.
    """

    def __init__(self) -> None:
        self.active = False
        self.devices: list[DeviceFigures] = []
        self.xla_ps = 0
        self.span_ps = 0
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
        self.unattributed_kernels = 0
        self.correlations: set[int] = set()
        self.step_busy: dict[int, list[Span]] = {}
        self.step_launches: dict[int, int] = {}
        self.transfer_launches: list[tuple[int, int]] = []

    def add_plane(self, figures: DeviceFigures) -> None:
        """Adds one plane's figures to the totals (its ops and programs are added as they are met)."""
        self.devices.append(figures)
        self.xla_ps += figures.xla_ps
        self.span_ps += figures.span_ps
        self.runs += figures.runs
        self.op_ps += figures.op_ps
        self.transfer_ps += figures.transfer_ps
        self.collective_ps += figures.collective_ps


def _add(table: dict[tuple[str, str], list[int]], key: tuple[str, str], ps: int) -> None:
    rec = table.setdefault(key, [0, 0])
    rec[0] += ps
    rec[1] += 1


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


class _PlaneEvents:
    """What one plane's stream lines hold, before its kernels are grouped into runs."""

    def __init__(self) -> None:
        self.modules: list[int] = []
        self.streams: list[list[_Kernel]] = []
        # Intervals of every XLA kernel (loose ones included), collectives and other kernels.
        self.xla: list[Span] = []
        self.collectives: list[tuple[int, int, int]] = []
        self.compute: list[tuple[int, int, int]] = []
        self.op_ps = self.transfer_ps = self.collective_ps = self.guard_ps = 0


def scan_device_plane(
    plane: Any, totals: DeviceTotals, launches: Callable[[], HostLaunches], source: str
) -> None:
    """Books one accelerator plane into `totals`.

    Args:
        plane: A `/device:` plane (parsed, or of `open_xspace`).
        totals: Where the plane's figures are added.
        launches: Gives the host's launches (`host_launches`); called only
            when an XLA kernel carries a correlation id.
        source: Name used in error messages.
    """
    seen = _read_streams(plane, _Ids.of(plane), totals, source)
    totals.collective_overlap_ps += _overlap(seen.collectives, seen.compute)
    if not seen.streams and not seen.xla:
        if seen.modules or seen.op_ps or seen.transfer_ps or seen.collective_ps:
            # A plane read from its "XLA Modules" lines: one run per event.
            ps = sum(seen.modules)
            totals.add_plane(
                DeviceFigures(
                    plane.name,
                    ps,
                    ps,
                    len(seen.modules),
                    seen.op_ps,
                    seen.transfer_ps,
                    seen.collective_ps,
                    seen.guard_ps,
                )
            )
        return
    spans, runs = _book_runs(seen.streams, launches, totals)
    totals.add_plane(
        DeviceFigures(
            plane.name,
            union_length(seen.xla),
            spans,
            runs,
            seen.op_ps,
            seen.transfer_ps,
            seen.collective_ps,
            seen.guard_ps,
        )
    )


def _read_streams(plane: Any, ids: _Ids, totals: DeviceTotals, source: str) -> _PlaneEvents:
    """Reads a plane's stream and module lines: its XLA kernels by stream, and books the rest."""
    seen = _PlaneEvents()
    for stream, line in enumerate(iter_lines(plane, source=source)):
        if line.name == _MODULE_LINE or line.name.startswith(_MODULE_LINE_PER_STREAM):
            totals.active = totals.active or bool(line.events)
            # Instant or negative-length events carry no time (only edited
            # or damaged traces have the latter).
            seen.modules.extend(e.duration_ps for e in line.events if e.duration_ps > 0)
        elif line.name.startswith("Stream"):
            base = line.timestamp_ns * 1000
            kernels: list[_Kernel] = []
            for event in line.events:
                totals.active = True
                _read_event(plane, ids, event, base, stream, seen, kernels, totals)
            if kernels:
                seen.streams.append(kernels)
    return seen


class _Stats(NamedTuple):
    """The stats of one stream event the scan reads."""

    module: str
    hlo_op: str
    program: int
    group: int | None
    corr: int
    transfer: bool
    graph: bool


def _event_stats(plane: Any, ids: _Ids, event: Any) -> _Stats:
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
            # xprof's groups are non-negative integers; negative ones stand
            # for host markers (`_resolve_groups`), so any other value is
            # no group at all.
            group = _int_value(stat)
            group = group if group >= 0 else None
        elif sid == ids.corr:
            corr = _int_value(stat)
        elif sid in ids.transfer:
            transfer = True
        elif sid in ids.graph:
            graph = _int_value(stat) != 0
    return _Stats(module, hlo_op, program, group, corr, transfer, graph)


def _read_event(
    plane: Any,
    ids: _Ids,
    event: Any,
    base: int,
    stream: int,
    seen: _PlaneEvents,
    kernels: list[_Kernel],
    totals: DeviceTotals,
) -> None:
    """Books one stream event: a transfer, a collective, an XLA kernel or a plain kernel."""
    stats = _event_stats(plane, ids, event)
    module, hlo_op, corr = stats.module, stats.hlo_op, stats.corr
    if corr >= 0:
        totals.correlations.add(corr)
    dur = event.duration_ps
    if dur <= 0:
        return
    start = base + event.offset_ps
    name = _event_name(plane, event)
    graph = stats.graph or name.startswith(_GRAPH_EXEC_NAME)
    if stats.transfer or name.startswith(_TRANSFER_NAMES):
        seen.transfer_ps += dur
        if corr >= 0:
            totals.transfer_launches.append((corr, dur))
        return
    collective = bool(_NCCL_KERNEL.search(name) or _COLLECTIVE_HLO.match(hlo_op.rsplit("::", 1)[-1]))
    if collective:
        seen.collective_ps += dur
        totals.collective_kernels += 1
    (seen.collectives if collective else seen.compute).append((start, start + dur, stream))
    if graph:
        totals.graph_ps += dur
        totals.graph_kernels += 1
        module = module or COMMAND_BUFFER
    if module or hlo_op:
        # A kernel with an `hlo_op` but no module is XLA time of no run.
        seen.xla.append((start, start + dur))
        _add(totals.xla_ops, _xla_op_key(plane, event, ids, hlo_op, graph, module, stats.program), dur)
        if module:
            kernels.append(_Kernel(start, start + dur, module, stats.program, stats.group, corr, graph))
            if graph:
                totals.graph_programs.add(_program_label(module, stats.program))
    elif not collective:
        seen.op_ps += dur
        key = _op_key(plane, event, ids.tf_op)
        if GUARD_SCOPE in key[1] and is_guard_op(key[1]):
            seen.guard_ps += dur
        _add(totals.ops, key, dur)


def _book_runs(
    streams: list[list[_Kernel]], launches: Callable[[], HostLaunches], totals: DeviceTotals
) -> tuple[int, int]:
    """Groups a plane's XLA kernels into runs and books them; returns the runs' spans (ps) and count."""
    # The host's launches name each kernel's execution and, without a group id, its step.
    host = launches() if any(k.corr >= 0 for s in streams for k in s) else None
    groups = _resolve_groups(streams, host.groups if host is not None else {})
    executions = host.executions if host is not None else {}
    # Host execution -> [program label, first kernel's start, its group, kernel intervals].
    runs: dict[int, list[Any]] = {}
    derived: list[list[tuple[_Kernel, int | None]]] = []
    for kernels, found in zip(streams, groups):
        totals.xla_kernels += len(kernels)
        rest = []
        for kernel, group in zip(kernels, found):
            run = executions.get(kernel.corr) if kernel.corr >= 0 else None
            if run is None:
                rest.append((kernel, group))
                continue
            rec = runs.setdefault(
                run, [_program_label(kernel.module, kernel.program), kernel.start, group, []]
            )
            if kernel.start < rec[1]:
                rec[1:3] = [kernel.start, group]
            rec[3].append((kernel.start, kernel.end))
        if rest:
            totals.unattributed_kernels += len(rest)
            derived.append(rest)
    found_runs = [(label, group, spans) for label, _, group, spans in runs.values()] + _derived_runs(derived)
    span_total = 0
    for label, group, spans in found_runs:
        span_total += max(e for _, e in spans) - min(s for s, _ in spans)
        rec = totals.programs.setdefault(label, [0, 0])
        rec[0] += 1
        rec[1] += union_length(spans)
        if group is not None and group < 0:
            # Host groups are -1 - marker index (see _resolve_groups).
            step = -1 - group
            totals.step_busy.setdefault(step, []).extend(spans)
            totals.step_launches[step] = totals.step_launches.get(step, 0) + 1
    return span_total, len(found_runs)


def _derived_runs(
    streams: list[list[tuple[_Kernel, int | None]]],
) -> list[tuple[str, int | None, list[Span]]]:
    """xprof's derived runs: consecutive kernels of one program and group on a stream, runs of one
    program and group that overlap on several streams merged."""
    runs: dict[tuple[str, int | None], list[list[Span]]] = {}
    for kernels in streams:
        key: tuple[str, int, int | None] | None = None
        current: list[Span] = []
        for kernel, group in kernels:
            here = (kernel.module, kernel.program, group)
            if here != key:
                if key is not None:
                    runs.setdefault((_program_label(*key[:2]), key[2]), []).append(current)
                key, current = here, []
            current.append((kernel.start, kernel.end))
        if key is not None:
            runs.setdefault((_program_label(*key[:2]), key[2]), []).append(current)
    found = []
    for (label, group), spans in runs.items():
        for merged in _merged_runs(spans):
            found.append((label, group, merged))
    return found


def _merged_runs(runs: list[list[Span]]) -> list[list[Span]]:
    """A program's runs in one step, those that overlap in time (on several streams) made one."""
    merged: list[list[Span]] = []
    end = -1
    for run in sorted(runs, key=lambda r: min(s for s, _ in r)):
        start, stop = min(s for s, _ in run), max(e for _, e in run)
        if merged and start < end:
            merged[-1].extend(run)
            end = max(end, stop)
        else:
            merged.append(list(run))
            end = stop
    return merged


def _merged(spans: list[Span]) -> list[Span]:
    """Intervals, those that overlap made one."""
    merged: list[Span] = []
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


def _resolve_groups(streams: list[list[_Kernel]], host: dict[int, int]) -> list[list[int | None]]:
    """Each kernel's step group, per stream: its own, its launch's, or the one before it on the plane.

    `host` maps a launch's correlation id to its step marker's index;
    host groups are told apart from xprof's own (non-negative) ids by
    sign: marker `i` is group `-1 - i`.
    """
    found: list[list[int | None]] = []
    timeline: list[tuple[int, int, int]] = []
    for s, kernels in enumerate(streams):
        own: list[int | None] = []
        for i, kernel in enumerate(kernels):
            group = kernel.group
            if group is None and kernel.corr >= 0:
                marker = host.get(kernel.corr)
                group = None if marker is None else -1 - marker
            own.append(group)
            timeline.append((kernel.start, s, i))
        found.append(own)
    last: int | None = None
    for _, s, i in sorted(timeline):
        if found[s][i] is None:
            found[s][i] = last
        else:
            last = found[s][i]
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
