"""The host side of a GPU trace: step markers, driver calls and the program executions they belong to.

What the writers put on the host planes (`/host:CPU`):

- Step markers: a TraceMe with the `_r` (root) stat and an integer
  `step_num`, as the guard writes `train` and JAX's
  `jax.profiler.StepTraceAnnotation` does (`steps.marker_of`). TensorFlow
  also writes `FunctionRun` with `_r=1` but no `step_num` around every
  function call (`tensorflow/core/common_runtime/function.cc`): it groups
  one function's execution and opens no step, here as in xprof, whose step
  grouping (`xla/tsl/profiler/utils/group_events.cc`) makes no step of it
  inside a marker and gives it no step name outside one.
- Driver calls that put work on a device, each with the `correlation_id`
  its device event carries: CUDA's `cuLaunchKernel`, `cuMemcpy*Async`,
  `cuMemsetD32Async`, `cuGraphLaunch` (XLA's CUPTI collector,
  `xla/backends/profiler/gpu/cupti_collector.cc`), ROCm's
  `hipModuleLaunchKernel`, `hipExtModuleLaunchKernel`, `hipMemcpy*`
  (`xla/backends/profiler/gpu/rocm_collector.cc`).
- Program executions: XLA's GPU executable writes one TraceMe
  `<hlo_module>:XLA GPU module` around each run of a program on a device
  (`GpuExecutable::ExecuteAsyncOnStreamImpl`,
  `xla/service/gpu/gpu_executable.cc`), and its thunks launch their
  kernels inside it, on the same thread: TensorFlow's `tf_Compute` thread
  under `PjRtStreamExecutorLoadedExecutable::Execute`, JAX's Python
  thread (StreamExecutor client) or its `execute_fn` worker
  (`xla/pjrt/gpu/tfrt/tfrt_gpu_executable.cc`). A driver call inside such
  an event belongs to that execution. CUPTI's driver calls land on the
  launching thread's line (TensorFlow and JAX merge its plane into the
  host's by thread id); ROCm's stay on lines of their own, `Host
  Threads/<tid>`, whose thread is the one whose executions hold them.

Pure: no Keras, no TensorFlow.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Any, NamedTuple

from keras_xla_guard.trace.steps import Marker, marker_of, outermost
from keras_xla_guard.trace.xplane import iter_lines, stat_index

__all__ = ["HostLaunches", "host_launches"]

_ROOT_STAT = "_r"
_STEP_STAT = "step_num"
_EXECUTION_SUFFIX = ":XLA GPU module"
# Driver calls that put work on a device (CUDA, ROCm), by name prefix.
_LAUNCH_API = (
    "cuLaunch",
    "cuMemcpy",
    "cuMemset",
    "cuGraphLaunch",
    "hipLaunch",
    "hipModuleLaunch",
    "hipExtModuleLaunch",
    "hipExtLaunch",
    "hipMemcpy",
    "hipMemset",
    "hipGraphLaunch",
)
# A host callback enqueued on a stream: no device event is written for it.
_HOST_FUNC = "LaunchHostFunc"


class HostLaunches(NamedTuple):
    """The host planes' step markers and device work launches.

    Attributes:
        groups: CUPTI correlation id -> index (in `markers`) of the step
            marker whose span holds the launch; launches outside every
            marker are left out.
        markers: `(start ps, end ps, step)` of each step marker that is in
            no other one, in time order.
        launches: `(correlation id, start ps)` of each driver call that puts
            work on a device (kernel launches, copies, memsets, graph
            launches), in trace order.
        executions: Correlation id -> the program execution (an `XLA GPU
            module` host event, numbered in trace order) that made the
            driver call; calls outside every execution are left out.
    """

    groups: dict[int, int]
    markers: list[Marker]
    launches: list[tuple[int, int]]
    executions: dict[int, int]


class _Line(NamedTuple):
    """One host line's driver calls and executions (times in ps on the trace's clock).

    `calls_only`: whether every event of the line carries a correlation id,
    as on ROCm's lines of runtime API calls.
    """

    calls: list[tuple[int, int]]
    spans: list[tuple[int, int, int]]
    calls_only: bool


def host_launches(space: Any, source: str) -> HostLaunches:
    """Reads the host planes' step markers, driver calls and program executions.

    Args:
        space: The trace.
        source: Name used in error messages.

    Returns:
        The markers' grouping of launches, the launches themselves and the
        execution each was made in.
    """
    found: list[Marker] = []
    # Every event with a correlation id (grouped by the markers), and of
    # them the driver calls (device work).
    correlated: list[tuple[int, int]] = []
    launches: list[tuple[int, int]] = []
    lines: list[_Line] = []
    count = itertools.count()
    for plane in space.planes:
        if plane.name.startswith("/host:"):
            _read_plane(plane, source, found, (correlated, launches), lines, count)
    markers = outermost(found)
    return HostLaunches(_groups(markers, correlated), markers, launches, _executions(lines))


def _read_plane(
    plane: Any,
    source: str,
    markers: list[Marker],
    out: tuple[list[tuple[int, int]], list[tuple[int, int]]],
    lines: list[_Line],
    count: Any,
) -> None:
    """Adds one host plane's markers, correlated events and driver calls (`out`), and per-line calls and executions."""
    correlated, launches = out
    ids = stat_index(plane)
    root_id, corr_id, step_id = (
        ids.get(_ROOT_STAT, -1),
        ids.get("correlation_id", -1),
        ids.get(_STEP_STAT, -1),
    )
    metadata = plane.event_metadata
    runs = {mid for mid in metadata if metadata[mid].name.endswith(_EXECUTION_SUFFIX)}
    marked = root_id >= 0 and step_id >= 0
    if not marked and corr_id < 0 and not runs:
        return
    api = {
        mid
        for mid in metadata
        if metadata[mid].name.startswith(_LAUNCH_API) and _HOST_FUNC not in metadata[mid].name
    }
    for line in iter_lines(plane, source=source):
        base = line.timestamp_ns * 1000
        calls: list[tuple[int, int]] = []
        spans: list[tuple[int, int, int]] = []
        uncorrelated = 0
        for event in line.events:
            start = base + event.offset_ps
            if event.metadata_id in runs:
                spans.append((start, start + event.duration_ps, next(count)))
                continue
            marker = marker_of(event, root_id, step_id, start) if marked else None
            if marker is not None:
                markers.append(marker)
            uncorrelated += 1
            for stat in event.stats:
                if stat.metadata_id == corr_id:
                    uncorrelated -= 1
                    call = (_int_value(stat), start)
                    correlated.append(call)
                    if event.metadata_id in api:
                        calls.append(call)
                        launches.append(call)
        if calls or spans:
            lines.append(_Line(calls, sorted(spans), not uncorrelated))


