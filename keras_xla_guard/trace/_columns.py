"""The scan in columns: a batch of host lines' events booked with numpy, not one by one.

`_scan.scan_events` walks a line's events in Python, keeping a stack of the
events it is inside. This module gives exactly its figures for lines whose
events come sorted by start and nest (every event ends no later than the
event it starts in), which is how TensorFlow, XLA and JAX write them, with
array operations over all events at once:

- Nesting from times alone: the events around event `i` are the earlier
  events that end after it starts, so its depth is `i` minus the number of
  events that end by its start (`_tree`), and its parent the last event
  before it one level up. The same arithmetic tells whether the line nests
  at all: a line that does not is handed back, and `_scan` scans it one
  event at a time.
- What the stack would hold, level by level from the top (`_entries`): the
  category an event's time is booked to (its owner), whether it is
  absorbed into an XLA run, a compile or the input pipeline, and the
  innermost TF kernel around it.
- Bookings as sums (`ColumnScan.book`): each event adds its duration to
  its owner and takes it from its parent's owner; a kernel is settled from
  its children's flags, and plain ops nested in kernels go to the compile
  time of a compiling kernel around them, as `_scan._settle_kernel` does.

Several small lines go in one batch, their times moved apart so that they
cannot nest in each other. Sums are kept in int64 (picoseconds), so the
order of additions never changes a figure. Pure: no Keras, no TensorFlow.
"""

from __future__ import annotations

from typing import Any

from keras_xla_guard.trace._events import (
    CALL,
    LAUNCH,
    MAYBE_LAUNCH,
    ROLE_CODES,
    PlaneCache,
    stats_str,
    unique_ints,
)
from keras_xla_guard.trace.classify import (
    CATEGORIES,
    Category,
    async_kernel_op,
    classify_op_type,
    eager_op_type,
)
from keras_xla_guard.trace.compiles import CompileFacts, marker_module, step_event
from keras_xla_guard.trace.steps import StepFacts, marker_of

__all__ = ["ColumnScan", "LineFacts", "OpSums", "top_level_cut"]

# Kernel roles (`classify_op_type`, `ROLE_CODES`) as small ints.
_OP, _XLA_LAUNCH, _XLA_COMPILE, _INPUT_ROLE = 0, 1, 2, 3
_NCAT = CATEGORIES
# Times this large could overflow int64 once lines are moved apart.
_TIME_LIMIT = 1 << 61
# Metadata ids up to this are summed in arrays indexed by id.
_DENSE_IDS = 1 << 20


def top_level_cut(np: Any, start: Any, dur: Any) -> int:
    """Where the last top-level event of a line's events begins.

    Args:
        np: The numpy module.
        start: Start times of the events with a duration, in file order.
        dur: Their durations.

    Returns:
        The index of the last event that starts after every earlier event
        ended (the root of the last, maybe unfinished, tree of the line);
        0 when only the first event does.
    """
    if len(start) < 2:
        return 0
    reach = np.maximum.accumulate(start + dur)
    roots = np.flatnonzero(start[1:] >= reach[:-1])
    return int(roots[-1]) + 1 if len(roots) else 0


def _by_depth(np: Any, depth: Any) -> Any:
    """The stable order of events by depth.

    Depths are small: as int16, numpy's stable argsort is a radix sort,
    several times faster than on int64.
    """
    if len(depth) and -(1 << 15) <= depth.min() and depth.max() < 1 << 15:
        return np.argsort(depth.astype(np.int16), kind="stable")
    return np.argsort(depth, kind="stable")


def _tree(np: Any, start: Any, end: Any) -> tuple[Any, Any, Any]:
    """Depth and parent of each event, and where the events do not nest.

    `start` must be sorted for the result to mean anything; rows where it
    is not are flagged too. Returns `(depth, parent, bad)`: `parent` is -1
    at depth 0, and `bad` marks the events that start before the previous
    one or end after their parent (the first such event of a line always
    is marked; the other figures of such a line may hold anything, and
    more of its events may be marked).
    """
    n = len(start)
    index = np.arange(n)
    # Ends of nested events come nearly sorted: numpy's stable sort (a
    # merge of runs) takes a few ns an event there, its default several times that.
    depth = index - np.searchsorted(np.sort(end, kind="stable"), start, side="right")
    bad = np.zeros(n, dtype=bool)
    bad[1:] = start[1:] < start[:-1]
    order = _by_depth(np, depth)
    key = depth[order] * n + order
    pos = np.searchsorted(key, (depth - 1) * n + index) - 1
    parent = order[pos]
    inner = depth > 0
    bad |= inner & ((depth[parent] != depth - 1) | (end > end[parent]))
    bad |= depth < 0
    parent[~inner] = -1
    return depth, parent, bad


