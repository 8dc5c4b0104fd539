"""Pure trace analysis: XSpace in, `CoverageReport` out.

Nothing here imports Keras or TensorFlow's runtime; only the generated
`xplane_pb2` bindings are used (see `keras_xla_guard.xplane`).
"""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from keras_xla_guard.classify import (
    COMPILE_COUNT_RE,
    XLA_COMPILE_TYPES,
    XLA_LAUNCH_TYPES,
    Category,
    classify_name,
    classify_op_type,
    split_tf_op,
)
from keras_xla_guard.report import CoverageReport, OpStat
from keras_xla_guard.xplane import (
    DEFAULT_MAX_TRACE_BYTES,
    TRACE_SUFFIX,
    find_trace_files,
    load_xspace,
)

__all__ = ["DEFAULT_TOP_K", "analyze_trace", "analyze_xspace", "combine_reports"]

DEFAULT_TOP_K = 10
_PS = 1e-12
_ABSORBING = frozenset(
    {Category.XLA, Category.XLA_WORKER, Category.COMPILE, Category.INPUT, Category.TRACING}
)
_XLA_DEVICE_LINES = frozenset({"XLA Modules"})


class _Totals:
    """Mutable accumulator for one analysis (picoseconds)."""

    def __init__(self) -> None:
        self.ps = [0] * 11
        self.ops: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.executions = 0
        self.compilations = 0
        self.modules: list[str] = []


class _Node:
    __slots__ = ("start", "end", "cat", "absorb", "child_ps", "bucket", "has_xla",
                 "has_compile", "op", "pending", "parent")

    def __init__(self, start: int, end: int, cat: int, absorb: int, op: Any, parent: Any) -> None:
        self.start = start
        self.end = end
        self.cat = cat
        self.absorb = absorb
        self.child_ps = 0
        self.bucket = 0
        self.has_xla = False
        self.has_compile = False
        self.op = op
        self.pending: list[tuple[tuple[str, str], int]] | None = None
        self.parent = parent


def _stat_index(plane: Any) -> dict[str, int]:
    return {m.name: mid for mid, m in plane.stat_metadata.items()}


def _stat_str(plane: Any, stat: Any) -> str:
    kind = stat.WhichOneof("value")
    if kind == "str_value":
        return stat.str_value
    if kind == "ref_value":
        ref = plane.stat_metadata.get(stat.ref_value)
        return ref.name if ref is not None else ""
    return ""


def _stats_str(plane: Any, event: Any, stat_id: int) -> str:
    if stat_id < 0:
        return ""
    for stat in event.stats:
        if stat.metadata_id == stat_id:
            return _stat_str(plane, stat)
    return ""


def _has_stat(event: Any, stat_id: int) -> bool:
    return stat_id >= 0 and any(s.metadata_id == stat_id for s in event.stats)


def _kernel_ancestor(node: _Node | None) -> _Node | None:
    while node is not None and node.cat != Category.KERNEL:
        node = node.parent
    return node


