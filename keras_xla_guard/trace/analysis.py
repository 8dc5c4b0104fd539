"""Pure trace analysis: XSpace in, `CoverageReport` out.

Nothing here imports Keras or TensorFlow's runtime; only the generated
`xplane_pb2` bindings are used (see `keras_xla_guard.trace.xplane`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any, Sequence

from keras_xla_guard._checks import check_int
from keras_xla_guard.trace._wire import decode_events
from keras_xla_guard.trace.classify import (
    ASYNC_KERNEL_EVENT,
    COMPILE_COUNT_RE,
    Category,
    classify_name,
    classify_op_type,
    is_dispatch_only,
    is_guard_op,
    split_tf_op,
)
from keras_xla_guard.trace.compiles import STEP_THREAD, compile_records
from keras_xla_guard.trace.report import CoverageReport, OpStat
from keras_xla_guard.trace.xplane import (
    DEFAULT_MAX_TRACE_BYTES,
    _check_metadata,
    _decode,
    _LazyPlane,
    _TraceFile,
    find_trace_files,
    host_of,
    iter_lines,
    open_xspace,
    read_line_chunks,
    trace_errors,
    xplane_pb2,
)

__all__ = ["DEFAULT_TOP_K", "analyze_trace", "analyze_xspace", "combine_reports"]

DEFAULT_TOP_K = 10
_PS = 1e-12
_ABSORBING = frozenset(
    {Category.XLA, Category.XLA_WORKER, Category.COMPILE, Category.INPUT, Category.TRACING}
)
_XLA_DEVICE_LINES = frozenset({"XLA Modules"})
# Per category: the absorb value an event of that category hands its children.
_ABSORB_OF = tuple(cat if cat in _ABSORBING else 0 for cat in range(Category.OTHER + 1))


# Stand-in metadata ids (beyond int64, so no event has them) of a run of
# leaf kernels and of the op sums of a slice's runs (see `_with_runs`).
_RUN = 1 << 64
_SUMS = 1 << 65
_RUN_CAT = -1


# A kernel's pending record: [bucket_ps, has_xla, has_compile, pending, key,
# role, outer, start_ps] where `key` is (op_type, op_name), `pending` a list
# of (key, ps) of plain ops nested inside it (or None), `outer` the
# enclosing kernel's record and `start_ps` its start on its line.
_K_BUCKET, _K_XLA, _K_COMPILE, _K_PENDING, _K_KEY, _K_ROLE, _K_OUTER, _K_START = range(8)

# What an event's name says about launches (`_PlaneCache.infos`' third
# field): an executable span is one launch; a `ThunkExecutor::Execute` outside
# any kernel may be one (XLA:CPU also opens one on each pool thread it splits
# a program's work onto); a call of a `tf.function` from eager Python is
# where launches happen (see `_adopt_loose_launches`).
_NOT_LAUNCH, _LAUNCH, _MAYBE_LAUNCH, _CALL = 0, 1, 2, 3
_THUNK_EXECUTE = "ThunkExecutor::Execute"
_CALL_PREFIX = "EagerLocalExecute: __inference_"


class _Totals:
    """Mutable accumulator for one analysis (picoseconds)."""

    def __init__(self) -> None:
        self.ps = [0] * 11
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

    def add(self, other: "_Totals") -> None:
        """Adds another accumulator's sums into this one."""
        self.launches.extend(other.launches)
        self.loose.extend(other.loose)
        self.calls.extend(other.calls)
        self.ps = [a + b for a, b in zip(self.ps, other.ps)]
        for key, (t, n) in other.ops.items():
            rec = self.ops[key]
            rec[0] += t
            rec[1] += n
        self.executions += other.executions
        self.compilations += other.compilations
        self.modules.extend(other.modules)


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
    for stat in event.stats:
        if stat.metadata_id == stat_id:
            return True
    return False