def _int_value(stat: Any) -> int:
    kind = stat.WhichOneof("value")
    return int(getattr(stat, kind)) if kind in ("int64_value", "uint64_value") else -1


def _groups(markers: list[Marker], launches: list[tuple[int, int]]) -> dict[int, int]:
    """Correlation id -> index of the marker whose span holds the launch (ends inclusive)."""
    starts = [start for start, _, _ in markers]
    group_of: dict[int, int] = {}
    for corr, at in launches:
        # Markers are outermost: none holds another, so the latest one that
        # started before the launch is the only one that can hold it.
        i = bisect.bisect_right(starts, at) - 1
        if i >= 0 and markers[i][1] >= at:
            group_of[corr] = i
    return group_of


def _executions(lines: list[_Line]) -> dict[int, int]:
    """Correlation id -> the execution whose `XLA GPU module` span on the calling thread holds the call.

    A line of runtime calls alone (ROCm's `Host Threads/<tid>`) is matched
    with the line whose executions hold most of its calls: the thread that
    made them. A thread's calls outside its own executions belong to none.
    """
    owners = [line for line in lines if line.spans]
    found: dict[int, int] = {}
    for line in lines:
        if not line.calls:
            continue
        owner = _owner(line, owners) if line.calls_only and not line.spans else line
        if owner is None:
            continue
        starts = [start for start, _, _ in owner.spans]
        for corr, at in line.calls:
            run = _holding(owner.spans, starts, at)
            if run is not None:
                found[corr] = run
    return found


def _holding(spans: list[tuple[int, int, int]], starts: list[int], at: int) -> int | None:
    """The execution among a line's (sorted, not overlapping) spans that holds instant `at`."""
    i = bisect.bisect_right(starts, at) - 1
    return spans[i][2] if i >= 0 and spans[i][1] >= at else None


def _owner(line: _Line, owners: list[_Line]) -> _Line | None:
    """The line whose executions hold the most of `line`'s calls (the first such line on a tie); `None` if none holds any."""
    best, held = None, 0
    for owner in owners:
        starts = [start for start, _, _ in owner.spans]
        n = sum(1 for _, at in line.calls if _holding(owner.spans, starts, at) is not None)
        if n > held:
            best, held = owner, n
    return best
