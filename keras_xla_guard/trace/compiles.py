"""The compile table: every XLA compilation of a trace, with its wall-clock cost.

Pure (parsed XSpace in, frozen records out). One `*Compiler::RunBackend`
event marks one compiled program (its `name` stat is the HLO module). The
compilation begins with the first compile-phase event (HLO passes,
`JitCompiler::Compile`, ...) of the same thread inside the same TF kernel
and ends with `RunBackend`; its wall-clock time is the union, over all
host threads, of the compile events open in that interval (XLA:CPU
compiles one program on several threads at once), less what an earlier
row already holds (programs compiled at the same time): the rows add up to
the window's wall-clock compile time. The guard's step
markers (`train` events with a `step_num` stat) give the training step
a compilation happened in.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from keras_xla_guard.trace.classify import COMPILE_COUNT_RE, Category, classify_name
from keras_xla_guard.trace.compile_wall import union_length
from keras_xla_guard.trace.xplane import iter_lines, stat_index

__all__ = [
    "STEP_EVENT",
    "CompileFacts",
    "CompileRecord",
    "attribute_compiles",
    "compile_records",
    "line_compile_facts",
    "marker_module",
    "program_of",
    "read_compile_facts",
    "step_event",
]

_PS = 1e-12
STEP_EVENT: Final = "train"
_FUNCTION_MODULE_RE: Final = re.compile(r"^a_inference_(.+?)_\d+__")
_CLUSTER_MODULE_RE: Final = re.compile(r"^(cluster_\d+)_")


@dataclass(frozen=True)
class CompileRecord:
    """One XLA compilation (or a program found without one) in a profiled window.

    Attributes:
        program: The compiled TF function or auto-clustering cluster, e.g.
            `"one_step_on_data"` or `"cluster_0"`.
        module: The HLO module name, e.g. `"a_inference_one_step_on_data_805__.8"`;
            `""` for a cache hit.
        start_s: When the compilation began, seconds into the trace; `None`
            for a cache hit.
        compile_s: Wall-clock compile time in seconds; `None` for a cache
            hit.
        cache_hit: `True` for a new input signature that ran without a
            compilation: its program came from a cache (a `warm_up`, or
            TensorFlow's persistent compilation cache).
        step: The training step (0-based, in the epoch) the compilation
            happened in; `None` when unknown.
        signature: The input signature that caused it, when signatures
            are tracked.
    """

    program: str
    module: str = ""
    start_s: float | None = None
    compile_s: float | None = None
    cache_hit: bool = False
    step: int | None = None
    signature: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Returns the record as a JSON-serializable dict."""
        return dataclasses.asdict(self)


def program_of(module: str) -> str:
    """The TF function or cluster an HLO module was compiled from.

    Args:
        module: An HLO module name such as `"a_inference_one_step_on_data_805__.8"`
            or `"cluster_0__XlaCompiledKernel_true__XlaNumConstantArgs_0_.7"`.

    Returns:
        `"one_step_on_data"`, `"cluster_0"`; else `module` without its
        `.N` suffix.
    """
    m = _FUNCTION_MODULE_RE.match(module) or _CLUSTER_MODULE_RE.match(module)
    if m is not None:
        return m.group(1)
    return re.sub(r"\.\d+$", "", module)


def _stat_value(plane: Any, stat: Any) -> Any:
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        ref = plane.stat_metadata.get(stat.ref_value)
        return ref.name if ref is not None else ""
    return getattr(stat, kind) if kind else None


def _event_stat(plane: Any, event: Any, stat_id: int) -> Any:
    for stat in event.stats:
        if stat.metadata_id == stat_id:
            return _stat_value(plane, stat)
    return None


def marker_module(plane: Any, event: Any, name_id: int) -> str:
    """The HLO module a `RunBackend` marker compiled (its `name` stat), or `""`."""
    return str(_event_stat(plane, event, name_id) or "")


def step_event(plane: Any, event: Any, step_id: int, start: int) -> tuple[int, int, int] | None:
    """`(start, end, step)` of a `train` event starting at `start` (ps), or `None` without an integer step."""
    value = _event_stat(plane, event, step_id)
    if not isinstance(value, int):
        return None
    return start, start + event.duration_ps, value


class CompileFacts(NamedTuple):
    """What one host line holds for the compile table (times in ps on the trace's clock).

    Attributes:
        spans: Intervals covered by compile-phase events (each event's, or
            their union).
        steps: `(start, end, step)` of the `train` step events.
        found: `(begin, end, module)` of each compilation (`RunBackend`
            marker) on the line.
    """

    spans: list[tuple[int, int]]
    steps: list[tuple[int, int, int]]
    found: list[tuple[int, int, str]]


class _PlaneIds(NamedTuple):
    """The metadata ids the compile table reads in one plane."""

    markers: set[int]
    compiling: set[int]
    steps: set[int]
    name_id: int
    step_id: int

    @classmethod
    def of(cls, plane: Any) -> _PlaneIds:
        metadata = plane.event_metadata
        stat_ids = stat_index(plane)
        return cls(
            {mid for mid, md in metadata.items() if COMPILE_COUNT_RE.match(md.name)},
            {mid for mid, md in metadata.items() if classify_name(md.name) == Category.COMPILE},
            {mid for mid, md in metadata.items() if md.name == STEP_EVENT},
            stat_ids.get("name", -1),
            stat_ids.get("step_num", -1),
        )


def _line_compiles(
    plane: Any, line: Any, base: int, markers: set[int], compiling: set[int], name_id: int
) -> list[tuple[int, int, str]]:
    """`(start, end, module)` of each compilation on one thread."""
    events = sorted(
        (
            (base + e.offset_ps, base + e.offset_ps + e.duration_ps, e)
            for e in line.events
            if e.duration_ps > 0
        ),
        key=lambda item: (item[0], -item[1]),
    )
    starts = [item[0] for item in events]
    out = []
    previous_end = None
    for index, (start, end, marker) in enumerate(events):
        if marker.metadata_id not in markers:
            continue
        # The innermost non-compile event around the marker (the TF kernel
        # or executor it ran in) bounds the compilation's start; so does
        # the previous compilation on this thread.
        floor = previous_end
        for j in range(index - 1, -1, -1):
            s, t, other = events[j]
            if t >= end and other.metadata_id not in compiling:
                floor = s if floor is None else max(floor, s)
                break
        first = bisect.bisect_left(starts, floor) if floor is not None else 0
        begin = min(
            (s for s, _, other in events[first:index] if other.metadata_id in compiling), default=start
        )
        out.append((begin, end, marker_module(plane, marker, name_id)))
        previous_end = end
    return out


def line_compile_facts(plane: Any, line: Any, ids: _PlaneIds) -> CompileFacts:
    """The compile table's facts of one parsed host line."""
    base = line.timestamp_ns * 1000
    spans: list[tuple[int, int]] = []
    steps: list[tuple[int, int, int]] = []
    has_marker = False
    for e in line.events:
        mid = e.metadata_id
        if e.duration_ps <= 0:
            continue
        if mid in ids.compiling:
            spans.append((base + e.offset_ps, base + e.offset_ps + e.duration_ps))
            has_marker = has_marker or mid in ids.markers
        elif mid in ids.steps and ids.step_id >= 0:
            step = step_event(plane, e, ids.step_id, base + e.offset_ps)
            if step is not None:
                steps.append(step)
    found = _line_compiles(plane, line, base, ids.markers, ids.compiling, ids.name_id) if has_marker else []
    return CompileFacts(spans, steps, found)


def read_compile_facts(
    space: Any, plane_name: str, indices: set[int], source: str
) -> dict[int, CompileFacts]:
    """Reads the compile table's facts of some lines of one plane.

    For lines the analysis's scan gathered no facts of, which it must read
    to know whether their `train` events date compiles.

    Args:
        space: The trace (parsed, or of `open_xspace`).
        plane_name: The plane's name.
        indices: Positions of the lines to read.
        source: Names the trace in errors.

    Returns:
        Line index -> its `CompileFacts`.

    Raises:
        TraceParseError: If a lazily read line does not decode.
    """
    plane = next(plane for plane in space.planes if plane.name == plane_name)
    return _read_facts(plane, indices, source)


def _read_facts(plane: Any, indices: set[int] | None, source: str) -> dict[int, CompileFacts]:
    """`CompileFacts` of the lines at `indices` of `plane` (`None`: every line), by index."""
    ids = _PlaneIds.of(plane)
    numbers = sorted(indices) if indices is not None else itertools.count()
    return {
        index: line_compile_facts(plane, line, ids)
        for index, line in zip(numbers, iter_lines(plane, source=source, indices=indices))
    }


def compile_records(
    space: Any,
    *,
    source: str = "<trace>",
    lines: Mapping[str, set[int]] | None = None,
    known: Mapping[str, Mapping[int, CompileFacts]] | None = None,
) -> tuple[CompileRecord, ...]:
    """Every XLA compilation in a trace, in the order they began.

    Args:
        space: A parsed `xplane_pb2.XSpace` (or a lazily read one).
        source: Names the trace in errors. Defaults to `"<trace>"`.
        lines: Plane name -> indices of the lines to read: those that hold
            compile events and those that hold step markers, when
            known (the analysis finds them); other lines are not even
            decoded. Defaults to `None` (every line is read).
        known: Plane name -> line index -> the line's facts, where the
            analysis found them already; those lines are not read.
            Defaults to `None`.

    Returns:
        One `CompileRecord` per compiled program (`cache_hit=False`);
        `signature` is `None` (the guard fills it in).
    """
    records: list[tuple[int, list[tuple[int, int]], CompileRecord]] = []
    for plane in space.planes:
        if not plane.name.startswith("/host:") or plane.name == "/host:metadata":
            continue
        if not any(COMPILE_COUNT_RE.match(md.name) for md in plane.event_metadata.values()):
            continue
        facts = dict((known or {}).get(plane.name, {}))
        wanted = None if lines is None else lines.get(plane.name, set())
        missing = None if wanted is None else wanted - set(facts)
        if missing is None or missing:
            facts.update(_read_facts(plane, missing, source))
        chosen = sorted(facts) if wanted is None else sorted(wanted)
        intervals = [span for index in chosen for span in facts[index].spans]
        steps = [step for index in chosen for step in facts[index].steps]
        found = [row for index in chosen for row in facts[index].found]
        for begin, end, module in sorted(found):
            clipped = [(max(s, begin), min(t, end)) for s, t in intervals if s < end and t > begin]
            step = next((n for s, t, n in steps if s <= begin <= t), None)
            records.append(
                (
                    begin,
                    clipped,
                    CompileRecord(
                        program=program_of(module) if module else "?",
                        module=module,
                        start_s=begin * _PS,
                        step=step,
                    ),
                )
            )
    records.sort(key=lambda item: item[0])
    # Each row gets the compile time no earlier row already holds, so that
    # rows of programs compiled at the same time add up to the wall-clock
    # compile time of the window (`CoverageReport.compile_time_s`).
    covered: list[tuple[int, int]] = []
    rows = []
    for _, clipped, record in records:
        before = union_length(covered)
        covered.extend(clipped)
        rows.append(dataclasses.replace(record, compile_s=(union_length(covered) - before) * _PS))
    return tuple(rows)


def attribute_compiles(
    table: tuple[CompileRecord, ...],
    new_signatures: list[tuple[str, int | None]],
    steps: tuple[int, int] | None,
) -> tuple[tuple[CompileRecord, ...], int]:
    """Names the input signature of each compilation and adds the cache hits.

    Each signature new to the run costs one compilation of the step, unless
    its program is already compiled (by a warm-up, or loaded from the
    persistent cache). A compilation is matched to the new signature first
    seen at its step; those without a step to the remaining new signatures
    in order. A new signature of the window left without a compilation is a
    cache hit.

    Args:
        table: The window's compilations, in order.
        new_signatures: `(signature text, first step or None)` of the
            epoch's new signatures, first seen first.
        steps: `(first step, number of steps)` of the window; `None` when
            unknown (every new signature counts).

    Returns:
        `(table, cache_hits)`: the table with signatures filled in and one
        `cache_hit=True` row per cache hit, in step order.
    """
    if steps is not None:
        first, count = steps
        new_signatures = [(s, n) for s, n in new_signatures if n is None or first <= n < first + count]
    left = list(new_signatures)
    rows = list(table)
    for i, row in enumerate(table):
        match = next((j for j, (_, n) in enumerate(left) if n is not None and n == row.step), None)
        if match is not None:
            rows[i] = dataclasses.replace(row, signature=left.pop(match)[0])
    for i, row in enumerate(rows):
        if row.signature is None and left:
            signature, step = left.pop(0)
            rows[i] = dataclasses.replace(
                row, signature=signature, step=row.step if row.step is not None else step
            )
    hits = [CompileRecord(program="", cache_hit=True, step=n, signature=s) for s, n in left]
    merged = rows + hits
    order = {id(r): k for k, r in enumerate(merged)}
    merged.sort(key=lambda r: (r.step if r.step is not None else -1, order[id(r)]))
    return tuple(merged), len(hits)