class _PlaneCache:
    """What one plane's metadata says, looked up once per analysis.

    Attributes:
        infos: Metadata id -> (category, (op key, op role) or None, what
            the event says about launches: `_NOT_LAUNCH`, `_LAUNCH`,
            `_MAYBE_LAUNCH` or `_CALL`), filled as ids are met.
        markers: Metadata ids of events that each count one compilation.
        with_stats: Metadata ids of events whose stats the scan reads
            (async kernel starts and compile markers).
        name_id, type_id, hlo_id: Stat metadata ids of `name`,
            `kernel_type` and `hlo_module`; -1 when the plane has none.
    """

    def __init__(self, plane: Any) -> None:
        self.metadata = plane.event_metadata
        self.infos: dict[int, tuple[int, Any, int]] = {}
        self.markers = frozenset(
            mid for mid, md in self.metadata.items() if COMPILE_COUNT_RE.match(md.name)
        )
        self.with_stats = self.markers | frozenset(
            mid for mid, md in self.metadata.items() if md.name == ASYNC_KERNEL_EVENT
        )
        stat_ids = _stat_index(plane)
        self.name_id = stat_ids.get("name", -1)
        self.type_id = stat_ids.get("kernel_type", -1)
        self.hlo_id = stat_ids.get("hlo_module", -1)
        self.infos[_RUN] = (_RUN_CAT, None, _NOT_LAUNCH)
        self._leaf_ops: Any = None

    def leaf_ops(self, np: Any, mids: Any) -> Any:
        """Which of `mids` (an int64 array) name plain-op TF kernels."""
        if self._leaf_ops is None:
            keys = list(self.metadata.keys())
            size = max(keys) + 1 if keys and 0 <= min(keys) and max(keys) < 1 << 20 else 0
            table = np.zeros(size, dtype=bool)
            for mid in keys:
                cat, op, _ = self.infos.get(mid) or self.info(mid)
                table[mid] = cat == Category.KERNEL and op[1] == "op"
            self._leaf_ops = table
        table = self._leaf_ops
        inside = (mids >= 0) & (mids < len(table))
        if inside.all():
            return table[mids]
        found = np.zeros(len(mids), dtype=bool)
        found[inside] = table[mids[inside]]
        return found

    def info(self, mid: int) -> tuple[int, Any, int]:
        md = self.metadata.get(mid)
        name = md.name if md is not None else ""
        cat = classify_name(name)
        op = None
        if cat == Category.KERNEL:
            op_name, op_type = split_tf_op(name)  # type: ignore[misc]
            op = ((op_type, op_name), classify_op_type(op_type))
        launch = (_LAUNCH if "Executable::" in name
                  else _MAYBE_LAUNCH if name == _THUNK_EXECUTE
                  else _CALL if name.startswith(_CALL_PREFIX) else _NOT_LAUNCH)
        info = self.infos[mid] = (cat, op, launch)
        return info


# An event as the scan reads it: (metadata_id, offset_ps, duration_ps, x)
# where x is the `XEvent` itself for the ids in `_PlaneCache.with_stats`
# and otherwise whether it carries an `hlo_module` stat.


def _message_events(events: Iterable[Any], cache: _PlaneCache) -> Iterator[tuple[int, int, int, Any]]:
    """The scan's view of parsed `XEvent` messages."""
    with_stats, hlo_id = cache.with_stats, cache.hlo_id
    for e in events:
        mid = e.metadata_id
        x = e if mid in with_stats else hlo_id >= 0 and _has_stat(e, hlo_id)
        yield mid, e.offset_ps, e.duration_ps, x