def _settle(node: _Node, totals: _Totals) -> None:
    """Books a finished event's time once all its children are known.

    Events without a category of their own (`NONE`) hand their self time up
    to the nearest categorized ancestor, so e.g. the compile passes inside a
    `StatefulPartitionedCall` count as compile time. Plain-op time of
    kernels nested in another kernel is held as `pending` until the outer
    kernel is resolved: if the outer kernel turns out to be compiling (the
    constant folding TF runs before an XLA compile), that time is compile
    time, not a user op.
    """
    node.bucket += max(0, node.end - node.start - node.child_ps)
    parent = node.parent
    cat = node.cat
    if cat == Category.NONE:
        if parent is not None:
            parent.bucket += node.bucket
            parent.has_xla = parent.has_xla or node.has_xla
            parent.has_compile = parent.has_compile or node.has_compile
        elif node.absorb:
            totals.ps[node.absorb] += node.bucket
        else:
            totals.ps[Category.OTHER] += node.bucket
        return
    if cat != Category.KERNEL:
        totals.ps[cat] += node.bucket
        if parent is not None:
            if cat == Category.XLA:
                parent.has_xla = True
            elif cat == Category.COMPILE:
                parent.has_compile = True
        return
    op_name, op_type = node.op
    role = classify_op_type(op_type)
    pending = node.pending
    if node.has_compile:
        if node.has_xla:
            totals.executions += 1
        if pending:
            totals.ps[Category.COMPILE] += sum(ps for _, ps in pending)
            pending = None
        totals.ps[Category.COMPILE] += node.bucket
    elif role == "xla_compile":
        totals.ps[Category.XLA] += node.bucket
    elif role == "xla_launch" or node.has_xla:
        totals.ps[Category.XLA] += node.bucket
        totals.executions += 1
    elif role == "input":
        totals.ps[Category.INPUT] += node.bucket
    else:
        entry = ((op_type, op_name), node.bucket)
        if pending is None:
            pending = [entry]
        else:
            pending.append(entry)
    if not pending:
        return
    outer = _kernel_ancestor(parent)
    if outer is not None:
        if outer.pending is None:
            outer.pending = pending
        else:
            outer.pending.extend(pending)
        return
    for key, ps in pending:
        totals.ps[Category.OP] += ps
        rec = totals.ops[key]
        rec[0] += ps
        rec[1] += 1


def _scan_line(plane: Any, line: Any, cats: dict[int, int], stat_ids: dict[str, int], totals: _Totals) -> None:
    """Walks one thread's events as a tree (by time nesting) and books them."""
    events = line.events
    if not events:
        return
    order: Iterable[Any] = events
    prev = -1
    for e in events:
        off = e.offset_ps
        if off < prev:
            order = sorted(events, key=lambda e: (e.offset_ps, -e.duration_ps))
            break
        prev = off
    name_id = stat_ids.get("name", -1)
    type_id = stat_ids.get("kernel_type", -1)
    hlo_id = stat_ids.get("hlo_module", -1)
    metadata = plane.event_metadata
    # Everything on a tf.data thread is input-pipeline work, including the
    # TF kernels of `Dataset.map` functions that run there.
    line_absorb = Category.INPUT if line.name.startswith("tf_data") else 0
    stack: list[_Node] = []
    top: _Node | None = None
    for event in order:
        mid = event.metadata_id
        cat = cats.get(mid)
        if cat is None:
            md = metadata.get(mid)
            name = md.name if md is not None else ""
            cat = classify_name(name)
            if COMPILE_COUNT_RE.match(name):
                cat = -cat  # a compile marker: counted each time it occurs
            cats[mid] = cat
        if cat < 0:
            cat = -cat
            totals.compilations += 1
            module = _stats_str(plane, event, name_id)
            if module:
                totals.modules.append(module)
        dur = event.duration_ps
        if dur <= 0:
            continue
        start = event.offset_ps
        end = start + dur
        while top is not None and start >= top.end:
            stack.pop()
            _settle(top, totals)
            top = stack[-1] if stack else None
        absorb = top.absorb if top is not None else line_absorb
        op = None
        if absorb:
            cat = Category.NONE
        elif cat == Category.KERNEL:
            op = split_tf_op(metadata[mid].name)
        elif cat == Category.ASYNC_KERNEL:
            name = _stats_str(plane, event, name_id)
            op_type = _stats_str(plane, event, type_id)
            if op_type:
                cat = Category.KERNEL
                op = (name or op_type, op_type)
            else:
                cat = Category.NONE
        elif cat == Category.NONE and _has_stat(event, hlo_id):
            cat = Category.XLA
        if cat == Category.XLA and _kernel_ancestor(top) is None:
            # An executable span outside any kernel is a launch of its own;
            # HLO/thunk work without one runs on a pool thread for a launch
            # that another thread already times.
            if "Executable::" in metadata[mid].name:
                totals.executions += 1
            else:
                cat = Category.XLA_WORKER
        if cat in _ABSORBING:
            absorb = cat
        elif absorb and top is None:
            cat = absorb
        node = _Node(start, end, cat, absorb, op, top)
        if top is not None:
            top.child_ps += min(end, top.end) - start
        stack.append(node)
        top = node
    while stack:
        _settle(stack.pop(), totals)