class ColumnScan:
    """One batch of host lines' events, scanned in columns.

    Args:
        np: The numpy module.
        plane: The plane the lines belong to.
        cache: The plane's `PlaneCache`.
        line: Per event, the index of its line in the batch (lines
            contiguous, in order).
        mid, start, dur: Per event, metadata id, offset in its line (ps)
            and duration; only events with a duration.
        hlo: Per event, whether it carries an `hlo_module` stat.
        events: Event index -> the parsed `XEvent`, for events of the ids
            in `cache.with_stats`.
        absorb: Per line of the batch, the category every event of the
            line belongs to (`Category.INPUT` on tf.data threads), or 0.

    Attributes:
        bad_lines: Indices of the batch's lines whose events do not come
            sorted or do not nest: their events are not booked here.
    """

    def __init__(
        self,
        np: Any,
        plane: Any,
        cache: PlaneCache,
        line: Any,
        mid: Any,
        start: Any,
        dur: Any,
        hlo: Any,
        events: dict[int, Any],
        absorb: Any,
    ) -> None:
        self.np = np
        self.plane = plane
        self.cache = cache
        self.line, self.mid, self.start, self.dur = line, mid, start, dur
        self.end = start + dur
        n_lines = self.n_lines = len(absorb)
        bad_line = np.zeros(n_lines, dtype=bool)
        self.shift = np.zeros(n_lines, dtype=np.int64)
        shifted = self.shifted = self._apart(line, n_lines, bad_line)
        depth, parent, bad = _tree(np, shifted, shifted + dur)
        bad_line[line[bad]] = True
        self.bad_lines = np.flatnonzero(bad_line).tolist()
        self.good = ~bad_line[line]
        self.parent = parent
        codes = cache.codes(np, mid)
        self.launch = (codes >> 4) & 3
        role = (codes >> 6) & 3
        cat = codes & 15
        self.cat = cat
        # Most batches hold no op run eagerly: their scan skips that category's steps.
        self.eager_ops = bool((cat == Category.EAGER_OP).any())
        base = np.where((cat == Category.NONE) & hlo, Category.XLA, cat)
        keys: dict[int, tuple[str, str]] = {}
        for i in np.flatnonzero(cat == Category.ASYNC_KERNEL).tolist():
            op = self._async_op(events[i])
            if op is None:
                base[i] = Category.NONE
            else:
                base[i] = Category.KERNEL
                keys[i] = op[0]
                role[i] = ROLE_CODES[op[1]]
        self.role = role
        self.async_keys = keys
        self._entries(depth, base, hlo, absorb)
        self._bookings()

    def _apart(self, line: Any, n_lines: int, bad_line: Any) -> Any:
        """Start times with each line moved past the previous one, so no two lines' events nest."""
        np = self.np
        start, dur = self.start, self.dur
        if not len(start):
            return start
        big = (start < 0) | (start >= _TIME_LIMIT) | (dur >= _TIME_LIMIT)
        if big.any():
            bad_line[line[big]] = True
        if n_lines == 1 or line[0] == line[-1]:
            return start
        present = np.flatnonzero(np.diff(line)) + 1
        first = np.concatenate(([0], present))
        lines = line[first]
        low = np.minimum.reduceat(start, first)
        high = np.maximum.reduceat(np.where(big, 0, self.end), first)
        span = np.maximum(high - low, 0) + 1
        offset = np.concatenate(([0], np.cumsum(span)[:-1]))
        if offset[-1] + span[-1] >= 1 << 62:
            bad_line[lines] = True
            return start
        self.shift[lines] = offset - low
        return start + self.shift[line]

    def _async_op(self, event: Any) -> tuple[tuple[str, str], str] | None:
        """An async kernel start's op key and role, or `None` when it is not a kernel (see `_scan`)."""
        cache = self.cache
        op = async_kernel_op(
            stats_str(self.plane, event, cache.type_id), stats_str(self.plane, event, cache.name_id)
        )
        return None if op is None else (op, classify_op_type(op[0]))

    def _entries(self, depth: Any, base: Any, hlo: Any, absorb: Any) -> None:
        """What the scan's stack entry of each event would hold, computed from the top level down.

        Sets, per event: `eff` (its category as booked: -1 when absorbed,
        `NONE` when its time stays with its parent's owner), `owner` (the
        kernel event index, or `-1 - category`, its time goes to), `kernel`
        (the innermost kernel event around it or itself, -1 for none),
        `outer_kernel` (the innermost kernel strictly around it) and
        `add_cat` (the category its whole duration is added to, or -1).
        """
        np = self.np
        n = len(depth)
        C = Category
        absorb_of = np.array(
            [c if c in (C.XLA, C.XLA_WORKER, C.COMPILE, C.INPUT, C.TRACING) else 0 for c in range(_NCAT)],
            dtype=np.int64,
        )
        e_abs = np.zeros(n, dtype=np.int64)
        kernel = np.full(n, -1, dtype=np.int64)
        owner = np.zeros(n, dtype=np.int64)
        eff = np.full(n, -1, dtype=np.int64)
        outer = np.full(n, -1, dtype=np.int64)
        add_cat = np.full(n, -1, dtype=np.int64)
        level_of = np.maximum(depth, 0)
        order = _by_depth(np, level_of)
        levels = np.split(order, np.flatnonzero(np.diff(level_of[order])) + 1) if n else []
        launch = self.launch
        for level, rows in enumerate(levels):
            c = base[rows]
            if level == 0:
                pa = absorb[self.line[rows]]
                pk = np.full(len(rows), -1, dtype=np.int64)
                po = -1 - np.where(pa != 0, pa, C.OTHER)
            else:
                p = self.parent[rows]
                pa, pk, po = e_abs[p], kernel[p], owner[p]
            absorbed = pa != 0
            if self.eager_ops:
                eager = (c == C.EAGER) | (c == C.EAGER_OP)
                c = np.where(~absorbed & eager & (pk >= 0), np.where(hlo[rows], C.XLA, C.NONE), c)
                # The dispatch and kernel run of an op run eagerly are that op's time.
                c = np.where(~absorbed & (c == C.EAGER) & (po == -1 - C.EAGER_OP), C.EAGER_OP, c)
            else:
                c = np.where(~absorbed & (c == C.EAGER) & (pk >= 0), np.where(hlo[rows], C.XLA, C.NONE), c)
            c = np.where(~absorbed & (c == C.XLA) & (pk < 0) & (launch[rows] != LAUNCH), C.XLA_WORKER, c)
            kern = ~absorbed & (c == C.KERNEL)
            trans = ~absorbed & (c == C.NONE)
            holder = ~absorbed & ~kern & ~trans
            e_abs[rows] = np.where(absorbed, pa, np.where(holder, absorb_of[c], 0))
            kernel[rows] = np.where(kern, rows, pk)
            owner[rows] = np.where(kern, rows, np.where(holder, -1 - c, po))
            eff[rows] = np.where(absorbed, -1, c)
            outer[rows] = pk
            if level == 0:
                add_cat[rows] = np.where(holder, c, np.where(absorbed, pa, np.where(trans, C.OTHER, -1)))
            else:
                add_cat[rows] = np.where(holder, c, -1)
        self.eff, self.owner, self.kernel, self.outer, self.add_cat = eff, owner, kernel, outer, add_cat

    def _bookings(self) -> None:
        """Per event and per line: what booking the batch's events adds to the figures."""
        np = self.np
        C = Category
        n = len(self.mid)
        good, line, dur, parent, eff = self.good, self.line, self.dur, self.parent, self.eff
        ps = np.zeros((self.n_lines, _NCAT), dtype=np.int64)
        adds = good & (self.add_cat >= 0)
        np.add.at(ps, (line[adds], self.add_cat[adds]), dur[adds])
        # Children take their time out of their parent's owner (the top
        # level's parent is the root, whose time means nothing).
        subs = np.flatnonzero(good & (parent >= 0) & (eff > C.NONE))
        target = self.owner[parent[subs]]
        to_holder = target < 0
        np.add.at(ps, (line[subs[to_holder]], -1 - target[to_holder]), -dur[subs[to_holder]])
        taken = np.zeros(n, dtype=np.int64)
        np.add.at(taken, target[~to_holder], dur[subs[~to_holder]])
        xla_flag = np.zeros(n, dtype=bool)
        compile_flag = np.zeros(n, dtype=bool)
        inside = subs[~to_holder]
        xla_flag[target[~to_holder][eff[inside] == C.XLA]] = True
        compile_flag[target[~to_holder][eff[inside] == C.COMPILE]] = True
        kernels = np.flatnonzero(good & (eff == C.KERNEL))
        bucket = dur[kernels] - taken[kernels]
        role = self.role[kernels]
        comp, xf = compile_flag[kernels], xla_flag[kernels]
        to_xla = ~comp & ((role == _XLA_COMPILE) | (role == _XLA_LAUNCH) | xf)
        to_input = ~comp & ~to_xla & (role == _INPUT_ROLE)
        to_op = ~comp & ~to_xla & ~to_input
        klines = line[kernels]
        np.add.at(ps, (klines[comp], C.COMPILE), bucket[comp])
        np.add.at(ps, (klines[to_xla], C.XLA), bucket[to_xla])
        np.add.at(ps, (klines[to_input], C.INPUT), bucket[to_input])
        # A plain op in a kernel that compiled (however deep) is compile time.
        ops = kernels[to_op]
        op_time = bucket[to_op]
        above = np.zeros(len(ops), dtype=bool)
        cur = self.outer[ops]
        while True:
            live = np.flatnonzero(cur >= 0)
            if not len(live):
                break
            above[live] |= compile_flag[cur[live]]
            cur[live] = self.outer[cur[live]]
        np.add.at(ps, (line[ops[above]], C.COMPILE), op_time[above])
        np.add.at(ps, (line[ops[~above]], C.OP), op_time[~above])
        self.ps = ps
        self.op_rows, self.op_time = ops[~above], op_time[~above]
        launched = np.zeros(n, dtype=bool)
        launched[kernels[(comp & xf) | (~comp & (role != _XLA_COMPILE) & ((role == _XLA_LAUNCH) | xf))]] = (
            True
        )
        launched |= good & (eff == C.XLA) & (self.outer < 0) & (self.launch == LAUNCH)
        self.launched = launched
        self.loose = good & (eff == C.XLA_WORKER) & (self.launch == MAYBE_LAUNCH)
        self.calls = good & (eff >= 0) & (self.cat >= C.INPUT) & (self.launch == CALL)

    def book(self, lines: range, base_ps: list[int], totals: Any, sums: OpSums) -> None:
        """Adds what the events of the batch's `lines` (consecutive, none bad) booked into `totals`.

        Args:
            lines: Indices of the batch's lines.
            base_ps: Per line of the batch, its start on the trace's clock (ps).
            totals: The `_scan.Totals` receiving the figures.
            sums: Where plain-op time by metadata id waits before it
                goes into `totals.ops` (`OpSums.drain`).
        """
        np = self.np
        line = self.line
        lo, hi = np.searchsorted(line, [lines.start, lines.stop])
        ps = self.ps[lines.start : lines.stop].sum(axis=0).tolist()
        totals.ps = [a + b for a, b in zip(totals.ps, ps)]
        span = slice(lo, hi)
        launched = np.flatnonzero(self.launched[span]) + lo
        totals.executions += len(launched)
        totals.launches.extend(self._clock(launched, base_ps))
        loose = np.flatnonzero(self.loose[span]) + lo
        durs = self.dur[loose].tolist()
        at = self._clock(loose, base_ps)
        totals.loose.extend(zip(at, [a + d for a, d in zip(at, durs)], durs))
        calls = np.flatnonzero(self.calls[span]) + lo
        at = self._clock(calls, base_ps)
        totals.calls.extend(zip(at, [a + d for a, d in zip(at, self.dur[calls].tolist())]))
        eager = (
            self.mid[span][
                self.good[span]
                & (self.eff[span] == Category.EAGER_OP)
                & (self.cat[span] == Category.EAGER_OP)
            ]
            if self.eager_ops
            else ()
        )
        if len(eager):
            metadata = self.cache.metadata
            ids = unique_ints(np, eager)
            counts = np.bincount(np.searchsorted(ids, eager), minlength=len(ids))
            for mid, n in zip(ids.tolist(), counts.tolist()):
                totals.eager_calls[eager_op_type(metadata[mid].name)] += n
        first, last = np.searchsorted(self.op_rows, [lo, hi])
        rows, time = self.op_rows[first:last], self.op_time[first:last]
        if not len(rows):
            return
        keyed = self.async_keys
        plain = np.ones(len(rows), dtype=bool)
        ops = totals.ops
        if keyed:
            for j, row in enumerate(rows.tolist()):
                key = keyed.get(row)
                if key is not None:
                    plain[j] = False
                    rec = ops[key]
                    rec[0] += int(time[j])
                    rec[1] += 1
        sums.add(np, self.mid[rows[plain]], time[plain], ops, self.cache.infos)

    def _clock(self, rows: Any, base_ps: list[int]) -> list[int]:
        """The starts of events `rows` on the trace's clock (Python ints: absolute times overflow int64)."""
        return [base_ps[k] + t for k, t in zip(self.line[rows].tolist(), self.start[rows].tolist())]

    def line_ps(self, index: int) -> list[int]:
        """The figures (ps per category) the batch's line `index` booked."""
        return self.ps[index].tolist()

    def facts(
        self,
        facts: list[LineFacts | None],
        base_ps: list[int],
        root: Any,
        train: Any,
        marker: Any,
        events: dict[int, Any],
    ) -> None:
        """Adds what each good line of the batch holds for the compile table and the steps to its facts.

        Args:
            facts: Per line of the batch, its facts, or `None` to skip it.
            base_ps: Per line, its start on the trace's clock (ps).
            root: Per event, whether it carries the `_r` stat.
            train: Per event, whether it is a `train` step event.
            marker: Per event, whether it is a compile marker.
            events: Event index -> the parsed `XEvent`, for the events of
                `root`, `train` and `marker`.
        """
        np = self.np
        C = Category
        good = self.good & np.array([f is not None for f in facts], dtype=bool)[self.line]
        # The lines `good` keeps, by index: the others have no facts.
        known = {k: f for k, f in enumerate(facts) if f is not None}
        for k, first, stop in self._unions(good & (self.cat == C.COMPILE)):
            base = base_ps[k]
            known[k].compiles.spans.append((base + first, base + stop))
        for k, first, stop in self._unions(good & (self.cat == C.XLA)):
            base = base_ps[k]
            known[k].steps.spans.append((base + first, base + stop))
        cache, plane, line, start = self.cache, self.plane, self.line, self.start
        for i in np.flatnonzero(good & root).tolist():
            found = marker_of(events[i], cache.root_id, cache.step_id, base_ps[line[i]] + int(start[i]))
            if found is not None:
                known[line[i]].steps.markers.append(found)
        for i in np.flatnonzero(good & train).tolist():
            found = step_event(plane, events[i], cache.step_id, base_ps[line[i]] + int(start[i]))
            if found is not None:
                known[line[i]].compiles.steps.append(found)
        compiling = self.cat == C.COMPILE
        for k in unique_ints(np, line[good & marker]).tolist():
            self._compiles(k, known[k], base_ps[k], compiling, marker, events)
        for k in unique_ints(np, line[good & compiling]).tolist():
            held = known[k]
            if held.early is None:
                rows = np.flatnonzero((line == k) & compiling)
                if held.previous_end is not None:
                    rows = rows[start[rows] >= held.previous_end]
                if len(rows):
                    held.early = int(start[rows[0]])

    def _unions(self, mask: Any) -> list[tuple[int, int, int]]:
        """`(line, start, end)` of the union of the events in `mask`, per line, in line time."""
        np = self.np
        rows = np.flatnonzero(mask)
        if not len(rows):
            return []
        first, stop = self.shifted[rows], self.shifted[rows] + self.dur[rows]
        reach = np.maximum.accumulate(stop)
        heads = np.flatnonzero(np.concatenate(([True], first[1:] >= reach[:-1])))
        lines = self.line[rows[heads]]
        back = self.shift[lines]
        return list(
            zip(
                lines.tolist(),
                (first[heads] - back).tolist(),
                (np.maximum.reduceat(stop, heads) - back).tolist(),
            )
        )

    def _compiles(
        self, k: int, held: LineFacts, base: int, compiling: Any, marker: Any, events: dict[int, Any]
    ) -> None:
        """Each compilation of line `k` in the batch, as `compiles._line_compiles` finds it.

        It begins with the first compile-phase event since the later of the
        previous compilation's end and the start of the innermost
        non-compile event around its `RunBackend` marker, and ends with the
        marker. Events nest here, so the events around the marker are its
        ancestors; a compile event before the marker's tree is in an
        earlier batch (`held.early`).
        """
        np = self.np
        rows = np.flatnonzero(self.line == k)
        begins = rows[compiling[rows]]
        starts = self.start[begins]
        for m in rows[marker[rows] & self.good[rows]].tolist():
            floor = held.previous_end
            container = int(self.parent[m])
            while container >= 0 and compiling[container]:
                container = int(self.parent[container])
            if container >= 0:
                at = int(self.start[container])
                floor = at if floor is None else max(floor, at)
            if container < 0 and held.early is not None:
                begin = held.early
            else:
                j = int(np.searchsorted(starts, floor)) if floor is not None else 0
                begin = int(starts[j]) if j < len(begins) and begins[j] < m else int(self.start[m])
            end = int(self.end[m])
            held.compiles.found.append(
                (base + begin, base + end, marker_module(self.plane, events[m], self.cache.name_id))
            )
            held.previous_end = end
            held.early = None