def _batch_events(np: Any, data: bytes, heads: list[int], plane: Any, cache: _PlaneCache,
                  first: bool, source: str) -> Iterator[tuple[int, int, int, Any]]:
    """The scan's view of the serialized events at `heads` in `data`.

    Events without time that are not compile markers are left out: the
    scan skips them anyway. Only the few events whose stats the scan reads,
    and any event `decode_events` leaves to protobuf, become `XEvent`s.
    """
    xevent = xplane_pb2().XEvent
    with trace_errors(source):
        cols = decode_events(np, data, np.array(heads, dtype=np.int64), cache.hlo_id)
    mid, off, dur, has = cols["metadata_id"], cols["offset_ps"], cols["duration_ps"], cols["has_stat"]
    starts, ends = cols["start"], cols["end"]
    parsed: dict[int, Any] = {}
    for i in np.flatnonzero(cols["other"]).tolist():
        event = parsed[i] = _decode(xevent, data[starts[i]:ends[i]], source)
        mid[i], off[i], dur[i] = event.metadata_id, event.offset_ps, event.duration_ps
        has[i] = cache.hlo_id >= 0 and _has_stat(event, cache.hlo_id)
    if first:
        _check_metadata(plane, parsed.get(0) or xevent(metadata_id=int(mid[0])), source)
    keep = dur > 0
    if cache.markers:
        keep |= np.isin(mid, list(cache.markers))
    kept = np.flatnonzero(keep)
    xs = has[kept].tolist()
    if cache.with_stats:
        wanted = np.isin(mid[kept], list(cache.with_stats))
        for j in np.flatnonzero(wanted).tolist():
            i = int(kept[j])
            xs[j] = parsed.get(i) or _decode(xevent, data[starts[i]:ends[i]], source)
    mid, off, dur = mid[kept], off[kept], dur[kept]
    runs = _leaf_runs(np, mid, off, dur, cache)
    if runs is None:
        return zip(mid.tolist(), off.tolist(), dur.tolist(), xs)
    return _with_runs(np, runs, mid, off, dur, xs)


def _leaf_runs(np: Any, mid: Any, off: Any, dur: Any, cache: _PlaneCache) -> Any:
    """Finds runs of consecutive leaf plain-op kernels among a slice's events.

    A leaf ends before the next event with a duration starts. Most events
    of a trace without XLA are such kernels; the scan books a run of them
    at once when they all sit directly in one parent event (see
    `_scan_events`). Returns the runs' member flags and first members, or
    `None` when there are none or the slice is unsorted or holds times so
    large that numpy's int64 could overflow (the scan then goes one by one).
    """
    timed = np.flatnonzero(dur > 0)
    if len(timed) < 3:
        return None
    start = off[timed]
    end = start + dur[timed]
    if start.min() < 0 or dur.max() >= 1 << 61 or start.max() >= 1 << 61 or (np.diff(start) < 0).any():
        return None
    leaf = np.zeros(len(timed), dtype=bool)
    leaf[:-1] = start[1:] >= end[:-1]
    member = np.zeros(len(mid), dtype=bool)
    member[timed] = leaf & cache.leaf_ops(np, mid[timed])
    first = member.copy()
    first[1:] &= ~member[:-1]
    if not first.any():
        return None
    return member, first


def _with_runs(np: Any, runs: Any, mid: Any, off: Any, dur: Any,
               xs: list[Any]) -> Iterable[tuple[int, int, int, Any]]:
    """The slice's scan tuples with each run of leaf kernels as one `_RUN`.

    A run's `x` is `(summed duration, latest end, last start, first, stop,
    slice)`: its members are `slice`'s events `first` to `stop`. The stream
    opens with the runs' op sums (`_SUMS`), booked as if every run is
    booked at once; a run that cannot be takes its members back out.
    """
    member, first = runs
    idx = np.flatnonzero(member)
    heads = np.flatnonzero(first[idx])
    lasts = idx[np.append(heads[1:], len(idx)) - 1]
    run_dur = np.add.reduceat(dur[idx], heads)
    run_end = np.maximum.reduceat(off[idx] + dur[idx], heads)
    order = np.argsort(mid[idx], kind="stable")
    sorted_mids = mid[idx][order]
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(sorted_mids)) + 1))
    sums = list(zip(sorted_mids[bounds].tolist(),
                    np.add.reduceat(dur[idx][order], bounds).tolist(),
                    np.diff(np.append(bounds, len(idx))).tolist()))
    rows = np.flatnonzero(~member | first)
    at = np.flatnonzero(first[rows]).tolist()
    mids = mid[rows].astype(object)
    mids[at] = _RUN
    out_xs = [xs[r] for r in rows.tolist()]
    piece = (mid, off, dur, xs)
    for i, run in zip(at, zip(run_dur.tolist(), run_end.tolist(), off[lasts].tolist(),
                              idx[heads].tolist(), (lasts + 1).tolist())):
        out_xs[i] = run + (piece,)
    return itertools.chain(((_SUMS, 0, 0, sums),),
                           zip(mids.tolist(), off[rows].tolist(), dur[rows].tolist(), out_xs))


