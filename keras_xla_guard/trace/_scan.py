"""The scan: one pass over each thread's events, booking time by category.

`scan_events` is the hot loop of `analyze_trace`: it walks a line's events
as a tree (by time nesting) and books each event's self time to its
owner's category or TF kernel (see its docstring). `scan_line` and
`scan_lazy_line` feed it one line, parsed or read in slices;
`adopt_loose_launches` finds launches whose kernel events TensorFlow
dropped. Sums go into a `Totals`, which `analysis` turns into a
`CoverageReport`. Device planes are read by `_device`. Pure: no Keras, no
TensorFlow.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, NamedTuple

from keras_xla_guard.trace._columns import ColumnScan, LineFacts, OpSums, top_level_cut
from keras_xla_guard.trace._events import (
    CALL,
    LAUNCH,
    MARKER_CODE,
    MAYBE_LAUNCH,
    TRAIN_CODE,
    WITH_STATS_CODE,
    PlaneCache,
    batch_events,
    event_columns,
    message_events,
    stat_events,
    stats_str,
)
from keras_xla_guard.trace._proto import xplane_pb2
from keras_xla_guard.trace._reader import (
    TraceFile,
    check_metadata,
    decode,
    read_line_chunks,
    trace_errors,
)
from keras_xla_guard.trace._wire import EVENT_PADDING
from keras_xla_guard.trace.classify import (
    CATEGORIES,
    Category,
    async_kernel_op,
    classify_op_type,
    eager_op_type,
)
from keras_xla_guard.trace.steps import StepFacts, marker_of

__all__ = [
    "LineSummary",
    "Totals",
    "adopt_loose_launches",
    "scan_events",
    "scan_lazy_line",
    "scan_lazy_plane",
    "scan_line",
]

# Events the scan in columns gathers (from one line or several) before it
# scans them: numpy's cost per call is then spread thin.
BATCH_EVENTS = 1 << 13
# A line's unfinished last tree is carried to the next batch; one larger
# than this many batches is scanned one event at a time instead.
_CARRY_BATCHES = 8

_ABSORBING = frozenset(
    {Category.XLA, Category.XLA_WORKER, Category.COMPILE, Category.INPUT, Category.TRACING}
)
# Per category: the absorb value an event of that category hands its children.
_ABSORB_OF = tuple(cat if cat in _ABSORBING else 0 for cat in range(CATEGORIES))

# A kernel's pending record: [bucket_ps, has_xla, has_compile, pending, key,
# role, outer, start_ps] where `key` is (op_type, op_name), `pending` a list
# of (key, ps) of plain ops nested inside it (or None), `outer` the
# enclosing kernel's record and `start_ps` its start on its line.
_K_BUCKET, _K_XLA, _K_COMPILE, _K_PENDING, _K_KEY, _K_ROLE, _K_OUTER, _K_START = range(8)


class Totals:
    """Mutable accumulator for one analysis (picoseconds)."""

    def __init__(self) -> None:
        self.ps = [0] * CATEGORIES
        self.ops: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.executions = 0
        self.compilations = 0
        self.modules: list[str] = []
        # The line being scanned starts here; times below are absolute (ps):
        # launch starts, loose (start, end, duration), call (start, end).
        self.base_ps = 0
        self.launches: list[int] = []
        self.loose: list[tuple[int, int, int]] = []
        self.calls: list[tuple[int, int]] = []
        # Device memory copies and memsets (device planes only).
        self.transfer_ps = 0
        # Ops run eagerly (`Category.EAGER_OP` spans): calls by op type.
        self.eager_calls: defaultdict[str, int] = defaultdict(int)

    def add(self, other: Totals) -> None:
        """Adds another accumulator's sums into this one."""
        self.launches.extend(other.launches)
        self.loose.extend(other.loose)
        self.calls.extend(other.calls)
        self.ps = [a + b for a, b in zip(self.ps, other.ps)]
        for key, (t, n) in other.ops.items():
            rec = self.ops[key]
            rec[0] += t
            rec[1] += n
        self.transfer_ps += other.transfer_ps
        for op_type, n in other.eager_calls.items():
            self.eager_calls[op_type] += n
        self.executions += other.executions
        self.compilations += other.compilations
        self.modules.extend(other.modules)