def _scan_device_plane(plane: Any, stat_ids: dict[str, int], totals: _Totals) -> bool:
    """Books an accelerator plane; returns whether it held any activity.

    XProf's convention: a device plane has an "XLA Modules" line (one event
    per executable run) and per-stream lines of kernels. Kernels that carry
    an `hlo_op`/`hlo_module` stat belong to XLA; the rest are plain TF
    kernels, named by their `tf_op` stat (`<op_name>:<OpType>`).
    """
    hlo_ids = {stat_ids.get("hlo_op", -1), stat_ids.get("hlo_module", -1)} - {-1}
    tf_op_id = stat_ids.get("tf_op", -1)
    module_ps = 0
    module_runs = 0
    kernel_xla_ps = 0
    active = False
    for line in plane.lines:
        if line.name in _XLA_DEVICE_LINES:
            for event in line.events:
                module_ps += event.duration_ps
                module_runs += 1
            active = active or bool(line.events)
            continue
        if not line.name.startswith("Stream"):
            continue
        for event in line.events:
            active = True
            if any(s.metadata_id in hlo_ids for s in event.stats):
                kernel_xla_ps += event.duration_ps
                continue
            label = _stats_str(plane, event, tf_op_id)
            parsed = split_tf_op(label) if label else None
            if parsed is None:
                md = plane.event_metadata.get(event.metadata_id)
                kernel = md.name if md is not None else "?"
                key = ("(device kernel)", label or kernel)
            else:
                key = (parsed[1], parsed[0])
            totals.ps[Category.OP] += event.duration_ps
            rec = totals.ops[key]
            rec[0] += event.duration_ps
            rec[1] += 1
    totals.ps[Category.XLA] += module_ps if module_runs else kernel_xla_ps
    totals.executions += module_runs
    return active


def _profile_wall_s(space: Any) -> float | None:
    for plane in space.planes:
        if plane.name != "Task Environment":
            continue
        stats = {plane.stat_metadata[s.metadata_id].name: s for s in plane.stats
                 if s.metadata_id in plane.stat_metadata}
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


def _report_from_totals(
    totals: _Totals,
    *,
    time_base: str,
    top_k: int,
    trace_paths: tuple[str, ...],
    hosts: tuple[str, ...],
    wall_s: float | None,
) -> CoverageReport:
    ps = totals.ps
    xla_ps = ps[Category.XLA] or ps[Category.XLA_WORKER]
    op_ps = ps[Category.OP]
    ops = sorted(
        (OpStat(op_type=t, op_name=n, self_time_s=rec[0] * _PS, count=rec[1])
         for (t, n), rec in totals.ops.items()),
        key=lambda o: (-o.self_time_s, o.op_type, o.op_name),
    )
    notes: list[str] = []
    if xla_ps == 0 and op_ps == 0:
        notes.append("the trace holds no op execution: nothing to measure")
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
        compile_time_s=ps[Category.COMPILE] * _PS,
        compiled_modules=tuple(dict.fromkeys(totals.modules)),
        top_non_xla_ops=tuple(ops[:top_k]),
        input_pipeline_time_s=ps[Category.INPUT] * _PS,
        eager_overhead_s=ps[Category.EAGER] * _PS,
        tracing_time_s=ps[Category.TRACING] * _PS,
        notes=tuple(notes),
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
        space: An `xplane_pb2.XSpace` message.
        trace_path: Where the trace came from, recorded in the report.
            Defaults to `None`.
        host: Host name recorded in the report. Defaults to `None`.
        top_k: How many plain TF ops to keep in `top_non_xla_ops`.
            Defaults to `10`.

    Returns:
        A `CoverageReport` with `epoch=None`. When the trace holds
        accelerator planes with activity, times are device times
        (`time_base="device"`); otherwise host thread times.

    Raises:
        ValueError: If `top_k` is negative.
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"`top_k` must be a non-negative integer. Received: top_k={top_k!r}")
    host_totals = _Totals()
    device_totals = _Totals()
    device_active = False
    for plane in space.planes:
        stat_ids = _stat_index(plane)
        if plane.name.startswith("/device:"):
            device_active = _scan_device_plane(plane, stat_ids, device_totals) or device_active
        elif _is_host_plane(plane.name):
            cats: dict[int, int] = {}
            for line in plane.lines:
                _scan_line(plane, line, cats, stat_ids, host_totals)
    if device_active:
        # Device time is what the accelerator spent; compiles and the input
        # pipeline still happen on the host.
        device_totals.compilations = host_totals.compilations
        device_totals.modules = host_totals.modules
        for cat in (Category.COMPILE, Category.INPUT, Category.EAGER, Category.TRACING):
            device_totals.ps[cat] = host_totals.ps[cat]
        totals, base = device_totals, "device"
    else:
        totals, base = host_totals, "host"
    return _report_from_totals(
        totals,
        time_base=base,
        top_k=top_k,
        trace_paths=(trace_path,) if trace_path else (),
        hosts=(host,) if host else (),
        wall_s=_profile_wall_s(space),
    )