def _count_compile(plane: Any, event: Any, name_id: int, totals: _Totals) -> None:
    totals.compilations += 1
    module = _stats_str(plane, event, name_id)
    if module:
        totals.modules.append(module)


def _kernel_record(bucket: int, op: tuple[tuple[str, str], str], outer: Any, start: int) -> list[Any]:
    """A new kernel record (layout: the `_K_*` indices) for op `(key, role)`."""
    return [bucket, False, False, None, op[0], op[1], outer, start]


def _settle_kernel(rec: list[Any], totals: _Totals) -> None:
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


def _scan_line(plane: Any, line: Any, cache: _PlaneCache, totals: _Totals) -> tuple[str, bool]:
    """Walks one thread's events as a tree (by time nesting) and books them.

    TensorFlow writes a line's events ordered by start time; a line that is
    not (an edited or foreign trace) is scanned again in sorted order.

    Returns:
        The line's name, and whether it spent time compiling.
    """
    events = line.events
    if not events:
        return line.name, False
    # Everything on a tf.data thread is input-pipeline work, including the
    # TF kernels of `Dataset.map` functions that run there.
    line_absorb = Category.INPUT if line.name.startswith("tf_data") else 0
    part = _Totals()
    part.base_ps = line.timestamp_ns * 1000
    if not _scan_events(plane, _message_events(events, cache), line_absorb, cache, part):
        part = _Totals()
        part.base_ps = line.timestamp_ns * 1000
        ordered = sorted(_message_events(events, cache), key=lambda e: (e[1], -e[2]))
        _scan_events(plane, ordered, line_absorb, cache, part)
    totals.add(part)
    return line.name, part.ps[Category.COMPILE] > 0


def _scan_lazy_line(np: Any, plane: Any, span: tuple[int, int], cache: _PlaneCache,
                    totals: _Totals, source: str) -> tuple[str, bool]:
    """`_scan_line` for a line of an `open_xspace` plane, read in slices.

    Lines that are out of order, or whose framing is not what protobuf
    writers produce (events hidden in odd encodings, the name after the
    events), are read whole and scanned as parsed messages instead.
    """
    xline = xplane_pb2().XLine
    header: list[bytes] = []
    batches = (
        _batch_events(np, data, heads, plane, cache, i == 0, source)
        for i, (data, heads) in enumerate(read_line_chunks(plane, span, header, source))
    )
    first = next(batches, None)
    head = _decode(xline, b"".join(header), source)
    name = head.name
    part = _Totals()
    part.base_ps = head.timestamp_ns * 1000
    in_order = first is None or _scan_events(
        plane, itertools.chain(first, itertools.chain.from_iterable(batches)),
        Category.INPUT if name.startswith("tf_data") else 0, cache, part)
    if in_order:
        full = _decode(xline, b"".join(header), source)
        if (not full.events and full.name.startswith("tf_data") == name.startswith("tf_data")
                and full.timestamp_ns == head.timestamp_ns):
            if first is not None:
                totals.add(part)
            return name, part.ps[Category.COMPILE] > 0
    with trace_errors(source), _TraceFile(plane.path, plane.size) as f:
        data = f.read(*span)
    return _scan_line(plane, _decode(xline, data, source), cache, totals)