class LineSummary(NamedTuple):
    """What the analysis needs to know of a scanned line afterwards.

    `facts` are what the line holds for the compile table and the steps,
    when the scan gathered them (the scan in columns does); else the
    analysis reads the line again for them. `steps` are its step facts
    where only those were gathered (a line the scan in columns held whole
    but scanned one event at a time).
    """

    compiled: bool
    ran_xla: bool
    facts: LineFacts | None = None
    steps: StepFacts | None = None

    @classmethod
    def of(cls, part: Totals) -> LineSummary:
        ps = part.ps
        return cls(ps[Category.COMPILE] > 0, ps[Category.XLA] + ps[Category.XLA_WORKER] > 0)


def _count_compile(plane: Any, event: Any, name_id: int, totals: Totals) -> None:
    totals.compilations += 1
    module = stats_str(plane, event, name_id)
    if module:
        totals.modules.append(module)


# A stack entry of `scan_events`: (end, owner, kernel ancestor-or-self, absorb, kernel).
_Entry = tuple[int, list[Any], list[Any] | None, int, list[Any] | None]


def _kernel_record(bucket: int, op: tuple[tuple[str, str], str], outer: Any, start: int) -> list[Any]:
    """A new kernel record (layout: the `_K_*` indices) for op `(key, role)`."""
    return [bucket, False, False, None, op[0], op[1], outer, start]


def _settle_kernel(rec: list[Any], totals: Totals) -> None:
    """Books a TF kernel once all its children are known.

    Plain-op time of kernels nested in another kernel is handed to the
    outer kernel as `pending`: if the outer kernel turns out to be
    compiling (the constant folding TF runs before an XLA compile), that
    time is compile time, not a user op.
    """
    bucket = rec[_K_BUCKET]
    role = rec[_K_ROLE]
    pending = rec[_K_PENDING]
    ps = totals.ps
    if rec[_K_COMPILE]:
        if rec[_K_XLA]:
            totals.executions += 1
            totals.launches.append(totals.base_ps + rec[_K_START])
        if pending:
            ps[Category.COMPILE] += sum(t for _, t in pending)
            pending = None
        ps[Category.COMPILE] += bucket
    elif role == "xla_compile":
        ps[Category.XLA] += bucket
    elif role == "xla_launch" or rec[_K_XLA]:
        ps[Category.XLA] += bucket
        totals.executions += 1
        totals.launches.append(totals.base_ps + rec[_K_START])
    elif role == "input":
        ps[Category.INPUT] += bucket
    elif pending is None:
        pending = [(rec[_K_KEY], bucket)]
    else:
        pending.append((rec[_K_KEY], bucket))
    if not pending:
        return
    outer = rec[_K_OUTER]
    if outer is not None:
        if outer[_K_PENDING] is None:
            outer[_K_PENDING] = pending
        else:
            outer[_K_PENDING].extend(pending)
        return
    ops = totals.ops
    for key, t in pending:
        ps[Category.OP] += t
        op = ops[key]
        op[0] += t
        op[1] += 1


def scan_line(plane: Any, line: Any, cache: PlaneCache, totals: Totals) -> LineSummary:
    """Walks one thread's events as a tree (by time nesting) and books them.

    TensorFlow writes a line's events ordered by start time; a line that is
    not (an edited or foreign trace) is scanned again in sorted order.

    Returns:
        Whether the line spent time compiling and whether it ran XLA work.
    """
    events = line.events
    if not events:
        return LineSummary(False, False)
    # Everything on a tf.data thread is input-pipeline work, including the
    # TF kernels of `Dataset.map` functions that run there.
    line_absorb = Category.INPUT if line.name.startswith("tf_data") else 0
    part = Totals()
    part.base_ps = line.timestamp_ns * 1000
    if not scan_events(plane, message_events(events, cache), line_absorb, cache, part):
        part = Totals()
        part.base_ps = line.timestamp_ns * 1000
        ordered = sorted(message_events(events, cache), key=lambda e: (e[1], -e[2]))
        scan_events(plane, ordered, line_absorb, cache, part)
    totals.add(part)
    return LineSummary.of(part)