class OpSums:
    """Plain-op time and counts by metadata id, kept in numpy until `drain` puts them in an op table."""

    def __init__(self) -> None:
        self.time: Any = None
        self.count: Any = None

    def add(self, np: Any, mids: Any, times: Any, ops: Any, infos: dict[int, Any]) -> None:
        """Adds each op event's time to its id; ids too large for a table go straight into `ops`."""
        if not len(mids):
            return
        if int(mids.min()) < 0 or int(mids.max()) >= _DENSE_IDS:
            for mid, t in zip(mids.tolist(), times.tolist()):
                rec = ops[infos[mid][1][0]]
                rec[0] += t
                rec[1] += 1
            return
        size = int(mids.max()) + 1
        if self.time is None or size > len(self.time):
            time, count = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
            if self.time is not None:
                time[: len(self.time)] = self.time
                count[: len(self.count)] = self.count
            self.time, self.count = time, count
        np.add.at(self.time, mids, times)
        np.add.at(self.count, mids, 1)

    def drain(self, np: Any, ops: Any, infos: dict[int, Any]) -> None:
        """Moves the sums into `ops` (`(op type, op name)` -> [time, count]) and empties them."""
        if self.count is None:
            return
        booked = np.flatnonzero(self.count)
        for mid, t, n in zip(booked.tolist(), self.time[booked].tolist(), self.count[booked].tolist()):
            rec = ops[infos[mid][1][0]]
            rec[0] += t
            rec[1] += n
        self.time = self.count = None


class LineFacts:
    """What one line holds for the compile table and the per-step figures, gathered batch by batch.

    Attributes:
        steps: The line's `steps.StepFacts` so far.
        compiles: Its `compiles.CompileFacts` so far.
        previous_end: Where its last compilation ended (line time, ps), or `None`.
        early: The start of the first compile-phase event since then, or `None`.
    """

    __slots__ = ("compiles", "early", "previous_end", "steps")

    def __init__(self) -> None:
        self.steps = StepFacts([], [])
        self.compiles = CompileFacts([], [], [])
        self.previous_end: int | None = None
        self.early: int | None = None
