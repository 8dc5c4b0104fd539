"""How the scan sees a line's events: metadata looked up once, events as tuples.

Events reach the scan (`_scan.scan_events`) as `(metadata_id, offset_ps,
duration_ps, x)` tuples: from parsed `XEvent` messages (`message_events`),
or decoded with numpy from a slice of a serialized line (`batch_events`),
where runs of consecutive leaf plain-op kernels come as one `RUN` tuple so
the scan can book them at once. `PlaneCache` is what one plane's metadata
says (category, op, launch kind of each event name). Pure: no Keras, no
TensorFlow.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from keras_xla_guard.trace._proto import xplane_pb2
from keras_xla_guard.trace._reader import check_metadata, decode, trace_errors
from keras_xla_guard.trace._wire import decode_events
from keras_xla_guard.trace.classify import (
    ASYNC_KERNEL_EVENT,
    COMPILE_COUNT_RE,
    Category,
    classify_name,
    classify_op_type,
    split_tf_op,
)

__all__ = [
    "CALL",
    "LAUNCH",
    "MAYBE_LAUNCH",
    "NOT_LAUNCH",
    "RUN",
    "RUN_CAT",
    "SUMS",
    "PlaneCache",
    "batch_events",
    "has_stat",
    "message_events",
    "stat_index",
    "stat_str",
    "stats_str",
]

# Stand-in metadata ids (beyond int64, so no event has them) of a run of
# leaf kernels and of the op sums of a slice's runs (see `_with_runs`).
RUN = 1 << 64
SUMS = 1 << 65
RUN_CAT = -1

# What an event's name says about launches (`PlaneCache.infos`' third
# field): an executable span is one launch; a `ThunkExecutor::Execute` outside
# any kernel may be one (XLA:CPU also opens one on each pool thread it splits
# a program's work onto); a call of a `tf.function` from eager Python is
# where launches happen (see `_scan.adopt_loose_launches`).
NOT_LAUNCH, LAUNCH, MAYBE_LAUNCH, CALL = 0, 1, 2, 3
_THUNK_EXECUTE = "ThunkExecutor::Execute"
_CALL_PREFIX = "EagerLocalExecute: __inference_"


def stat_index(plane: Any) -> dict[str, int]:
    return {m.name: mid for mid, m in plane.stat_metadata.items()}


def stat_str(plane: Any, stat: Any) -> str:
    """A string stat's value, whether stored inline or as a reference to stat metadata."""
    kind = stat.WhichOneof("value")
    if kind == "str_value":
        return stat.str_value
    if kind == "ref_value":
        ref = plane.stat_metadata.get(stat.ref_value)
        return ref.name if ref is not None else ""
    return ""


def stats_str(plane: Any, event: Any, stat_id: int) -> str:
    if stat_id < 0:
        return ""
    for stat in event.stats:
        if stat.metadata_id == stat_id:
            return stat_str(plane, stat)
    return ""


def has_stat(event: Any, stat_id: int) -> bool:
    for stat in event.stats:
        if stat.metadata_id == stat_id:
            return True
    return False


class PlaneCache:
    """What one plane's metadata says, looked up once per analysis.

    Attributes:
        infos: Metadata id -> (category, (op key, op role) or None, what
            the event says about launches: `NOT_LAUNCH`, `LAUNCH`,
            `MAYBE_LAUNCH` or `CALL`), filled as ids are met.
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
        stat_ids = stat_index(plane)
        self.name_id = stat_ids.get("name", -1)
        self.type_id = stat_ids.get("kernel_type", -1)
        self.hlo_id = stat_ids.get("hlo_module", -1)
        self.infos[RUN] = (RUN_CAT, None, NOT_LAUNCH)
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
        launch = (LAUNCH if "Executable::" in name
                  else MAYBE_LAUNCH if name == _THUNK_EXECUTE
                  else CALL if name.startswith(_CALL_PREFIX) else NOT_LAUNCH)
        info = self.infos[mid] = (cat, op, launch)
        return info


# An event as the scan reads it: (metadata_id, offset_ps, duration_ps, x)
# where x is the `XEvent` itself for the ids in `PlaneCache.with_stats`
# and otherwise whether it carries an `hlo_module` stat.


def message_events(events: Iterable[Any], cache: PlaneCache) -> Iterator[tuple[int, int, int, Any]]:
    """The scan's view of parsed `XEvent` messages."""
    with_stats, hlo_id = cache.with_stats, cache.hlo_id
    for e in events:
        mid = e.metadata_id
        x = e if mid in with_stats else hlo_id >= 0 and has_stat(e, hlo_id)
        yield mid, e.offset_ps, e.duration_ps, x


def batch_events(np: Any, data: bytes, heads: list[int], plane: Any, cache: PlaneCache,
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
        event = parsed[i] = decode(xevent, data[starts[i]:ends[i]], source)
        mid[i], off[i], dur[i] = event.metadata_id, event.offset_ps, event.duration_ps
        has[i] = cache.hlo_id >= 0 and has_stat(event, cache.hlo_id)
    if first:
        check_metadata(plane, parsed.get(0) or xevent(metadata_id=int(mid[0])), source)
    keep = dur > 0
    if cache.markers:
        keep |= np.isin(mid, list(cache.markers))
    kept = np.flatnonzero(keep)
    xs = has[kept].tolist()
    if cache.with_stats:
        wanted = np.isin(mid[kept], list(cache.with_stats))
        for j in np.flatnonzero(wanted).tolist():
            i = int(kept[j])
            xs[j] = parsed.get(i) or decode(xevent, data[starts[i]:ends[i]], source)
    mid, off, dur = mid[kept], off[kept], dur[kept]
    runs = _leaf_runs(np, mid, off, dur, cache)
    if runs is None:
        return zip(mid.tolist(), off.tolist(), dur.tolist(), xs)
    return _with_runs(np, runs, mid, off, dur, xs)


def _leaf_runs(np: Any, mid: Any, off: Any, dur: Any, cache: PlaneCache) -> Any:
    """Finds runs of consecutive leaf plain-op kernels among a slice's events.

    A leaf ends before the next event with a duration starts. Most events
    of a trace without XLA are such kernels; the scan books a run of them
    at once when they all sit directly in one parent event (see
    `_scan.scan_events`). Returns the runs' member flags and first members, or
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
    """The slice's scan tuples with each run of leaf kernels as one `RUN`.

    A run's `x` is `(summed duration, latest end, last start, first, stop,
    slice)`: its members are `slice`'s events `first` to `stop`. The stream
    opens with the runs' op sums (`SUMS`), booked as if every run is
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
    mids[at] = RUN
    out_xs = [xs[r] for r in rows.tolist()]
    piece = (mid, off, dur, xs)
    for i, run in zip(at, zip(run_dur.tolist(), run_end.tolist(), off[lasts].tolist(),
                              idx[heads].tolist(), (lasts + 1).tolist())):
        out_xs[i] = run + (piece,)
    return itertools.chain(((SUMS, 0, 0, sums),),
                           zip(mids.tolist(), off[rows].tolist(), dur[rows].tolist(), out_xs))
