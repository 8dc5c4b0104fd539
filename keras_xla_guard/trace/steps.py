"""Per step of a window: how long XLA programs kept the device busy, and the gap between them.

A step is a step marker on a host thread: a TraceMe with the `_r` (root)
stat and a `step_num` stat, as the guard writes them (`train`) and as JAX's
`jax.profiler.StepTraceAnnotation` does, that no other marker holds
(`outermost`). An event with `_r` and no `step_num` is no step: TensorFlow
writes `FunctionRun` so around every function call
(`tensorflow/core/common_runtime/function.cc`), grouping one function's
execution. A trace without a marker has no steps (`None`: unknown, never
invented). For each step:

- `wall_s`: the marker's span.
- `busy_s`: the time XLA programs ran inside it, each moment once. On host
  traces (XLA:CPU) that is the union, over host threads, of the spans the
  analysis books as XLA time: a launch's executable span (TensorFlow's
  `CpuExecutable::ExecuteAsyncOnStream`, JAX's
  `CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice`) and the
  program's work on other threads (JAX CPU runs a launched program on its
  `XLAPjRtCpuClient` thread as `ThunkExecutor::Execute`, after the Python
  thread's launch returned). On device traces it is the union of the XLA
  kernels of the step's program runs, on every device (`_device`).
- `idle_s`: the rest of the step, when no program ran: the host gap
  (Python, the input pipeline, dispatch, compiling).
- `launches`: program launches that began in the step (host), or the
  step's runs (device).
- `transfer_s`: device time of the copies and memsets launched in the step;
  `None` on host traces.

Pure: no Keras, no TensorFlow, no JAX.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from keras_xla_guard.trace.classify import Category, classify_name
from keras_xla_guard.trace.compile_wall import union_length
from keras_xla_guard.trace.report import StepStat
from keras_xla_guard.trace.xplane import iter_lines, stat_index

__all__ = [
    "Marker",
    "StepFacts",
    "device_steps",
    "host_steps",
    "line_step_facts",
    "marker_of",
    "outermost",
    "read_step_facts",
    "step_markers",
]

_PS = 1e-12
_ROOT_STAT = "_r"
_STEP_STAT = "step_num"

# (start ps, end ps, step number) of one step marker.
Marker = tuple[int, int, int]


def _int_stat(stat: Any) -> int | None:
    kind = stat.WhichOneof("value")
    return int(getattr(stat, kind)) if kind in ("int64_value", "uint64_value") else None


def step_markers(plane: Any, line: Any) -> list[Marker]:
    """The step markers of one host line (events with `_r` and an integer `step_num`).

    Args:
        plane: The line's plane.
        line: A host line.

    Returns:
        `(start, end, step)` of each marker, in picoseconds on the trace's clock.
    """
    ids = stat_index(plane)
    root, step_id = ids.get(_ROOT_STAT, -1), ids.get(_STEP_STAT, -1)
    if root < 0 or step_id < 0:
        return []
    base = line.timestamp_ns * 1000
    found = []
    for event in line.events:
        marker = marker_of(event, root, step_id, base + event.offset_ps)
        if marker is not None:
            found.append(marker)
    return found


def marker_of(event: Any, root: int, step_id: int, start: int) -> Marker | None:
    """The step marker an event starting at `start` (ps) is, or `None` (see `step_markers`).

    Args:
        event: An `XEvent`.
        root: The stat metadata id of `_r`.
        step_id: The stat metadata id of `step_num`.
        start: The event's start on the trace's clock.

    Returns:
        `(start, end, step)`, or `None` when the event lacks `_r`, an
        integer `step_num` or a duration.
    """
    step = None
    rooted = False
    for stat in event.stats:
        if stat.metadata_id == root:
            rooted = True
        elif stat.metadata_id == step_id:
            step = _int_stat(stat)
    if rooted and step is not None and event.duration_ps > 0:
        return start, start + event.duration_ps, step
    return None


def outermost(markers: Iterable[Marker]) -> list[Marker]:
    """The step markers that no other marker holds, each once, in time order.

    xprof's step grouping (`RootNeedsGrouping`,
    `xla/tsl/profiler/utils/group_events.cc`) makes no step of a root event
    inside another root of its level: a `StepTraceAnnotation` inside the
    guard's `train` marker is part of that step, not a second one.

    Args:
        markers: `(start, end, step)` of step markers, in any order.

    Returns:
        The outermost ones, sorted by start.
    """
    kept: list[Marker] = []
    reach = -1
    for marker in sorted(set(markers), key=lambda m: (m[0], -m[1], m[2])):
        # Sorted by start, the longest first: a marker ending by the furthest
        # end so far lies inside the kept marker that reached it.
        if marker[1] <= reach:
            continue
        kept.append(marker)
        reach = marker[1]
    return kept


def _stat(
    markers: Iterable[Marker],
    busy: Mapping[int, list[tuple[int, int]]],
    launches: Mapping[int, int],
    transfers: Mapping[int, int] | None,
) -> tuple[StepStat, ...]:
    out = []
    for i, (start, end, step) in enumerate(markers):
        wall = end - start
        ran = min(union_length(busy.get(i, [])), wall) if transfers is None else union_length(busy.get(i, []))
        out.append(
            StepStat(
                step=step,
                wall_s=wall * _PS,
                busy_s=ran * _PS,
                idle_s=max(0, wall - ran) * _PS,
                launches=launches.get(i, 0),
                transfer_s=None if transfers is None else transfers.get(i, 0) * _PS,
            )
        )
    return tuple(out)


class StepFacts(NamedTuple):
    """What one host line holds for the per-step figures (times in ps on the trace's clock).

    Attributes:
        markers: The line's step markers (`step_markers`).
        spans: Intervals covered by its XLA executable spans (each span's,
            or their union).
    """

    markers: list[Marker]
    spans: list[tuple[int, int]]


def line_step_facts(plane: Any, line: Any, xla: frozenset[int] | None = None) -> StepFacts:
    """The per-step facts of one parsed host line; `xla` are the plane's `_xla_ids`, when known."""
    return StepFacts(step_markers(plane, line), _xla_spans(line, _xla_ids(plane) if xla is None else xla))


def host_steps(
    space: Any,
    marker_lines: Mapping[str, set[int]],
    xla_lines: Mapping[str, set[int]],
    launch_starts: list[int],
    source: str = "<trace>",
    known: Mapping[str, Mapping[int, StepFacts]] | None = None,
) -> tuple[StepStat, ...] | None:
    """Per step of a host-time trace: wall, busy, idle and launches.

    Args:
        space: The trace (parsed, or of `open_xspace`).
        marker_lines: Plane name -> indices of the lines that may hold
            step markers; read first.
        xla_lines: Plane name -> indices of the lines that ran XLA work;
            read only when there are markers.
        launch_starts: When each XLA launch began (ps), as the scan found them.
        source: Names the trace in errors. Defaults to `"<trace>"`.
        known: Plane name -> line index -> the line's facts, where the
            analysis found them already; those lines are not read.
            Defaults to `None`.

    Returns:
        One `StepStat` per step marker that no other marker holds, in time
        order; `None` (steps unknown) when the trace has none.
    """
    known = known or {}
    markers: list[Marker] = []
    spans: list[tuple[int, int]] = []
    for plane_name, wanted in marker_lines.items():
        for facts in _facts(space, plane_name, wanted, known, source):
            markers.extend(facts.markers)
            spans.extend(facts.spans)
    if not markers:
        return None
    for plane_name, wanted in xla_lines.items():
        rest = wanted - marker_lines.get(plane_name, set())
        if rest:
            for facts in _facts(space, plane_name, rest, known, source):
                spans.extend(facts.spans)
    markers = outermost(markers)
    starts = [m[0] for m in markers]
    busy: dict[int, list[tuple[int, int]]] = {}
    for s, e in spans:
        # Every marker the span overlaps gets the overlapping part.
        i = bisect.bisect_right(starts, e) - 1
        while i >= 0 and markers[i][1] > s:
            if markers[i][0] < e:
                busy.setdefault(i, []).append((max(s, markers[i][0]), min(e, markers[i][1])))
            i -= 1
    launches: dict[int, int] = {}
    for at in launch_starts:
        i = bisect.bisect_right(starts, at) - 1
        if i >= 0 and at < markers[i][1]:
            launches[i] = launches.get(i, 0) + 1
    return _stat(markers, busy, launches, None)


def _facts(
    space: Any, plane_name: str, wanted: set[int], known: Mapping[str, Mapping[int, StepFacts]], source: str
) -> list[StepFacts]:
    """The facts of a plane's `wanted` lines: known ones as given, the others read."""
    have = known.get(plane_name, {})
    found = [have[i] for i in sorted(wanted) if i in have]
    missing = {i for i in wanted if i not in have}
    if missing:
        found.extend(read_step_facts(space, plane_name, missing, source).values())
    return found


def read_step_facts(
    space: Any, plane_name: str, indices: set[int], source: str = "<trace>"
) -> dict[int, StepFacts]:
    """Reads the step facts of a plane's lines at `indices` (`line_step_facts`), by line index, in plane order.

    Args:
        space: The trace (parsed, or of `open_xspace`).
        plane_name: The plane's name.
        indices: Positions of the lines to read.
        source: Names the trace in errors. Defaults to `"<trace>"`.

    Returns:
        Line index -> its `StepFacts`.

    Raises:
        TraceParseError: If a lazily read line does not decode.
    """
    plane = _plane(space, plane_name)
    xla = _xla_ids(plane)
    lines = iter_lines(plane, source=source, indices=indices)
    return {index: line_step_facts(plane, line, xla) for index, line in zip(sorted(indices), lines)}


def _plane(space: Any, name: str) -> Any:
    return next(plane for plane in space.planes if plane.name == name)


def _xla_spans(line: Any, xla: frozenset[int]) -> list[tuple[int, int]]:
    """The spans of a line's events whose names (`xla`, metadata ids) the analysis books as XLA time."""
    base = line.timestamp_ns * 1000
    return [
        (base + e.offset_ps, base + e.offset_ps + e.duration_ps)
        for e in line.events
        if e.metadata_id in xla and e.duration_ps > 0
    ]


def _xla_ids(plane: Any) -> frozenset[int]:
    """Metadata ids of a plane's XLA executable spans (`classify_name`)."""
    return frozenset(
        mid for mid, md in plane.event_metadata.items() if classify_name(md.name) == Category.XLA
    )


def device_steps(
    markers: list[Marker],
    busy: Mapping[int, list[tuple[int, int]]],
    launches: Mapping[int, int],
    transfers: Mapping[int, int],
) -> tuple[StepStat, ...]:
    """Per step of a device-time trace, from the device's runs grouped by step marker.

    Args:
        markers: The host's step markers, in the order their indices
            (the runs' groups) refer to.
        busy: Marker index -> the (start, end) of each XLA kernel of that
            step's runs, on every device.
        launches: Marker index -> that step's runs.
        transfers: Marker index -> device time (ps) of the copies and
            memsets launched inside that marker.

    Returns:
        One `StepStat` per marker, in time order.
    """
    order = sorted(range(len(markers)), key=lambda i: markers[i])
    return _stat(
        [markers[i] for i in order],
        {k: busy[i] for k, i in enumerate(order) if i in busy},
        {k: launches[i] for k, i in enumerate(order) if i in launches},
        {k: transfers[i] for k, i in enumerate(order) if i in transfers},
    )