def _host_of(path: Path) -> str:
    name = path.name
    return name[: -len(TRACE_SUFFIX)] if name.endswith(TRACE_SUFFIX) else path.stem


def combine_reports(reports: Sequence[CoverageReport], *, top_k: int = DEFAULT_TOP_K) -> CoverageReport:
    """Adds up reports of several hosts (or several traces) into one.

    Args:
        reports: Reports with `status == "ok"`.
        top_k: How many plain TF ops to keep. Defaults to `10`.

    Returns:
        One report whose times, counts and op table are sums, and whose
        fraction is recomputed from the sums.

    Raises:
        ValueError: If `reports` is empty.
    """
    if not reports:
        raise ValueError("`reports` must hold at least one report. Received: []")
    if len(reports) == 1:
        return reports[0]
    ops: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for r in reports:
        for op in r.top_non_xla_ops:
            rec = ops[(op.op_type, op.op_name)]
            rec[0] += op.self_time_s
            rec[1] += op.count
    xla = sum(r.xla_time_s for r in reports)
    non = sum(r.non_xla_op_time_s for r in reports)
    walls = [r.window_wall_s for r in reports if r.window_wall_s is not None]
    top = sorted(
        (OpStat(t, n, rec[0], int(rec[1])) for (t, n), rec in ops.items()),
        key=lambda o: (-o.self_time_s, o.op_type, o.op_name),
    )
    return dataclasses.replace(
        reports[0],
        trace_paths=tuple(p for r in reports for p in r.trace_paths),
        hosts=tuple(h for r in reports for h in r.hosts),
        time_base="device" if any(r.time_base == "device" for r in reports) else "host",
        window_wall_s=max(walls) if walls else None,
        xla_time_s=xla,
        non_xla_op_time_s=non,
        xla_time_fraction=xla / (xla + non) if xla + non else 0.0,
        xla_executions=sum(r.xla_executions for r in reports),
        compilations=sum(r.compilations for r in reports),
        compile_time_s=sum(r.compile_time_s for r in reports),
        compiled_modules=tuple(dict.fromkeys(m for r in reports for m in r.compiled_modules)),
        top_non_xla_ops=tuple(top[:top_k]),
        input_pipeline_time_s=sum(r.input_pipeline_time_s for r in reports),
        eager_overhead_s=sum(r.eager_overhead_s for r in reports),
        tracing_time_s=sum(r.tracing_time_s for r in reports),
        notes=tuple(dict.fromkeys(n for r in reports for n in r.notes)),
    )


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
        ValueError: If `top_k` or `max_bytes` is invalid.

    Example:

    ```python
    from keras_xla_guard import analyze_trace
    report = analyze_trace("logs/xla_guard")
    print(f"{report.xla_time_fraction:.0%} of op time ran under XLA")
    ```
    """
    files = find_trace_files(path)
    reports = [
        analyze_xspace(load_xspace(f, max_bytes=max_bytes), trace_path=str(f),
                       host=_host_of(f), top_k=top_k)
        for f in files
    ]
    return combine_reports(reports, top_k=top_k)