def scan_lazy_line(
    np: Any, plane: Any, span: tuple[int, int], cache: PlaneCache, totals: Totals, source: str
) -> LineSummary:
    """`scan_line` for a line of an `open_xspace` plane, read in slices.

    Lines that are out of order, or whose framing is not what protobuf
    writers produce (events hidden in odd encodings, the name after the
    events), are read whole and scanned as parsed messages instead.
    """
    xline = xplane_pb2().XLine
    header: list[bytes] = []
    batches = (
        batch_events(np, data, heads, plane, cache, i == 0, source)
        for i, (data, heads) in enumerate(read_line_chunks(plane, span, header, source))
    )
    first = next(batches, None)
    head = decode(xline, b"".join(header), source)
    name = head.name
    part = Totals()
    part.base_ps = head.timestamp_ns * 1000
    in_order = first is None or scan_events(
        plane,
        itertools.chain(first, itertools.chain.from_iterable(batches)),
        Category.INPUT if name.startswith("tf_data") else 0,
        cache,
        part,
    )
    if in_order:
        full = decode(xline, b"".join(header), source)
        if (
            not full.events
            and full.name.startswith("tf_data") == name.startswith("tf_data")
            and full.timestamp_ns == head.timestamp_ns
        ):
            if first is not None:
                totals.add(part)
            return LineSummary.of(part)
    with trace_errors(source), TraceFile(plane.path, plane.size) as f:
        data = f.read(*span)
    return scan_line(plane, decode(xline, data, source), cache, totals)


class _Line:
    """One line of a plane as the scan in columns reads it."""

    __slots__ = (
        "absorb",
        "done",
        "facts",
        "failed",
        "header",
        "index",
        "name",
        "part",
        "span",
        "sums",
        "timestamp_ns",
    )

    def __init__(self, index: int, span: tuple[int, int]) -> None:
        self.index = index
        self.span = span
        self.name = ""
        self.timestamp_ns = 0
        self.absorb = 0
        # What the line booked so far while it spans several batches.
        self.part: Totals | None = None
        self.sums = OpSums()
        self.done = False
        self.failed = False
        self.header: list[bytes] = []
        self.facts: LineFacts | None = LineFacts()

    @property
    def base_ps(self) -> int:
        return self.timestamp_ns * 1000

    def fail(self) -> None:
        """Drops what the line booked: it is to be scanned one event at a time."""
        self.failed = True
        self.part = None
        self.sums = OpSums()
        self.facts = None


class _Rows(NamedTuple):
    """Decoded events of a batch, in file order: those with a duration and the compile markers."""

    line: Any
    mid: Any
    start: Any
    dur: Any
    hlo: Any
    root: Any
    code: Any
    events: dict[int, Any]


def scan_lazy_plane(np: Any, plane: Any, cache: PlaneCache, totals: Totals, source: str) -> list[LineSummary]:
    """Scans every line of an `open_xspace` host plane; returns their summaries, in order.

    Lines are read in slices and gathered into batches of about
    `BATCH_EVENTS` events, which `_columns.ColumnScan` books at once; a
    line longer than a batch is cut after its last finished tree, the rest
    carried to the next batch. Lines that do not nest or come unsorted,
    and those whose framing is odd, are scanned one event at a time: from
    the batch's rows when it holds the whole line and its events come
    sorted, else read again by `scan_lazy_line`. Figures are exactly those
    of `scan_line` on each line, in order.
    """
    return _PlaneScan(np, plane, cache, totals, source).run()


