"""Pure trace analysis: XSpace in, `CoverageReport` out.

Nothing here imports Keras or TensorFlow; traces are read with the
package's own bindings (`keras_xla_guard.trace._proto`). The scan itself
lives in `_scan` (the hot loop) and `_events` (how it sees events); this
module drives it over a trace's planes and assembles the report.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from keras_xla_guard._checks import check_int
from keras_xla_guard.trace._device import DeviceFigures, DeviceTotals, scan_device_plane
from keras_xla_guard.trace._events import PlaneCache
from keras_xla_guard.trace._host_launches import HostLaunches, host_launches
from keras_xla_guard.trace._quality import (
    COMMAND_BUFFERS_OFF_EVENT,
    device_quality,
    no_step_markers,
    space_quality,
)
from keras_xla_guard.trace._reader import LazyPlane
from keras_xla_guard.trace._scan import (
    Totals,
    adopt_loose_launches,
    scan_lazy_plane,
    scan_line,
)
from keras_xla_guard.trace.classify import GUARD_SCOPE, Category, is_guard_op
from keras_xla_guard.trace.compiles import CompileFacts, compile_records, read_compile_facts
from keras_xla_guard.trace.report import (
    CoverageReport,
    DeviceStat,
    OpStat,
    ProgramStat,
    StepStat,
    TraceQuality,
)
from keras_xla_guard.trace.steps import StepFacts, device_steps, host_steps, read_step_facts
from keras_xla_guard.trace.xplane import (
    DEFAULT_MAX_TRACE_BYTES,
    find_trace_files,
    host_of,
    open_xspace,
)

__all__ = ["DEFAULT_TOP_K", "analyze_trace", "analyze_xspace", "combine_reports"]

DEFAULT_TOP_K = 10
_PS = 1e-12


def _profile_wall_s(space: Any) -> float | None:
    for plane in space.planes:
        if plane.name != "Task Environment":
            continue
        stats = {
            plane.stat_metadata[s.metadata_id].name: s
            for s in plane.stats
            if s.metadata_id in plane.stat_metadata
        }
        start = stats.get("profile_start_time")
        stop = stats.get("profile_stop_time")
        if start is not None and stop is not None:
            a = start.uint64_value or start.int64_value
            b = stop.uint64_value or stop.int64_value
            if b > a:
                return (b - a) * 1e-9
    return None


def _is_host_plane(name: str) -> bool:
    return name.startswith("/host:") and name != "/host:metadata"


def _device_totals(device: DeviceTotals, host: Totals) -> Totals:
    """The figures of a trace with accelerator activity.

    Device time is what the accelerator spent; compiles, the input pipeline,
    eager dispatch and tracing still happen on the host.
    """
    totals = Totals()
    totals.ps[Category.XLA] = device.xla_ps
    totals.ps[Category.OP] = device.op_ps
    totals.executions = device.runs
    totals.transfer_ps = device.transfer_ps
    for key, (ps, count) in device.ops.items():
        totals.ops[key] = [ps, count]
    totals.compilations = host.compilations
    totals.modules = host.modules
    for cat in (Category.COMPILE, Category.INPUT, Category.EAGER, Category.EAGER_OP, Category.TRACING):
        totals.ps[cat] = host.ps[cat]
    totals.eager_calls = host.eager_calls
    return totals


# An op run eagerly (not a `tf.function` call, `EagerLocalExecute:
# __inference_*`): TensorFlow 2.21's profiler records it as this span on the
# calling thread, with no `<name>:<type>` kernel event (xprof's op stats
# leave it out too).
_EAGER_OP_PREFIX = "EagerLocalExecute: "
_FUNCTION_CALL_PREFIX = "EagerLocalExecute: __inference_"
# Eager op types a note names; the rest are counted.
_EAGER_OPS_NAMED = 5
# Ops a window's steps run eagerly beside its functions get a note from this
# share of the op time counting them on, when one op type ran at least once
# per step marker: Keras' own `fit` runs a variable read and an `Identity`
# eagerly once per epoch (0.9-1.6% of a tiny MLP's op time, TF 2.21, Keras
# 3.15), and a whole run's trace holds the variables' creation (`VarHandleOp`,
# ...), once each; neither is the step's.
_EAGER_OP_NOTE_SHARE = 0.05


def _eager_op_types(space: Any) -> list[str]:
    """The op types the host planes of `space` ran eagerly, sorted (their events' names)."""
    found: set[str] = set()
    for plane in space.planes:
        if not _is_host_plane(plane.name):
            continue
        metadata = plane.event_metadata
        for mid in metadata:
            name = metadata[mid].name
            if name.startswith(_EAGER_OP_PREFIX) and not name.startswith(_FUNCTION_CALL_PREFIX):
                found.add(name[len(_EAGER_OP_PREFIX) :])
    return sorted(found)


def _no_op_note(eager_ops: Sequence[str], eager_s: float) -> str:
    """Why a window without op or XLA time measured nothing, and, when its ops ran eagerly, what to do."""
    if not eager_ops:
        return "the trace holds no op execution: nothing to measure"
    named = ", ".join(eager_ops[:_EAGER_OPS_NAMED])
    more = f" and {len(eager_ops) - _EAGER_OPS_NAMED} more" if len(eager_ops) > _EAGER_OPS_NAMED else ""
    return (
        f"no TF op kernel or XLA program ran in this window: its ops ran eagerly, one at a time from "
        f"Python ({named}{more}), which XLA never compiles and the profiler records without op events "
        f"(their time is part of eager_overhead_s, {eager_s:.3f} s). XLA runs only inside a function: "
        "wrap the train step in tf.function(jit_compile=True) - whether XLA pays on this machine is not "
        "measured here: measure it first with keras_xla_guard.compare"
    )


def _eager_op_note(per_step: dict[str, int], steps: int, xla_s: float, op_s: float, eager_op_s: float) -> str:
    """What the ops a window's steps ran eagerly do to its XLA share, and what to do."""
    ordered = sorted(per_step.items(), key=lambda item: (-item[1], item[0]))
    named = ", ".join(f"{op_type} x{n}" for op_type, n in ordered[:_EAGER_OPS_NAMED])
    more = f" and {len(ordered) - _EAGER_OPS_NAMED} more" if len(ordered) > _EAGER_OPS_NAMED else ""
    counted = xla_s / (xla_s + op_s + eager_op_s)
    return (
        f"ops also ran eagerly, one at a time from Python, beside the functions, as often as the steps or more "
        f"({named}{more} in {steps} steps): the ops run eagerly took {eager_op_s:.3f} s (eager_op_time_s), which the XLA "
        f"share leaves out (it counts op time inside functions); counting them, {counted:.1%} of op time ran "
        "inside XLA. XLA never compiles an op run eagerly: move the step's eager ops into the compiled train "
        "step - whether compiling them pays is not measured here"
    )


def _report_from_totals(
    totals: Totals,
    *,
    time_base: str,
    top_k: int,
    trace_paths: tuple[str, ...],
    hosts: tuple[str, ...],
    wall_s: float | None,
    device: DeviceTotals | None = None,
    quality: tuple[TraceQuality, ...] = (),
    eager_ops: Callable[[], Sequence[str]] = list,
    steps: int = 0,
    host: str | None = None,
) -> CoverageReport:
    ps = totals.ps
    xla_ps = ps[Category.XLA] or ps[Category.XLA_WORKER]
    guard_ps = 0
    user_ops = []
    for (t, n), rec in totals.ops.items():
        # The substring test first: most names hold no guard scope at all.
        if GUARD_SCOPE in n and is_guard_op(n):
            guard_ps += rec[0]
        else:
            user_ops.append((-(rec[0] * _PS), t, n, rec[1]))
    op_ps = ps[Category.OP] - guard_ps
    notes: list[str] = []
    eager_ps = ps[Category.EAGER] + ps[Category.EAGER_OP]
    if xla_ps == 0 and op_ps == 0:
        # Read only here: a window that ran ops never lists the plane's names again.
        notes.append(_no_op_note(eager_ops(), eager_ps * _PS))
    elif time_base == "host" and steps:
        # On a device time base an eager op's kernels are device op time already.
        per_step = {op_type: n for op_type, n in totals.eager_calls.items() if n >= steps}
        eager_op_ps = ps[Category.EAGER_OP]
        if per_step and eager_op_ps >= _EAGER_OP_NOTE_SHARE * (xla_ps + op_ps + eager_op_ps):
            notes.append(_eager_op_note(per_step, steps, xla_ps * _PS, op_ps * _PS, eager_op_ps * _PS))
    return CoverageReport(
        trace_paths=trace_paths,
        hosts=hosts,
        window_wall_s=wall_s,
        time_base=time_base,
        xla_time_s=xla_ps * _PS,
        non_xla_op_time_s=op_ps * _PS,
        xla_time_fraction=(xla_ps / (xla_ps + op_ps)) if xla_ps + op_ps else 0.0,
        xla_executions=totals.executions,
        compilations=totals.compilations,
        compile_time_s=0.0,
        compile_thread_time_s=ps[Category.COMPILE] * _PS,
        compiled_modules=tuple(dict.fromkeys(totals.modules)),
        top_non_xla_ops=_top(user_ops, top_k),
        input_pipeline_time_s=ps[Category.INPUT] * _PS,
        eager_overhead_s=eager_ps * _PS,
        eager_op_time_s=ps[Category.EAGER_OP] * _PS,
        tracing_time_s=ps[Category.TRACING] * _PS,
        guard_op_time_s=guard_ps * _PS,
        transfer_time_s=totals.transfer_ps * _PS if time_base == "device" else None,
        collective_time_s=device.collective_ps * _PS if device is not None else None,
        xla_run_span_s=device.span_ps * _PS if device is not None else None,
        devices=() if device is None else tuple(_device_stat(d, host) for d in device.devices),
        programs=()
        if device is None
        else _by_time(
            {
                name: (runs, ps * _PS, name not in device.graph_programs)
                for name, (runs, ps) in device.programs.items()
            }
        ),
        top_xla_ops=()
        if device is None
        else _top([(-(ps * _PS), t, n, count) for (t, n), (ps, count) in device.xla_ops.items()], top_k),
        trace_quality=quality,
        notes=tuple(notes),
    )


def _device_stat(figures: DeviceFigures, host: str | None) -> DeviceStat:
    """One device plane's figures as the report shows them."""
    # The guard's own ops are in neither side of the share, on each device as in the totals.
    xla, op = figures.xla_ps, figures.op_ps - figures.guard_ps
    return DeviceStat(
        device=figures.device,
        host=host,
        xla_time_s=xla * _PS,
        xla_run_span_s=figures.span_ps * _PS,
        non_xla_op_time_s=op * _PS,
        xla_time_fraction=xla / (xla + op) if xla + op else 0.0,
        launches=figures.runs,
        transfer_time_s=figures.transfer_ps * _PS,
        collective_time_s=figures.collective_ps * _PS,
    )


def _top(ops: Iterable[tuple[float, str, str, int]], top_k: int) -> tuple[OpStat, ...]:
    """The `top_k` ops of `(-seconds, type, name, count)` rows: longest self time first, ties by type and name.

    Rows are compared as tuples (one row per type and name, so the count
    never decides) and only those kept become `OpStat`s: a trace without
    XLA has thousands of ops.
    """
    return tuple(OpStat(t, n, -minus_s, count) for minus_s, t, n, count in heapq.nsmallest(top_k, ops))


def _by_time(programs: dict[str, tuple[int, float, bool]]) -> tuple[ProgramStat, ...]:
    """Programs as `ProgramStat`s, longest first (ties by name)."""
    return tuple(
        ProgramStat(name, runs, seconds, per_op)
        for name, (runs, seconds, per_op) in sorted(programs.items(), key=lambda p: (-p[1][1], p[0]))
    )


def _device_step_stats(device: DeviceTotals, host: HostLaunches) -> tuple[StepStat, ...] | None:
    """Per step of a device trace: the device's runs and transfers of each host step marker; `None` without one."""
    if not host.markers:
        return None
    transfers: dict[int, int] = {}
    for corr, ps in device.transfer_launches:
        group = host.groups.get(corr)
        if group is not None:
            transfers[group] = transfers.get(group, 0) + ps
    return device_steps(host.markers, device.step_busy, device.step_launches, transfers)


def _commands_off_while_profiling(space: Any) -> bool:
    """Whether XLA wrote that it ran command buffers op by op because a profiler was on."""
    return any(
        md.name == COMMAND_BUFFERS_OFF_EVENT
        for plane in space.planes
        if _is_host_plane(plane.name)
        for md in plane.event_metadata.values()
    )


def analyze_xspace(
    space: Any,
    *,
    trace_path: str | None = None,
    host: str | None = None,
    top_k: int = DEFAULT_TOP_K,
) -> CoverageReport:
    """Measures XLA coverage in one parsed XSpace.

    Args:
        space: An `xplane_pb2.XSpace` message, or a trace read lazily by
            `keras_xla_guard.trace.xplane.open_xspace` (far less memory).
        trace_path: Where the trace came from, recorded in the report and
            named in errors. Defaults to `None`.
        host: Host name recorded in the report. Defaults to `None`.
        top_k: How many plain TF ops to keep in `top_non_xla_ops`.
            Defaults to `10`.

    Returns:
        A `CoverageReport` with `epoch=None`. When the trace holds
        accelerator planes with activity, times are device times
        (`time_base="device"`); otherwise host thread times.

    Raises:
        ValueError: If `top_k` is negative.
        TraceParseError: If a line of a lazily read trace does not decode.
    """
    check_int("top_k", top_k, minimum=0)
    source = trace_path or "<trace>"
    host_totals = Totals()
    device = DeviceTotals()
    launches: list[HostLaunches] = []

    def host_side() -> HostLaunches:
        # Read once, and only for device planes that need it.
        if not launches:
            launches.append(host_launches(space, source))
        return launches[0]

    # Plane name -> indices of the lines that compiled, of the step
    # markers', of those whose `train` events date compiles and of those
    # that ran XLA work, for the compile table and the steps. Markers and
    # `train` events are found by their stats and names on any thread: the
    # one that writes them (Python's main thread) is named after the
    # program that runs it (`python3`, a console script, a `setproctitle`
    # title), not always `python`.
    compiling: dict[str, set[int]] = {}
    step_lines: dict[str, set[int]] = {}
    dating: dict[str, set[int]] = {}
    xla_lines: dict[str, set[int]] = {}
    # Lines the scan found no step facts of, in planes that name the
    # markers' stats: read for their markers after the scan.
    unknown: dict[str, set[int]] = {}
    # Lines the scan found no compile facts of, in planes that name `train`
    # events and `step_num`: read for them if the plane compiled.
    unread: dict[str, set[int]] = {}
    # What the scan found of them already, so they are not read again.
    step_facts: dict[str, dict[int, StepFacts]] = {}
    compile_facts: dict[str, dict[int, CompileFacts]] = {}
    for plane in space.planes:
        if plane.name.startswith("/device:"):
            scan_device_plane(plane, device, host_side, source)
        elif _is_host_plane(plane.name):
            cache = PlaneCache(plane)
            scanned: Iterable[Any]
            if isinstance(plane, LazyPlane):
                import numpy as np

                scanned = scan_lazy_plane(np, plane, cache, host_totals, source)
            else:
                scanned = (scan_line(plane, line, cache, host_totals) for line in plane.lines)
            for index, line in enumerate(scanned):
                if line.compiled and cache.markers:
                    compiling.setdefault(plane.name, set()).add(index)
                if line.ran_xla:
                    xla_lines.setdefault(plane.name, set()).add(index)
                facts = line.facts.steps if line.facts is not None else line.steps
                if facts is not None:
                    step_facts.setdefault(plane.name, {})[index] = facts
                if line.facts is not None:
                    compile_facts.setdefault(plane.name, {})[index] = line.facts.compiles
                    if line.facts.compiles.steps:
                        dating.setdefault(plane.name, set()).add(index)
                elif cache.train and cache.step_id >= 0:
                    unread.setdefault(plane.name, set()).add(index)
                if facts is not None and facts.markers:
                    step_lines.setdefault(plane.name, set()).add(index)
                elif facts is None and cache.root_id >= 0 and cache.step_id >= 0:
                    unknown.setdefault(plane.name, set()).add(index)
    for plane_name, indices in unknown.items():
        for index, facts in read_step_facts(space, plane_name, indices, source).items():
            step_facts.setdefault(plane_name, {})[index] = facts
            if facts.markers:
                step_lines.setdefault(plane_name, set()).add(index)
    adopt_loose_launches(host_totals)
    steps: tuple[StepStat, ...] | None
    if device.active:
        totals, base = _device_totals(device, host_totals), "device"
        steps = _device_step_stats(device, host_side())
        # Matching launches to device events needs the host's launches.
        quality = device_quality(
            device,
            host_side() if device.correlations else None,
            _commands_off_while_profiling(space),
            steps_known=steps is not None,
        )
    else:
        totals, base = host_totals, "host"
        # A second pass, over the step markers' thread and, when it holds
        # markers, the threads that ran XLA work: the scan keeps no spans.
        steps = (
            host_steps(space, step_lines, xla_lines, host_totals.launches, source, known=step_facts)
            if step_lines
            else None
        )
        quality = [] if steps is not None else [no_step_markers()]
    report = _report_from_totals(
        totals,
        time_base=base,
        top_k=top_k,
        trace_paths=(trace_path,) if trace_path else (),
        hosts=(host,) if host else (),
        wall_s=_profile_wall_s(space),
        device=device if device.active else None,
        quality=tuple(quality + space_quality(space)),
        eager_ops=lambda: _eager_op_types(space),
        steps=len(steps or ()),
        host=host,
    )
    report = dataclasses.replace(report, steps=steps)
    if not compiling:
        return report
    for plane_name, found in compiling.items():
        rest = unread.get(plane_name, set()) - found
        if rest:
            read = read_compile_facts(space, plane_name, rest, source)
            compile_facts.setdefault(plane_name, {}).update(read)
            dating.setdefault(plane_name, set()).update(i for i, f in read.items() if f.steps)
    # A second pass, over the threads that compiled, the step markers' and
    # those that date compiles only: the table needs every compile
    # interval, which the scan above does not keep.
    wanted = {
        name: found | step_lines.get(name, set()) | dating.get(name, set())
        for name, found in compiling.items()
    }
    table = compile_records(space, source=source, lines=wanted, known=compile_facts)
    return dataclasses.replace(
        report, compile_table=table, compile_time_s=sum(row.compile_s or 0.0 for row in table)
    )


def combine_reports(reports: Sequence[CoverageReport], *, top_k: int = DEFAULT_TOP_K) -> CoverageReport:
    """Adds up reports of several hosts (or several traces) into one.

    Args:
        reports: Reports with `status == "ok"`.
        top_k: How many plain TF ops to keep. Defaults to `10`.

    Returns:
        One report whose times, counts, programs and op tables are sums,
        whose fraction is recomputed from the sums, and which holds every
        report's trace quality entries.

    Raises:
        ValueError: If `reports` is empty, or holds several and one of them
            is not ok.
    """
    if not reports:
        raise ValueError("`reports` must hold at least one report. Received: []")
    if len(reports) == 1:
        return reports[0]
    figures = [r.measured() for r in reports]
    xla = sum(f.xla_time_s for f in figures)
    non = sum(f.non_xla_op_time_s for f in figures)
    walls = [r.window_wall_s for r in reports if r.window_wall_s is not None]
    transfers = [r.transfer_time_s for r in reports if r.transfer_time_s is not None]
    collectives = [r.collective_time_s for r in reports if r.collective_time_s is not None]
    spans = [r.xla_run_span_s for r in reports if r.xla_run_span_s is not None]
    programs: dict[str, tuple[int, float, bool]] = {}
    for r in reports:
        for p in r.programs:
            runs, seconds, per_op = programs.get(p.program, (0, 0.0, True))
            programs[p.program] = (runs + p.runs, seconds + p.time_s, per_op and p.per_op)
    return dataclasses.replace(
        reports[0],
        trace_paths=tuple(p for r in reports for p in r.trace_paths),
        hosts=tuple(h for r in reports for h in r.hosts),
        time_base="device" if any(r.time_base == "device" for r in reports) else "host",
        window_wall_s=max(walls) if walls else None,
        xla_time_s=xla,
        non_xla_op_time_s=non,
        xla_time_fraction=xla / (xla + non) if xla + non else 0.0,
        xla_executions=sum(f.xla_executions for f in figures),
        compilations=sum(f.compilations for f in figures),
        compile_time_s=sum(f.compile_time_s for f in figures),
        compile_thread_time_s=_total([r.compile_thread_time_s for r in reports]),
        compiled_modules=tuple(dict.fromkeys(m for r in reports for m in r.compiled_modules)),
        compile_table=tuple(c for r in reports for c in r.compile_table),
        top_non_xla_ops=_summed_ops((r.top_non_xla_ops for r in reports), top_k),
        top_xla_ops=_summed_ops((r.top_xla_ops for r in reports), top_k),
        input_pipeline_time_s=sum(f.input_pipeline_time_s for f in figures),
        eager_overhead_s=_total([r.eager_overhead_s for r in reports]),
        eager_op_time_s=_total([r.eager_op_time_s for r in reports]),
        tracing_time_s=_total([r.tracing_time_s for r in reports]),
        guard_op_time_s=_total([r.guard_op_time_s for r in reports]),
        transfer_time_s=sum(transfers) if transfers else None,
        collective_time_s=sum(collectives) if collectives else None,
        xla_run_span_s=sum(spans) if spans else None,
        devices=tuple(d for r in reports for d in r.devices),
        programs=_by_time(programs),
        trace_quality=tuple(dict.fromkeys(q for r in reports for q in r.trace_quality)),
        notes=tuple(dict.fromkeys(n for r in reports for n in r.notes)),
    )


def _total(values: Sequence[float | None]) -> float | None:
    """The sum of one figure over reports; `None` when one lacks it (a report read back from a run file may)."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


def _summed_ops(tables: Iterable[Iterable[OpStat]], top_k: int) -> tuple[OpStat, ...]:
    """The `top_k` rows of op tables of several reports, one per (type, name) with times and counts added."""
    ops: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for table in tables:
        for op in table:
            rec = ops[(op.op_type, op.op_name)]
            rec[0] += op.self_time_s
            rec[1] += op.count
    return _top([(-rec[0], t, n, int(rec[1])) for (t, n), rec in ops.items()], top_k)


def analyze_trace(
    path: str | os.PathLike[str],
    *,
    top_k: int = DEFAULT_TOP_K,
    max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
) -> CoverageReport:
    """Measures XLA coverage in a trace file or the newest run of a log dir.

    Args:
        path: An `.xplane.pb` file, a profile run directory, or a log
            directory (its newest run is used; a run with one file per
            host is combined into one report).
        top_k: How many plain TF ops to keep in `top_non_xla_ops`.
            Defaults to `10`.
        max_bytes: Refuse trace files larger than this. Defaults to 1 GiB.

    Returns:
        A `CoverageReport` (with `epoch=None`).

    Raises:
        TraceNotFoundError: If no trace exists at `path`.
        TraceParseError: If a file is not a valid XSpace trace.
        TraceTooLargeError: If a file is larger than `max_bytes`.
        ValueError: If `path`, `top_k` or `max_bytes` is invalid.

    Example:

    ```python
    from keras_xla_guard import analyze_trace
    report = analyze_trace("logs/xla_guard")
    print(f"{report.xla_time_fraction:.0%} of op time ran under XLA")
    ```
    """
    files = find_trace_files(path)
    reports = [
        analyze_xspace(open_xspace(f, max_bytes=max_bytes), trace_path=str(f), host=host_of(f), top_k=top_k)
        for f in files
    ]
    return combine_reports(reports, top_k=top_k)
