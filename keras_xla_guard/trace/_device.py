"""Accelerator planes: XLA program runs, plain TF kernels and transfers.

A GPU plane (`/device:GPU:N`) as the profiler writes it has one line per
CUDA stream, `Stream #<id>(<event types>)`, written by XLA's CUPTI
collector (`xla/backends/profiler/gpu/cupti_collector.cc`). Each event is a
kernel (`kernel_details` stat), a memory copy (`memcpy_details`) or a
memset (`memset_details`); the annotation stack the kernel ran under adds
`tf_op` (its outermost name) and the keys of its annotations: XLA's
`XlaModule:#hlo_module=...,program_id=...#` and `Thunk:#hlo_op=...#`.

XProf derives "XLA Modules" lines from those stats when it loads a trace
(`GenerateDerivedTimeLines`, `xprof/utils/derived_timeline.cc`): on each
stream, consecutive kernels of one program (`hlo_module` and `program_id`)
in one step group (`group_id`) become one module event, spanning the
first kernel's start to the last one's end; memory copies and kernels of
other code do not interrupt it. This module follows that rule:

- XLA time is the sum of those spans, launches their count, and each
  program's time its spans' sum.
- Step groups: a kernel's `group_id` stat where xprof already set one;
  otherwise the step marker (a host event with the `_r` stat, or Keras'
  `TraceContext`) whose span holds the host event that launched the kernel
  (same `correlation_id`); a kernel with neither takes the group of the
  XLA kernel before it on its plane (as xprof's `ProcessUngroupedEvents`
  does with the event before it).
- Memory copies and memsets are transfers, never ops, whatever annotation
  they ran under.
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
from collections.abc import Callable
from typing import Any

from keras_xla_guard.trace._events import stat_index, stat_str, stats_str
from keras_xla_guard.trace.classify import split_tf_op
from keras_xla_guard.trace.xplane import iter_lines

__all__ = ["DeviceTotals", "host_launch_groups", "scan_device_plane"]

_MODULE_LINE = "XLA Modules"
# XProf >= 2.2x writes one derived module line per stream, "XLA Modules - from #<id>".
_MODULE_LINE_PER_STREAM = "XLA Modules - from #"
_TRANSFER_STATS = ("memcpy_details", "memset_details")
_TRANSFER_NAMES = ("Memcpy", "Memset")
# Step markers XProf groups by: any TraceMe with the `_r` (is root) stat,
# and the legacy root Keras' TensorBoard callback writes.
_ROOT_STAT = "_r"
_LEGACY_ROOT = "TraceContext"


class DeviceTotals:
    """What the device planes of one trace hold (picoseconds).

    Attributes:
        active: Whether any plane had events on its stream or module lines.
        xla_ps: Time of XLA program runs.
        runs: XLA program runs (launches).
        programs: Program label -> [runs, ps].
        transfer_ps: Time of memory copies and memsets.
        op_ps: Time of plain (non-XLA) kernels.
        ops: `(op_type, op_name)` -> [ps, count] of plain kernels.
    """

    def __init__(self) -> None:
        self.active = False
        self.xla_ps = 0
        self.runs = 0
        self.programs: dict[str, list[int]] = {}
        self.transfer_ps = 0
        self.op_ps = 0
        self.ops: dict[tuple[str, str], list[int]] = {}

    def add_op(self, key: tuple[str, str], ps: int) -> None:
        """Books one plain kernel."""
        self.op_ps += ps
        rec = self.ops.setdefault(key, [0, 0])
        rec[0] += ps
        rec[1] += 1

    def add_run(self, program: str, ps: int) -> None:
        """Books one XLA program run."""
        self.xla_ps += ps
        self.runs += 1
        rec = self.programs.setdefault(program, [0, 0])
        rec[0] += 1
        rec[1] += ps


def host_launch_groups(space: Any, source: str) -> dict[int, int]:
    """Reads the host planes' step markers and kernel launches.

    Args:
        space: The trace.
        source: Name used in error messages.

    Returns:
        CUPTI correlation id -> index of the step marker whose span holds
        the launch; launches outside every marker are left out.
    """
    roots: list[tuple[int, int]] = []
    launches: list[tuple[int, int]] = []
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        ids = stat_index(plane)
        root_id, corr_id = ids.get(_ROOT_STAT, -1), ids.get("correlation_id", -1)
        legacy = {mid for mid, md in plane.event_metadata.items() if md.name == _LEGACY_ROOT}
        if root_id < 0 and corr_id < 0 and not legacy:
            continue
        for line in iter_lines(plane, source=source):
            base = line.timestamp_ns * 1000
            for event in line.events:
                start = base + event.offset_ps
                if event.metadata_id in legacy:
                    roots.append((start, start + event.duration_ps))
                for stat in event.stats:
                    if stat.metadata_id == root_id:
                        roots.append((start, start + event.duration_ps))
                    elif stat.metadata_id == corr_id:
                        launches.append((_int_value(stat), start))
    roots = sorted(set(roots))
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
    return group_of


def _int_value(stat: Any) -> int:
    kind = stat.WhichOneof("value")
    return int(getattr(stat, kind)) if kind in ("int64_value", "uint64_value") else -1


def scan_device_plane(plane: Any, totals: DeviceTotals, launches: Callable[[], dict[int, int]],
                      source: str) -> None:
    """Books one accelerator plane into `totals`.

    Args:
        plane: A `/device:` plane (parsed, or of `open_xspace`).
        totals: Where the plane's figures are added.
        launches: Gives the host's launch groups (`host_launch_groups`);
            called only when a kernel of an XLA program carries no
            `group_id`.
        source: Name used in error messages.
    """
    ids = stat_index(plane)
    hlo_op_id, module_id = ids.get("hlo_op", -1), ids.get("hlo_module", -1)
    program_id, group_id = ids.get("program_id", -1), ids.get("group_id", -1)
    corr_id, tf_op_id = ids.get("correlation_id", -1), ids.get("tf_op", -1)
    transfer_ids = {ids[name] for name in _TRANSFER_STATS if name in ids}
    module_events: list[int] = []
    loose_xla_ps = 0
    # Per stream line: (start, end, module, program, group, correlation id)
    # of each XLA kernel, in line order.
    streams: list[list[tuple[int, int, str, int, int | None, int]]] = []
    for line in iter_lines(plane, source=source):
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
        kernels: list[tuple[int, int, str, int, int | None, int]] = []
        for event in line.events:
            totals.active = True
            dur = event.duration_ps
            if dur <= 0:
                continue
            module, hlo_op, program, group, corr, transfer = "", False, -1, None, -1, False
            for stat in event.stats:
                sid = stat.metadata_id
                if sid == module_id:
                    module = stat_str(plane, stat)
                elif sid == hlo_op_id:
                    hlo_op = True
                elif sid == program_id:
                    program = _int_value(stat)
                elif sid == group_id:
                    group = _int_value(stat)
                elif sid == corr_id:
                    corr = _int_value(stat)
                elif sid in transfer_ids:
                    transfer = True
            if transfer or _is_transfer_name(plane, event):
                totals.transfer_ps += dur
            elif module:
                start = base + event.offset_ps
                kernels.append((start, start + dur, module, program, group, corr))
            elif hlo_op:
                # An XLA op outside any module annotation: XLA time, no run.
                loose_xla_ps += dur
            else:
                totals.add_op(_op_key(plane, event, tf_op_id), dur)
        if kernels:
            streams.append(kernels)
    if not streams and not loose_xla_ps:
        totals.xla_ps += sum(module_events)
        totals.runs += len(module_events)
        return
    totals.xla_ps += loose_xla_ps
    groups = _resolve_groups(streams, launches)
    for kernels in streams:
        run_key: tuple[str, int, int | None] | None = None
        run_start = run_end = 0
        for (start, end, module, program, _, _), group in zip(kernels, groups[id(kernels)]):
            key = (module, program, group)
            if key == run_key:
                run_end = max(run_end, end)
                continue
            if run_key is not None:
                totals.add_run(_program_label(run_key), run_end - run_start)
            run_key, run_start, run_end = key, start, end
        if run_key is not None:
            totals.add_run(_program_label(run_key), run_end - run_start)


def _resolve_groups(streams: list[list[tuple[int, int, str, int, int | None, int]]],
                    launches: Callable[[], dict[int, int]]) -> dict[int, list[int | None]]:
    """Each kernel's step group: its own, its launch's, or the one before it on the plane."""
    found: dict[int, list[int | None]] = {}
    host: dict[int, int] | None = None
    timeline: list[tuple[int, int, int]] = []
    for kernels in streams:
        own: list[int | None] = []
        for i, (start, _, _, _, group, corr) in enumerate(kernels):
            if group is None and corr >= 0:
                if host is None:
                    host = launches()
                launch_group = host.get(corr)
                # Host groups are told apart from xprof's own ids by sign.
                group = None if launch_group is None else -1 - launch_group
            own.append(group)
            timeline.append((start, id(kernels), i))
        found[id(kernels)] = own
    last: int | None = None
    for _, key, i in sorted(timeline):
        group = found[key][i]
        if group is None:
            found[key][i] = last
        else:
            last = group
    return found


def _program_label(key: tuple[str, int, int | None]) -> str:
    """XProf's module event name: `<hlo_module>(<program_id>)`, or the module alone."""
    module, program, _ = key
    return f"{module}({program})" if program >= 0 else module


def _is_transfer_name(plane: Any, event: Any) -> bool:
    """CUPTI names copies and memsets by their type when it has no other name."""
    md = plane.event_metadata.get(event.metadata_id)
    return md is not None and md.name.startswith(_TRANSFER_NAMES)


def _op_key(plane: Any, event: Any, tf_op_id: int) -> tuple[str, str]:
    label = stats_str(plane, event, tf_op_id)
    parsed = split_tf_op(label) if label else None
    if parsed is not None:
        return parsed[1], parsed[0]
    md = plane.event_metadata.get(event.metadata_id)
    return "(device kernel)", label or (md.name if md is not None else "?")