class _PlaneScan:
    """The state of `scan_lazy_plane`: read slices waiting for a batch, and a line's carried tree."""

    def __init__(self, np: Any, plane: Any, cache: PlaneCache, totals: Totals, source: str) -> None:
        self.np, self.plane, self.cache, self.totals, self.source = np, plane, cache, totals, source
        self.pieces: list[tuple[_Line, bytes, Any, bool]] = []
        self.waiting = 0
        self.carry: tuple[_Line, _Rows] | None = None
        self.summaries: list[LineSummary | None] = [None] * len(plane.line_spans)
        self.sums = OpSums()

    def run(self) -> list[LineSummary]:
        xline = xplane_pb2().XLine
        source = self.source
        for index, span in enumerate(self.plane.line_spans):
            line = _Line(index, span)
            read = False
            for data, heads in read_line_chunks(self.plane, span, line.header, source):
                if not read:
                    self.named(line, decode(xline, b"".join(line.header), source))
                self.pieces.append((line, data, heads, not read))
                read = True
                self.waiting += len(heads)
                if self.waiting >= BATCH_EVENTS:
                    self.flush()
                if line.failed:
                    break
            line.done = True
            full = decode(xline, b"".join(line.header), source)
            if not read:
                self.named(line, full)
            elif not line.failed and not (
                not full.events
                and full.name.startswith("tf_data") == line.name.startswith("tf_data")
                and full.timestamp_ns == line.timestamp_ns
            ):
                line.failed = True
                line.part = None
            pending = any(piece[0] is line for piece in self.pieces) or (
                self.carry is not None and self.carry[0] is line
            )
            if line.failed:
                self.flush()
                if self.summaries[index] is None:
                    self.fallback(line)
            elif not pending:
                # Every event of the line was booked already, or it has none.
                self.finish(line)
        self.flush()
        self.sums.drain(self.np, self.totals.ops, self.cache.infos)
        return [s for s in self.summaries if s is not None]

    @staticmethod
    def named(line: _Line, head: Any) -> None:
        """Takes a line's name and start from its fields before the events."""
        line.name, line.timestamp_ns = head.name, head.timestamp_ns
        line.absorb = Category.INPUT if line.name.startswith("tf_data") else 0

    def fallback(self, line: _Line) -> None:
        """Scans a whole line one event at a time (`scan_lazy_line`), in its turn."""
        self.summaries[line.index] = scan_lazy_line(
            self.np, self.plane, line.span, self.cache, self.totals, self.source
        )

    def finish(self, line: _Line) -> None:
        """Adds a whole line's figures (held in its part) and notes its summary."""
        part = line.part or Totals()
        if line.part is not None:
            line.sums.drain(self.np, part.ops, self.cache.infos)
            self.totals.add(part)
        self.summaries[line.index] = LineSummary.of(part)._replace(facts=line.facts)

    def rows(self) -> tuple[list[_Line], _Rows]:
        """Decodes the waiting slices (after the carried rows) into one batch's rows."""
        np = self.np
        pieces, self.pieces, self.waiting = self.pieces, [], 0
        lines: list[_Line] = []
        parts: list[_Rows] = []
        if self.carry is not None:
            lines.append(self.carry[0])
            parts.append(self.carry[1])
            self.carry = None
        if pieces:
            # One copy of the slices, padded for `decode_events`; heads as
            # arrays, each moved by where its slice begins.
            data = b"".join([*(piece[1] for piece in pieces), EVENT_PADDING])
            counts = [len(piece[2]) for piece in pieces]
            begins = np.cumsum([0] + [len(piece[1]) for piece in pieces[:-1]]).tolist()
            heads = np.concatenate([piece[2] + begin for piece, begin in zip(pieces, begins)])
            # The slices live on in `data`: let them go before the batch's arrays are made.
            slices = [(line, first) for line, _, _, first in pieces]
            del pieces
            for line, _ in slices:
                if not lines or lines[-1] is not line:
                    lines.append(line)
            mid, start, dur, hlo, root, found = event_columns(
                np, data, heads, self.plane, self.cache, False, self.source, padded=True
            )
            position = np.cumsum([0] + counts[:-1]).tolist()
            for (_, first), row in zip(slices, position):
                if first:
                    check_metadata(self.plane, found[0].get(row) or _Meta(int(mid[row])), self.source)
            number = {id(line): k for k, line in enumerate(lines)}
            line_of = np.repeat(np.array([number[id(line)] for line, _ in slices], dtype=np.int64), counts)
            codes = self.cache.codes(np, mid)
            timed = dur > 0
            kept = np.flatnonzero(timed | ((codes & MARKER_CODE) != 0))
            # Step markers may stand on any thread (see `steps`): every
            # timed event with the `_r` stat is parsed.
            wanted = kept[
                ((codes[kept] & WITH_STATS_CODE) != 0)
                | (timed[kept] & (((codes[kept] & TRAIN_CODE) != 0) | root[kept]))
            ]
            parsed = stat_events(data, wanted.tolist(), found, self.source)
            at = np.searchsorted(kept, wanted).tolist()
            parts.append(
                _Rows(
                    line_of[kept],
                    mid[kept],
                    start[kept],
                    dur[kept],
                    hlo[kept],
                    root[kept],
                    codes[kept],
                    dict(zip(at, parsed.values())),
                )
            )
        if len(parts) == 1:
            return lines, parts[0]
        head, tail = parts
        shift = len(head.mid)
        joined = [np.concatenate((a, b)) for a, b in zip(head[:7], tail[:7])]
        return lines, _Rows._make(
            [*joined, {**head.events, **{k + shift: e for k, e in tail.events.items()}}]
        )

    def flush(self) -> None:
        """Scans the waiting slices and books every finished tree of them."""
        if not self.pieces and self.carry is None:
            return
        np = self.np
        lines, rows = self.rows()
        last = lines[-1]
        stop = len(rows.mid)
        if not last.done and not last.failed:
            # Cut the open line after its last finished tree; carry the rest.
            own = np.flatnonzero(rows.line == len(lines) - 1)
            timed = own[rows.dur[own] > 0]
            cut = top_level_cut(np, rows.start[timed], rows.dur[timed])
            stop = int(timed[cut]) if len(timed) else len(rows.mid)
            if len(rows.mid) - stop > _CARRY_BATCHES * BATCH_EVENTS:
                last.fail()
        self.book(lines, rows, stop)
        if stop < len(rows.mid) and not last.failed:
            keep = slice(stop, None)
            self.carry = (
                last,
                _Rows(
                    np.zeros(len(rows.mid) - stop, dtype=np.int64),
                    rows.mid[keep],
                    rows.start[keep],
                    rows.dur[keep],
                    rows.hlo[keep],
                    rows.root[keep],
                    rows.code[keep],
                    {k - stop: e for k, e in rows.events.items() if k >= stop},
                ),
            )

    def book(self, lines: list[_Line], rows: _Rows, stop: int) -> None:
        """Books the batch's rows before `stop`, line by line in order."""
        np = self.np
        timed = np.flatnonzero(rows.dur[:stop] > 0)
        # Most often every row has a duration (compile markers are few):
        # then views, so the batch's columns are not held twice while it is scanned.
        take = slice(0, stop) if len(timed) == stop else timed
        parsed = np.array(sorted(rows.events), dtype=np.int64)
        inside = parsed[parsed < stop]
        at = np.searchsorted(timed, inside)
        hit = at < len(timed)
        hit[hit] = timed[at[hit]] == inside[hit]
        events = {int(j): rows.events[int(i)] for j, i in zip(at[hit], inside[hit])}
        scan = ColumnScan(
            np,
            self.plane,
            self.cache,
            rows.line[take],
            rows.mid[take],
            rows.start[take],
            rows.dur[take],
            rows.hlo[take],
            events,
            np.array([line.absorb for line in lines], dtype=np.int64),
        )
        bad = set(scan.bad_lines)
        # A line that any batch before held has a part (it spanned batches):
        # these lines are wholly in this one.
        whole = {k for k in bad if lines[k].done and not lines[k].failed and lines[k].part is None}
        for k in bad:
            lines[k].fail()
        code = rows.code[take]
        scan.facts(
            [line.facts for line in lines],
            [line.base_ps for line in lines],
            rows.root[take],
            (code & TRAIN_CODE) != 0,
            (code & MARKER_CODE) != 0,
            events,
        )
        markers = np.flatnonzero((rows.code[:stop] & MARKER_CODE) != 0)
        marker_lines = rows.line[markers]
        bases = [line.base_ps for line in lines]
        k = 0
        while k < len(lines):
            line = lines[k]
            if line.failed or k in bad:
                line.fail()
                if k in whole:
                    self.rescan(line, rows, np.flatnonzero(rows.line[:stop] == k))
                elif line.done:
                    self.fallback(line)
                k += 1
                continue
            # A run of lines booked at once: whole lines straight into the
            # totals; a line spanning batches into its own part.
            spans = line.part is not None or not line.done
            run = k + 1
            while (
                not spans
                and run < len(lines)
                and run not in bad
                and lines[run].done
                and lines[run].part is None
                and not lines[run].failed
            ):
                run += 1
            target, sums = self.totals, self.sums
            if spans:
                if line.part is None:
                    line.part = Totals()
                target, sums = line.part, line.sums
            scan.book(range(k, run), bases, target, sums)
            name_id = self.cache.name_id
            for row in markers[(marker_lines >= k) & (marker_lines < run)].tolist():
                _count_compile(self.plane, rows.events[row], name_id, target)
            for j in range(k, run):
                if lines[j].done:
                    if spans:
                        self.finish(lines[j])
                    else:
                        ps = scan.line_ps(j)
                        self.summaries[lines[j].index] = LineSummary(
                            ps[Category.COMPILE] > 0,
                            ps[Category.XLA] + ps[Category.XLA_WORKER] > 0,
                            lines[j].facts,
                        )
            k = run

    def rescan(self, line: _Line, rows: _Rows, own: Any) -> None:
        """Scans a line the batch holds whole, its rows `own`, one event at a time (`scan_events`).

        What `scan_lazy_line` would find, without reading the line again;
        its step facts too, as `steps.line_step_facts` finds them. Events
        out of order are left to `scan_lazy_line`, which sorts them.
        """
        np, cache = self.np, self.cache
        code = rows.code[own]
        xs = rows.hlo[own].tolist()
        for j in np.flatnonzero((code & WITH_STATS_CODE) != 0).tolist():
            xs[j] = rows.events[int(own[j])]
        start, dur = rows.start[own].tolist(), rows.dur[own].tolist()
        part = Totals()
        part.base_ps = base = line.base_ps
        if not scan_events(self.plane, zip(rows.mid[own].tolist(), start, dur, xs), line.absorb, cache, part):
            self.fallback(line)
            return
        self.totals.add(part)
        markers = []
        for j in np.flatnonzero(rows.root[own]).tolist():
            found = marker_of(rows.events[int(own[j])], cache.root_id, cache.step_id, base + start[j])
            if found is not None:
                markers.append(found)
        # Every row has a duration but the compile markers, none of them XLA.
        xla = np.flatnonzero((code & 15) == Category.XLA).tolist()
        spans = [(base + start[j], base + start[j] + dur[j]) for j in xla]
        self.summaries[line.index] = LineSummary.of(part)._replace(steps=StepFacts(markers, spans))