def _scan_events(
    plane: Any,
    events: Iterable[tuple[int, int, int, Any]],
    line_absorb: int,
    cache: _PlaneCache,
    totals: _Totals,
) -> bool:
    """Books one line's events; returns `False` if they are out of order.

    Out of order means a positive-duration event starting before the one
    before it; events sorted by start time always pass.

    Every event's self time (its duration minus its children's) goes to its
    nearest categorized ancestor-or-self, its *owner*: events without a
    category of their own (`NONE`) hand their time up, so e.g. the compile
    passes inside a `StatefulPartitionedCall` count as compile time, and
    inside an absorbing event (an XLA launch, a compile, the input
    pipeline) every descendant counts as that category. Time is booked as
    events are entered, into a one-element list per category or into the
    record of a TF kernel; a kernel is resolved when it ends, because only
    its children tell whether it launched or compiled XLA code.

    Events come as `(metadata_id, offset_ps, duration_ps, x)` tuples (see
    `_message_events` and `_batch_events`); a run of leaf kernels comes as
    one `_RUN` tuple and is booked in one step when its members all sit
    directly in one non-kernel parent, else replayed member by member.

    This loop is the hot path of `analyze_trace` (one pass, at most one
    stack tuple per event); `benchmarks/bench_analyze.py` measures it
    against a bare parse-and-iterate of the same file.
    """
    name_id, type_id = cache.name_id, cache.type_id
    infos, markers = cache.infos, cache.markers
    NONE, XLA, KERNEL = Category.NONE, Category.XLA, Category.KERNEL
    ASYNC_KERNEL, INPUT = Category.ASYNC_KERNEL, Category.INPUT
    holders = [[0] for _ in range(len(totals.ps))]
    other = holders[Category.OTHER]
    # Self time and count of leaf plain-op kernels outside other kernels,
    # by metadata id: the bulk of a trace without XLA, booked cheaply.
    leaves: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
    # Stack entries are tuples (end, owner, kernel ancestor-or-self, absorb,
    # kernel): `owner` is the list whose [0] collects the entry's self time
    # (a category holder or a kernel record), `kernel` a kernel record or
    # None. The root entry's end lies beyond any int64 offset + duration;
    # its owner is a sink for the (meaningless) child time of top-level
    # events.
    root = (1 << 70, [0], None, line_absorb, None)
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
    stream = iter(events)
    source: Iterable[tuple[int, int, int, Any]] = stream
    while True:
        for mid, start, dur, x in source:
            if dur <= 0:
                # Instant events (markers, counters) take no time and nest
                # nothing; their order does not matter either.
                if markers and mid in markers:
                    _count_compile(plane, x, name_id, totals)
                elif mid == _SUMS:
                    for run_mid, t, n in x:
                        booked = leaves[run_mid]
                        booked[0] += t
                        booked[1] += n
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
                        _settle_kernel(_kernel_record(leaf_dur, leaf_op, leaf_outer, leaf_end - leaf_dur),
                                       totals)
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
            if cat == _RUN_CAT:
                if not absorb and top[2] is None and x[2] < top_end and x[1] <= top_end:
                    # Leaves directly in a parent that is not a kernel: what
                    # each would do, at once (their op sums came with `_SUMS`).
                    parent_owner[0] -= x[0]
                    last_start = x[2]
                    continue
                # Take the run's op sums back and scan its members one by one;
                # entering its first member again changes nothing.
                first, stop, (mids, offs, durs, xs) = x[3], x[4], x[5]
                members = list(zip(mids[first:stop].tolist(), offs[first:stop].tolist(),
                                   durs[first:stop].tolist(), xs[first:stop]))
                for run_mid, _, t, _ in members:
                    booked = leaves[run_mid]
                    booked[0] -= t
                    booked[1] -= 1
                source = members
                break
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
                # INPUT, TRACING, EAGER (the categories `classify_name` gives from
                # INPUT up): booked to their own category.
                if launch == _CALL:
                    totals.calls.append((totals.base_ps + start, totals.base_ps + end))
                parent_owner[0] -= (end if end < top_end else top_end) - start
                owner = holders[cat]
                owner[0] += dur
                top = (end, owner, top[2], _ABSORB_OF[cat], None)
                push(top)
                top_end = end
                continue
            if cat == ASYNC_KERNEL:
                op_type = _stats_str(plane, x, type_id)
                if op_type and not is_dispatch_only(op_type):
                    name = _stats_str(plane, x, name_id) or op_type
                    rec = _kernel_record(dur, ((op_type, name), classify_op_type(op_type)), top[2], start)
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
                    if launch == _LAUNCH:
                        totals.executions += 1
                        totals.launches.append(totals.base_ps + start)
                    else:
                        cat = Category.XLA_WORKER
                        if launch == _MAYBE_LAUNCH:
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
        else:
            if source is stream:
                break
            # A run's members are done: back to the stream.
            source = stream
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
        if not n:
            # Only runs taken back out leave an id with nothing booked.
            continue
        ps[Category.OP] += t
        rec = ops[infos[mid][1][0]]
        rec[0] += t
        rec[1] += n
    return True


