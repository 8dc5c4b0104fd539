"""How the scan sees a line's events: metadata looked up once, events as tuples.

Events reach the scan in columns (`_columns`) as numpy arrays decoded from
a slice of a serialized line (`event_columns`), and the scan one event at a
time (`_scan.scan_events`) as `(metadata_id, offset_ps, duration_ps, x)`
tuples: from parsed `XEvent` messages (`message_events`), or from the same
columns (`batch_events`). `PlaneCache` is what one plane's metadata says
(category, op, launch kind of each event name; `codes` packs them for
numpy). Pure: no Keras, no TensorFlow.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from keras_xla_guard.trace._proto import xplane_pb2
from keras_xla_guard.trace._reader import check_metadata, decode, trace_errors
from keras_xla_guard.trace._wire import decode_events
from keras_xla_guard.trace.classify import (
    ASYNC_KERNEL_EVENT,
    COMPILE_COUNT_RE,
    classify_name_and_op,
    classify_op_type,
)
from keras_xla_guard.trace.compiles import STEP_EVENT

__all__ = [
    "CALL",
    "LAUNCH",
    "MARKER_CODE",
    "MAYBE_LAUNCH",
    "NOT_LAUNCH",
    "ROLE_CODES",
    "TRAIN_CODE",
    "WITH_STATS_CODE",
    "PlaneCache",
    "batch_events",
    "event_columns",
    "find_stat_ids",
    "has_stat",
    "message_events",
    "stat_events",
    "stat_str",
    "stats_str",
    "unique_ints",
]

# What an event's name says about launches (`PlaneCache.infos`' third
# field): an executable span is one launch; a `ThunkExecutor::Execute` outside
# any kernel may be one (XLA:CPU also opens one on each pool thread it splits
# a program's work onto); a call of a `tf.function` from eager Python is
# where launches happen (see `_scan.adopt_loose_launches`).
NOT_LAUNCH, LAUNCH, MAYBE_LAUNCH, CALL = 0, 1, 2, 3
# `PlaneCache.codes` packs, per metadata id: the category (bits 0-3), the
# launch kind (4-5), the kernel role (6-7, `ROLE_CODES`), and these flags.
MARKER_CODE = 1 << 8
WITH_STATS_CODE = 1 << 9
TRAIN_CODE = 1 << 10
ROLE_CODES = {"op": 0, "xla_launch": 1, "xla_compile": 2, "input": 3}
# Metadata ids up to this are looked up in a table indexed by id.
_DENSE_IDS = 1 << 20
# The stats `PlaneCache` reads the ids of.
_SCAN_STATS = frozenset({"name", "kernel_type", "hlo_module", "_r", "step_num"})
_THUNK_EXECUTE = "ThunkExecutor::Execute"
_CALL_PREFIX = "EagerLocalExecute: __inference_"


def unique_ints(np: Any, values: Any) -> Any:
    """The distinct values of an int array, sorted.

    `np.unique` would do, but numpy 2 imports `numpy.ma` on its first call
    (to rule out masked arrays): about 8 ms and a megabyte of memory, what
    the whole analysis of a small trace costs.
    """
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def find_stat_ids(plane: Any, names: Collection[str]) -> dict[str, int]:
    """The stat metadata ids of those of `names` that `plane` defines.

    Ids are read in increasing order until every name is found: TF numbers
    a plane's stats as it meets them, so the standard ones come before the
    thousands of strings that `ref_value` stats point to (a jit-compiled
    transformer's plane defines 9,305 stats; the 5 the scan reads are among
    its first 1,568). A name defined twice gets its lowest id.
    """
    metadata = plane.stat_metadata
    missing = set(names)
    found: dict[str, int] = {}
    for mid in sorted(metadata):
        name = metadata[mid].name
        if name in missing:
            found[name] = mid
            missing.discard(name)
            if not missing:
                break
    return found


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
        train: Metadata ids of `train` events (step markers, and the
            events that date compiles).
        name_id, type_id, hlo_id, root_id, step_id: Stat metadata ids
            of `name`, `kernel_type`, `hlo_module`, `_r` and `step_num`;
            -1 when the plane has none.
    """

    def __init__(self, plane: Any) -> None:
        self.metadata = plane.event_metadata
        self.infos: dict[int, tuple[int, Any, int]] = {}
        # One pass over the protobuf map, keeping nothing of the names: a
        # plane of a model without XLA names thousands of ops.
        markers, starts, train = [], [], []
        metadata = self.metadata
        for mid in metadata:
            name = metadata[mid].name
            if name == ASYNC_KERNEL_EVENT:
                starts.append(mid)
            elif name == STEP_EVENT:
                train.append(mid)
            elif COMPILE_COUNT_RE.match(name):
                markers.append(mid)
        self.markers = frozenset(markers)
        self.with_stats = self.markers | frozenset(starts)
        self.train = frozenset(train)
        stat_ids = find_stat_ids(plane, _SCAN_STATS)
        self.name_id = stat_ids.get("name", -1)
        self.type_id = stat_ids.get("kernel_type", -1)
        self.hlo_id = stat_ids.get("hlo_module", -1)
        self.root_id = stat_ids.get("_r", -1)
        self.step_id = stat_ids.get("step_num", -1)
        self._table: Any = None

    def code(self, mid: int) -> int:
        """What `codes` packs for one metadata id."""
        cat, op, launch = self.infos.get(mid) or self.info(mid)
        return (
            cat
            | launch << 4
            | (ROLE_CODES[op[1]] << 6 if op else 0)
            | (MARKER_CODE if mid in self.markers else 0)
            | (WITH_STATS_CODE if mid in self.with_stats else 0)
            | (TRAIN_CODE if mid in self.train else 0)
        )

    def codes(self, np: Any, mids: Any) -> Any:
        """`code` of each of `mids` (an int64 array), as an int16 array."""
        if not len(mids):
            return np.zeros(0, dtype=np.int16)
        low, high = int(mids.min()), int(mids.max())
        if low < 0 or high >= _DENSE_IDS:
            unique = unique_ints(np, mids)
            codes = np.array([self.code(m) for m in unique.tolist()], dtype=np.int16)
            return codes[np.searchsorted(unique, mids)]
        table = self._table
        if table is None or high >= len(table):
            grown = np.full(max(high + 1, 2 * len(table) if table is not None else 0), -1, dtype=np.int16)
            if table is not None:
                grown[: len(table)] = table
            table = self._table = grown
        found = table[mids]
        unknown = found < 0
        if unknown.any():
            for mid in unique_ints(np, mids[unknown]).tolist():
                table[mid] = self.code(mid)
            found = table[mids]
        return found

    def info(self, mid: int) -> tuple[int, Any, int]:
        md = self.metadata.get(mid)
        name = md.name if md is not None else ""
        cat, split = classify_name_and_op(name)
        op = None
        if split is not None:
            op_name, op_type = split
            # Thousands of ops share a few types: one string each.
            op_type = sys.intern(op_type)
            op = ((op_type, op_name), classify_op_type(op_type))
        launch = (
            LAUNCH
            if "Executable::" in name
            else MAYBE_LAUNCH
            if name == _THUNK_EXECUTE
            else CALL
            if name.startswith(_CALL_PREFIX)
            else NOT_LAUNCH
        )
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