class _Meta(NamedTuple):
    """Stands in for an event whose metadata id `check_metadata` checks."""

    metadata_id: int


def scan_events(
    plane: Any,
    events: Iterable[tuple[int, int, int, Any]],
    line_absorb: int,
    cache: PlaneCache,
    totals: Totals,
) -> bool:
    """Books one line's events; returns `False` if they are out of order.

    Out of order means a positive-duration event starting before the one
    before it; events sorted by start time always pass.

    Every event's self time (its duration minus its children's) goes to its
    nearest categorized ancestor-or-self, its *owner*: events without a
    category of their own (`NONE`) hand their time up, so e.g. the compile
    passes inside a `StatefulPartitionedCall` count as compile time (and so
    does eager dispatch inside a TF kernel: a py_function's Python), and
    inside an absorbing event (an XLA launch, a compile, the input
    pipeline) every descendant counts as that category. Time is booked as
    events are entered, into a one-element list per category or into the
    record of a TF kernel; a kernel is resolved when it ends, because only
    its children tell whether it launched or compiled XLA code.

    Events come as `(metadata_id, offset_ps, duration_ps, x)` tuples (see
    `message_events` and `batch_events`). `_columns` books lines that
    nest the same way in numpy; this loop scans parsed traces and the lines
    that do not nest (one pass, at most one stack tuple per event).
    """
    name_id, type_id = cache.name_id, cache.type_id
    infos, markers = cache.infos, cache.markers
    NONE, XLA, KERNEL = Category.NONE, Category.XLA, Category.KERNEL
    ASYNC_KERNEL, INPUT, EAGER = Category.ASYNC_KERNEL, Category.INPUT, Category.EAGER
    EAGER_OP = Category.EAGER_OP
    holders = [[0] for _ in range(len(totals.ps))]
    eager_op = holders[EAGER_OP]
    other = holders[Category.OTHER]
    # Self time and count of leaf plain-op kernels outside other kernels,
    # by metadata id: the bulk of a trace without XLA, booked cheaply.
    leaves: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
    eager_calls: defaultdict[int, int] = defaultdict(int)
    # Stack entries are tuples (end, owner, kernel ancestor-or-self, absorb,
    # kernel): `owner` is the list whose [0] collects the entry's self time
    # (a category holder or a kernel record), `kernel` a kernel record or
    # None. The root entry's end lies beyond any int64 offset + duration;
    # its owner is a sink for the (meaningless) child time of top-level
    # events.
    root: _Entry = (1 << 70, [0], None, line_absorb, None)
    stack = [root]
    push, pop = stack.append, stack.pop
    top = root
    top_end = root[0]
    last_start = -(1 << 70)
    # The kernel entered last waits here, off the stack, until the next
    # event tells whether it has children; most kernels are leaves and never
    # need a stack entry or a record.
    leaf_end: int | None = None
    leaf_dur = leaf_mid = 0
    leaf_op: Any = None
    leaf_outer: Any = None
    for mid, start, dur, x in events:
        if dur <= 0:
            # Instant events (markers, counters) take no time and nest
            # nothing; their order does not matter either.
            if markers and mid in markers:
                _count_compile(plane, x, name_id, totals)
            continue
        if start < last_start:
            return False
        last_start = start
        try:
            cat, op, launch = infos[mid]
        except KeyError:
            cat, op, launch = cache.info(mid)
        if markers and mid in markers:
            _count_compile(plane, x, name_id, totals)
        end = start + dur
        if leaf_end is not None:
            if start >= leaf_end:
                if leaf_op[1] == "op" and leaf_outer is None:
                    leaf = leaves[leaf_mid]
                    leaf[0] += leaf_dur
                    leaf[1] += 1
                else:
                    _settle_kernel(_kernel_record(leaf_dur, leaf_op, leaf_outer, leaf_end - leaf_dur), totals)
            else:
                rec = _kernel_record(leaf_dur, leaf_op, leaf_outer, leaf_end - leaf_dur)
                top = (leaf_end, rec, rec, 0, rec)
                push(top)
                top_end = leaf_end
            leaf_end = None
        while start >= top_end:
            kernel = pop()[4]
            if kernel is not None:
                _settle_kernel(kernel, totals)
            top = stack[-1]
            top_end = top[0]
        parent_owner = top[1]
        absorb = top[3]
        if absorb:
            if top is root:
                owner = holders[absorb]
                owner[0] += dur
                top = (end, owner, None, absorb, None)
            else:
                if end > top_end:
                    parent_owner[0] += end - top_end
                top = (end, parent_owner, top[2], absorb, None)
            push(top)
            top_end = end
            continue
        if cat == KERNEL:
            parent_owner[0] -= (end if end < top_end else top_end) - start
            leaf_end, leaf_dur, leaf_mid, leaf_op, leaf_outer = end, dur, mid, op, top[2]
            continue
        if cat >= INPUT:
            # INPUT, TRACING, EAGER, EAGER_OP (the categories `classify_name`
            # gives from INPUT up): booked to their own category.
            if launch == CALL:
                totals.calls.append((totals.base_ps + start, totals.base_ps + end))
            if (cat != EAGER and cat != EAGER_OP) or top[2] is None:
                if cat == EAGER_OP:
                    eager_calls[mid] += 1
                elif cat == EAGER and parent_owner is eager_op:
                    # The dispatch and kernel run of an op run eagerly are that op's time.
                    cat = EAGER_OP
                parent_owner[0] -= (end if end < top_end else top_end) - start
                owner = holders[cat]
                owner[0] += dur
                top = (end, owner, top[2], _ABSORB_OF[cat], None)
                push(top)
                top_end = end
                continue
            # Eager dispatch inside a TF kernel is a py_function's Python
            # running its ops: the kernel's own time, as in xprof's op
            # tables, which take only nested TF ops out of an op's self time.
            cat = NONE
        if cat == ASYNC_KERNEL:
            op = async_kernel_op(stats_str(plane, x, type_id), stats_str(plane, x, name_id))
            if op is not None:
                rec = _kernel_record(dur, (op, classify_op_type(op[0])), top[2], start)
                parent_owner[0] -= (end if end < top_end else top_end) - start
                top = (end, rec, rec, 0, rec)
                push(top)
                top_end = end
                continue
            cat = NONE
        elif cat == NONE and x:
            cat = XLA
        kanc = top[2]
        if cat == NONE:
            if top is root:
                other[0] += dur
                top = (end, other, None, 0, None)
            else:
                if end > top_end:
                    parent_owner[0] += end - top_end
                top = (end, parent_owner, kanc, 0, None)
            push(top)
            top_end = end
            continue
        parent_owner[0] -= (end if end < top_end else top_end) - start
        if cat == XLA:
            if kanc is None:
                # An executable span outside any kernel is a launch of its
                # own; HLO/thunk work without one mostly runs on a pool
                # thread for a launch that another thread already times.
                if launch == LAUNCH:
                    totals.executions += 1
                    totals.launches.append(totals.base_ps + start)
                else:
                    cat = Category.XLA_WORKER
                    if launch == MAYBE_LAUNCH:
                        totals.loose.append((totals.base_ps + start, totals.base_ps + end, dur))
            if len(parent_owner) > 1:
                parent_owner[_K_XLA] = True
        elif cat == Category.COMPILE and len(parent_owner) > 1:
            parent_owner[_K_COMPILE] = True
        owner = holders[cat]
        owner[0] += dur
        top = (end, owner, kanc, _ABSORB_OF[cat], None)
        push(top)
        top_end = end
    if leaf_end is not None:
        _settle_kernel(_kernel_record(leaf_dur, leaf_op, leaf_outer, leaf_end - leaf_dur), totals)
    for entry in reversed(stack):
        if entry[4] is not None:
            _settle_kernel(entry[4], totals)
    ps = totals.ps
    for cat, holder in enumerate(holders):
        ps[cat] += holder[0]
    ops = totals.ops
    for mid, (t, n) in leaves.items():
        ps[Category.OP] += t
        rec = ops[infos[mid][1][0]]
        rec[0] += t
        rec[1] += n
    for mid, n in eager_calls.items():
        totals.eager_calls[eager_op_type(cache.metadata[mid].name)] += n
    return True


