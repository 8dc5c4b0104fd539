"""Wall-clock compile time in a trace (pure: parsed XSpace in, seconds out).

`CoverageReport.compile_thread_time_s` sums compile time over threads;
XLA:CPU compiles one program on several threads at once, so that sum
exceeds the time a run waits for the compilation. A projection of run time
needs the wait: the union, over all host threads, of the intervals in which
a compile event was open (here over the whole file; the report's
`compile_time_s` takes it over its compilations' intervals).
"""

from __future__ import annotations

import os
from typing import Any

from keras_xla_guard.trace.classify import Category, classify_name
from keras_xla_guard.trace.xplane import DEFAULT_MAX_TRACE_BYTES, load_xspace

__all__ = ["compile_intervals_ps", "compile_wall_s", "union_length"]


def union_length(intervals: list[tuple[int, int]]) -> int:
    """Total length covered by half-open `(start, end)` intervals (overlaps once).

    Args:
        intervals: `(start, end)` pairs, in any order.

    Returns:
        The length of their union.
    """
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def compile_intervals_ps(space: Any) -> list[tuple[int, int]]:
    """The absolute intervals (picoseconds) of every compile event on host threads.

    Args:
        space: A parsed `xplane_pb2.XSpace`.

    Returns:
        `(start, end)` pairs of events classified as compilation.
    """
    intervals: list[tuple[int, int]] = []
    for plane in space.planes:
        if not plane.name.startswith("/host:") or plane.name == "/host:metadata":
            continue
        compile_ids = {
            mid for mid, md in plane.event_metadata.items() if classify_name(md.name) == Category.COMPILE
        }
        if not compile_ids:
            continue
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            intervals.extend(
                (base + e.offset_ps, base + e.offset_ps + e.duration_ps)
                for e in line.events
                if e.metadata_id in compile_ids
            )
    return intervals


def compile_wall_s(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_TRACE_BYTES) -> float:
    """Seconds during which at least one thread of the trace was compiling.

    Args:
        path: An `.xplane.pb` file.
        max_bytes: Refuse larger files. Defaults to 1 GiB.

    Returns:
        The wall-clock compile time.

    Raises:
        TraceParseError: If the file is not a valid trace.
        TraceTooLargeError: If it is larger than `max_bytes`.
    """
    return union_length(compile_intervals_ps(load_xspace(path, max_bytes=max_bytes))) * 1e-12