def _scan_device_plane(plane: Any, stat_ids: dict[str, int], totals: _Totals, source: str) -> bool:
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
    for line in iter_lines(plane, source=source):
        if line.name in _XLA_DEVICE_LINES:
            for event in line.events:
                active = True
                # Instant or negative-length events carry no time (only
                # edited or damaged traces have the latter).
                if event.duration_ps > 0:
                    module_ps += event.duration_ps
                    module_runs += 1
            continue
        if not line.name.startswith("Stream"):
            continue
        for event in line.events:
            active = True
            dur = event.duration_ps
            if dur <= 0:
                continue
            if any(s.metadata_id in hlo_ids for s in event.stats):
                kernel_xla_ps += dur
                continue
            label = _stats_str(plane, event, tf_op_id)
            parsed = split_tf_op(label) if label else None
            if parsed is None:
                md = plane.event_metadata.get(event.metadata_id)
                kernel = md.name if md is not None else "?"
                key = ("(device kernel)", label or kernel)
            else:
                key = (parsed[1], parsed[0])
            totals.ps[Category.OP] += dur
            rec = totals.ops[key]
            rec[0] += dur
            rec[1] += 1
    totals.ps[Category.XLA] += module_ps if module_runs else kernel_xla_ps
    totals.executions += module_runs
    return active


def _adopt_loose_launches(totals: _Totals) -> None:
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
    guard_ps = 0
    user_ops = []
    for (t, n), rec in totals.ops.items():
        if is_guard_op(n):
            guard_ps += rec[0]
        else:
            user_ops.append(OpStat(op_type=t, op_name=n, self_time_s=rec[0] * _PS, count=rec[1]))
    op_ps = ps[Category.OP] - guard_ps
    ops = sorted(user_ops, key=lambda o: (-o.self_time_s, o.op_type, o.op_name))
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
        guard_op_time_s=guard_ps * _PS,
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
    host_totals = _Totals()
    device_totals = _Totals()
    device_active = False
    # Plane name -> indices of the lines that compiled, and of the Python
    # thread's (the guard's step markers), for the compile table.
    compiling: dict[str, set[int]] = {}
    step_lines: dict[str, set[int]] = {}
    for plane in space.planes:
        if plane.name.startswith("/device:"):
            stat_ids = _stat_index(plane)
            device_active = (
                _scan_device_plane(plane, stat_ids, device_totals, source) or device_active
            )
        elif _is_host_plane(plane.name):
            cache = _PlaneCache(plane)
            if isinstance(plane, _LazyPlane):
                import numpy as np

                scanned = (_scan_lazy_line(np, plane, span, cache, host_totals, source)
                           for span in plane.line_spans)
            else:
                scanned = (_scan_line(plane, line, cache, host_totals) for line in plane.lines)
            for index, (name, compiled) in enumerate(scanned):
                if compiled and cache.markers:
                    compiling.setdefault(plane.name, set()).add(index)
                elif name == STEP_THREAD:
                    step_lines.setdefault(plane.name, set()).add(index)
    _adopt_loose_launches(host_totals)
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
    report = _report_from_totals(
        totals,
        time_base=base,
        top_k=top_k,
        trace_paths=(trace_path,) if trace_path else (),
        hosts=(host,) if host else (),
        wall_s=_profile_wall_s(space),
    )
    if not compiling:
        return report
    # A second pass, over the threads that compiled and the step markers'
    # only: the table needs every compile interval, which the scan above
    # does not keep.
    wanted = {name: found | step_lines.get(name, set()) for name, found in compiling.items()}
    return dataclasses.replace(report, compile_table=compile_records(space, source=source, lines=wanted))


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
        compile_table=tuple(c for r in reports for c in r.compile_table),
        top_non_xla_ops=tuple(top[:top_k]),
        input_pipeline_time_s=sum(r.input_pipeline_time_s for r in reports),
        eager_overhead_s=sum(r.eager_overhead_s for r in reports),
        tracing_time_s=sum(r.tracing_time_s for r in reports),
        guard_op_time_s=sum(r.guard_op_time_s for r in reports),
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
        analyze_xspace(open_xspace(f, max_bytes=max_bytes), trace_path=str(f),
                       host=host_of(f), top_k=top_k)
        for f in files
    ]
    return combine_reports(reports, top_k=top_k)