def event_columns(
    np: Any,
    data: bytes,
    heads: Any,
    plane: Any,
    cache: PlaneCache,
    first: bool,
    source: str,
    *,
    padded: bool = False,
) -> tuple[Any, Any, Any, Any, Any, Any]:
    """The serialized events at `heads` (a list or an int64 array) in `data` as columns.

    `padded` says `data` ends with `_wire.EVENT_PADDING` (see `decode_events`).

    Returns:
        `(metadata_id, offset_ps, duration_ps, has_hlo, has_root, found)`:
        int64 arrays, bool arrays (the event carries an `hlo_module`, an
        `_r` stat), and what `stat_events` needs to parse events (those
        `decode_events` left to protobuf are parsed already). When
        `first`, the first event must name defined metadata.

    Raises:
        TraceParseError: If an event does not decode, or the first event's
            metadata is undefined.
    """
    xevent = xplane_pb2().XEvent
    with trace_errors(source):
        cols = decode_events(
            np, data, np.asarray(heads, dtype=np.int64), (cache.hlo_id, cache.root_id), padded=padded
        )
    mid, off, dur = cols["metadata_id"], cols["offset_ps"], cols["duration_ps"]
    has, root = cols["has_stats"]
    starts, ends = cols["start"], cols["end"]
    parsed: dict[int, Any] = {}
    for i in np.flatnonzero(cols["other"]).tolist():
        event = parsed[i] = decode(xevent, data[starts[i] : ends[i]], source)
        mid[i], off[i], dur[i] = event.metadata_id, event.offset_ps, event.duration_ps
        has[i] = cache.hlo_id >= 0 and has_stat(event, cache.hlo_id)
        root[i] = cache.root_id >= 0 and has_stat(event, cache.root_id)
    if first:
        check_metadata(plane, parsed.get(0) or xevent(metadata_id=int(mid[0])), source)
    return mid, off, dur, has, root, (parsed, starts, ends)


def stat_events(
    data: bytes,
    rows: list[int],
    found: tuple[dict[int, Any], Any, Any],
    source: str,
) -> dict[int, Any]:
    """The `XEvent`s at `rows` (indices into an `event_columns` batch of `data`), each parsed once."""
    parsed, starts, ends = found
    xevent = xplane_pb2().XEvent
    return {i: parsed.get(i) or decode(xevent, data[starts[i] : ends[i]], source) for i in rows}


def batch_events(
    np: Any, data: bytes, heads: Any, plane: Any, cache: PlaneCache, first: bool, source: str
) -> Iterator[tuple[int, int, int, Any]]:
    """The scan's view of the serialized events at `heads` in `data`.

    Events without time that are not compile markers are left out: the
    scan skips them anyway. Only the few events whose stats the scan reads,
    and any event `decode_events` leaves to protobuf, become `XEvent`s.
    """
    mid, off, dur, has, _, found = event_columns(np, data, heads, plane, cache, first, source)
    codes = cache.codes(np, mid)
    kept = np.flatnonzero((dur > 0) | ((codes & MARKER_CODE) != 0))
    xs = has[kept].tolist()
    wanted = np.flatnonzero((codes[kept] & WITH_STATS_CODE) != 0).tolist()
    rows = kept[wanted].tolist()
    events = stat_events(data, rows, found, source)
    for j, i in zip(wanted, rows):
        xs[j] = events[i]
    return zip(mid[kept].tolist(), off[kept].tolist(), dur[kept].tolist(), xs)