def adopt_loose_launches(totals: Totals) -> None:
    """Counts the launches whose kernel events TensorFlow dropped.

    TF 2.20, which writes no executable span, now and then drops the kernel
    events around a step's program run (`ExecutorState::Process` and its
    `ProcessAsync::Start`, seen on a loaded machine) and keeps the run: a
    `ThunkExecutor::Execute` outside any kernel, plus one more on each pool
    thread the program was split onto. Split spans also run outside any
    kernel for launches that were recorded, and may outlast their kernel,
    so a loose span alone says nothing. What does: the eager call of the
    `tf.function` around it. A call in which no launch was recorded but
    loose spans ran launched once; the spans' extent, first start to last
    end, is its XLA time (a recorded launch's is its kernel's span). Loose
    spans in no call, and in calls that launched, stay pool-thread work.
    """
    if not totals.loose or not totals.calls:
        return
    launch_starts = sorted(totals.launches)
    loose = sorted(totals.loose)
    loose_starts = [start for start, _, _ in loose]
    for call_start, call_end in sorted(totals.calls):
        i = bisect.bisect_left(launch_starts, call_start)
        if i < len(launch_starts) and launch_starts[i] <= call_end:
            continue
        first = bisect.bisect_left(loose_starts, call_start)
        stop = bisect.bisect_right(loose_starts, call_end)
        if first == stop:
            continue
        spans = loose[first:stop]
        totals.executions += 1
        totals.ps[Category.XLA] += max(end for _, end, _ in spans) - spans[0][0]
        totals.ps[Category.XLA_WORKER] -= sum(dur for _, _, dur in spans)
