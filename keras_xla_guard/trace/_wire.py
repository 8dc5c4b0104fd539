"""Protobuf wire-format framing for reading XSpace traces piece by piece.

Two small readers, both on the protobuf encoding itself
(https://protobuf.dev/programming-guides/encoding/):

* `iter_fields` walks the fields of one message (tag varint, then a varint,
  a fixed 8 or 4 bytes, or a length varint and that many bytes), so that a
  trace can be cut into its planes and lines without parsing it whole;
  every piece is then parsed by protobuf's own generated classes.
* `decode_events` reads, for a batch of serialized `XEvent`s at once, the
  three scalars the analysis needs (`metadata_id`, `offset_ps`,
  `duration_ps`) and the metadata ids of their stats, with numpy. It only
  accepts the layout protobuf serializers write (fields in number order,
  each once, stats last); every event in any other layout is flagged for
  `XEvent.FromString`, so the values given are always what protobuf itself
  would give.

Errors are `WireError`; the trace reader turns them into `TraceParseError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

__all__ = [
    "EVENT_PADDING",
    "EVENT_TAG",
    "WireError",
    "decode_events",
    "frame_run",
    "iter_fields",
    "read_varint",
]

# Field 4 (`XLine.events`), wire type 2: the one-byte tag of every event.
EVENT_TAG = 0x22
_MAX_VARINT = 10
# Zeros after the events `decode_events` reads: reading a few bytes past an
# event never leaves the buffer.
EVENT_PADDING = bytes(32)


class WireError(ValueError):
    """The bytes break the protobuf wire format."""


def read_varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """Reads one base-128 varint of `buf[pos:end]`.

    Args:
        buf: bytes-like.
        pos: Where the varint starts.
        end: Where the enclosing message ends.

    Returns:
        `(value, position after the varint)`; the value is unsigned (64 bits).

    Raises:
        WireError: If the varint runs past `end` or is over 10 bytes long.
    """
    value = shift = 0
    stop = min(end, pos + _MAX_VARINT)
    while pos < stop:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
    raise WireError("truncated or over-long varint")


def iter_fields(buf: Any, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """Walks the fields of the message in `buf[pos:end]`.

    Yields:
        `(field number, wire type, field start, value start, field end)`:
        `buf[field start:field end]` is the whole field, tag included; for
        wire type 2, `buf[value start:field end]` is its payload.

    Raises:
        WireError: On a field number 0, a group (wire types 3 and 4, which
            no XSpace writer emits) or an invalid wire type, or a field
            running past `end`.
    """
    while pos < end:
        start = pos
        tag, pos = read_varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            _, stop = read_varint(buf, pos, end)
        elif wire == 2:
            size, pos = read_varint(buf, pos, end)
            stop = pos + size
        elif wire == 1:
            stop = pos + 8
        elif wire == 5:
            stop = pos + 4
        else:
            raise WireError(f"unsupported wire type {wire}")
        if stop > end:
            raise WireError("field runs past the end of its message")
        yield number, wire, start, pos, stop
        pos = stop


def _varints(np: Any, b: Any, p: Any, width: int) -> tuple[Any, Any, Any]:
    """Decodes the varints starting at positions `p` of the padded bytes `b`.

    Returns `(value, length, ok)`; `ok` is False where the varint is longer
    than `width` bytes. Values are exact for lengths up to 9 bytes (every
    non-negative int64); callers hand longer ones to protobuf. One round
    per byte: while a quarter of the varints or more are still going (an
    `offset_ps` takes 5-6 bytes), over all of them, masked, which costs
    less than gathering and scattering those going; then over those left.
    """
    byte = b[p]
    live = byte >= 0x80
    if not live.any():
        return byte.astype(np.int64), 1, True
    value = (byte & 0x7F).astype(np.uint64)
    length = np.ones(len(p), dtype=np.int64)
    k = 1
    while k < width and 4 * np.count_nonzero(live) >= len(p):
        byte = b[p + k]
        if k < 9:
            value |= np.where(live, (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k), np.uint64(0))
        length += live
        live &= byte >= 0x80
        k += 1
    going = np.flatnonzero(live)
    while len(going) and k < width:
        byte = b[p[going] + k]
        if k < 9:
            value[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        length[going] += 1
        going = going[byte >= 0x80]
        k += 1
    if not len(going):
        return value.view(np.int64), length, True
    ok = np.ones(len(p), dtype=bool)
    ok[going] = False
    return value.view(np.int64), length, ok


def _varint_lengths(np: Any, b: Any, p: Any, width: int) -> tuple[Any, Any]:
    """The lengths of the varints starting at positions `p` of the padded bytes `b`.

    Returns `(length, ok)` as `_varints` gives them, without their values:
    half the work per byte, for varints only stepped over.
    """
    live = b[p] >= 0x80
    if not live.any():
        return np.ones(len(p), dtype=np.int64), True
    length = np.ones(len(p), dtype=np.int64)
    k = 1
    while k < width and 4 * np.count_nonzero(live) >= len(p):
        length += live
        live &= b[p + k] >= 0x80
        k += 1
    going = np.flatnonzero(live)
    while len(going) and k < width:
        length[going] += 1
        going = going[b[p[going] + k] >= 0x80]
        k += 1
    if not len(going):
        return length, True
    ok = np.ones(len(p), dtype=bool)
    ok[going] = False
    return length, ok


def frame_run(np: Any, data: bytes, pos: int, limit: int) -> tuple[Any, int]:
    """Frames the run of events that starts at `pos` of `data`, in numpy.

    The run is what a field-by-field walk from `pos` takes while it meets
    events, each starting where the one before ends, before `limit` and
    before the last 8 bytes of `data`, with a length of at most 3 varint
    bytes (2 MiB) that ends inside `data`. The walk is not done event by
    event: every tag byte (`EVENT_TAG`) whose payload begins as protobuf
    writes an event (`metadata_id`, then `offset_ps`) is taken for one,
    which a stat inside an event (same tag, then an id and a value) never
    is, and bytes inside an event taken before are not; then the guess is
    checked, each event starting where the one before ends, and kept up to
    the first break. A break (an event without `offset_ps`, bytes that
    read as an event reaching past the one they lie in) only ends the run
    early, where the field-by-field walk takes over: what is returned is
    always that walk's.

    Args:
        np: The numpy module.
        data: Bytes of a line.
        pos: Where the run starts, at a field's tag.
        limit: No event of the run starts here or later.

    Returns:
        `(heads, stop)`: the int64 positions of the run's event tags, in
        order (empty when no run starts at `pos`), and where the walk goes
        on: after the run's last event, or `pos`.
    """
    n = len(data)
    b = np.frombuffer(data, dtype=np.uint8)
    tags = np.flatnonzero(b[pos : min(limit, n - 8)] == EVENT_TAG)
    if not len(tags) or tags[0]:
        return np.zeros(0, dtype=np.int64), pos
    tags += pos
    # Every read below stays inside `data`: the furthest is 8 bytes past a tag.
    size, length, ok = _varints(np, b, tags + 1, 3)
    body = tags + 1 + length
    after = body + size
    # Where `offset_ps`' tag stands after a `metadata_id` of 1, 2 or 3 bytes.
    at = np.where(b[body + 1] < 0x80, body + 2, np.where(b[body + 2] < 0x80, body + 3, body + 4))
    like = (b[body] == 0x08) & (b[at] == 0x10) & (after <= n)
    if ok is not True:
        like &= ok
    if not (after[0] <= n and (ok is True or ok[0])):
        return np.zeros(0, dtype=np.int64), pos
    # The event at `pos` is the walk's whatever its payload holds.
    like[0] = True
    taken = np.flatnonzero(like)
    heads, ends = tags[taken], after[taken]
    # A guess inside an event guessed before it is a stat's bytes, not one.
    inside = np.zeros(len(heads), dtype=bool)
    inside[1:] = heads[1:] < np.maximum.accumulate(ends)[:-1]
    if inside.any():
        heads, ends = heads[~inside], ends[~inside]
    breaks = np.flatnonzero(heads[1:] != ends[:-1])
    kept = int(breaks[0]) + 1 if len(breaks) else len(heads)
    return heads[:kept], int(ends[kept - 1])


# XStat value fields by tag: double 2 (0x11, fixed64); uint64 3, int64 4,
# ref 7 (0x18, 0x20, 0x38: varints); str 5, bytes 6 (0x2A, 0x32: length).
_STAT_FIXED64_TAG = 0x11


def _stat_has_one_id(
    np: Any, b: Any, ss: Any, se: Any, stat_ids: Sequence[int], has_stats: list[Any], live: Any
) -> Any:
    """Checks stats `[ss, se)` are a metadata id then at most one value.

    Marks in each of `has_stats` (at `live`) the events whose stat has the
    id at the same place in `stat_ids`; returns which stats have that
    layout (the only one where the first id read is the one protobuf keeps).
    """
    mid, n, ok = _varints(np, b, ss + 1, 9)
    r = ss + 1 + n
    good = (b[ss] == 0x08) & (r <= se)
    if ok is not True:
        good &= ok
    t = b[r]
    n, vok = _varint_lengths(np, b, r + 1, _MAX_VARINT)
    after = np.where(
        t == _STAT_FIXED64_TAG, r + 9, np.where((t == 0x18) | (t == 0x20) | (t == 0x38), r + 1 + n, -1)
    )
    # Only a string's or bytes' length is read as a value: the other
    # varints are stepped over.
    text = np.flatnonzero((t == 0x2A) | (t == 0x32))
    if len(text):
        vlen, _, _ = _varints(np, b, r[text] + 1, _MAX_VARINT)
        after[text] = r[text] + 1 + n[text] + vlen
    good &= (r == se) | ((after == se) & vok)
    for stat_id, has_stat in zip(stat_ids, has_stats):
        if stat_id >= 0:
            has_stat[live[good & (mid == stat_id)]] = True
    return good


def _check_stats(
    np: Any,
    b: Any,
    pending: list[tuple[Any, Any, Any]],
    stat_ids: Sequence[int],
    has_stats: list[Any],
    other: Any,
) -> None:
    """Checks framed stats inside (`_stat_has_one_id`); `pending` holds (starts, ends, events)."""
    ss, se, at = (np.concatenate(parts) for parts in zip(*pending)) if len(pending) > 1 else pending[0]
    other[at[~_stat_has_one_id(np, b, ss, se, stat_ids, has_stats, at)]] = True


def decode_events(
    np: Any, data: bytes, heads: Any, stat_ids: Sequence[int], *, padded: bool = False
) -> dict[str, Any]:
    """Reads the scalar fields of the events framed at `heads` in `data`.

    Args:
        np: The numpy module.
        data: Bytes holding whole `XLine.events` fields.
        heads: int64 positions of the events' tags (`EVENT_TAG`).
        stat_ids: Stat metadata ids to look for (`-1`: none).
        padded: Whether `data` ends with `EVENT_PADDING`, which is then
            no part of the events (saves copying `data` to pad it).
            Defaults to `False`.

    Returns:
        A dict of int64 arrays `metadata_id`, `offset_ps`, `duration_ps`,
        `start`, `end` (each event's payload bounds in `data`), `has_stats`
        (per id of `stat_ids`, a bool array: an event stat has that
        metadata id) and the bool array `other` (an event this reader does
        not decode: read it with `XEvent.FromString(data[start:end])`; its
        other values are meaningless).

    Raises:
        WireError: If an event's length runs past the end of `data`.
    """
    n_data = len(data) - len(EVENT_PADDING) if padded else len(data)
    b = np.frombuffer(data if padded else data + EVENT_PADDING, dtype=np.uint8)
    size, hlen, ok = _varints(np, b, heads + 1, _MAX_VARINT)
    if ok is not True and not ok.all():
        raise WireError("event length is not a varint")
    s = heads + 1 + hlen
    e = s + size
    if len(e) and ((size < 0).any() or e.max() > n_data):
        raise WireError("event runs past the end of its line")
    other = np.zeros(len(s), dtype=bool)
    p = s
    values = []
    for tag in (0x08, 0x10, 0x18):
        has = (b[p] == tag) & (p < e)
        v, n, ok = _varints(np, b, p + 1, 9)
        if ok is not True:
            other |= has & ~ok
        if has.all():
            values.append(v)
            p = p + 1 + n
        else:
            values.append(np.where(has, v, 0))
            p = np.where(has, p + 1 + n, p)
            if tag == 0x10:
                # An event without `offset_ps` (none, or `num_occurrences`).
                other |= ~has
    other |= p > e
    has_stats = [np.zeros(len(s), dtype=bool) for _ in stat_ids]
    looked_for = any(stat_id >= 0 for stat_id in stat_ids)
    # The rest of each event must be its stats, nothing else: walk them,
    # one stat of every event that has one more per round.
    live = np.flatnonzero((p < e) & ~other)
    qi = p[live]
    # Stats framed but not yet checked inside: the late rounds' few stats
    # are checked together, never many more than one per event at once
    # (the check's arrays are the batch's largest).
    pending: list[tuple[Any, Any, Any]] = []
    waiting = 0
    while len(live):
        ei = e[live]
        size, n, ok = _varints(np, b, qi + 1, _MAX_VARINT)
        ss = qi + 1 + n
        se = ss + size
        good = (b[qi] == EVENT_TAG) & (se <= ei) & (ss < se)
        if ok is not True:
            good &= ok
        other[live[~good]] = True
        going = good & (se < ei)
        if looked_for:
            pending.append((ss[good], se[good], live[good]))
            waiting += len(pending[-1][0])
            if 2 * waiting >= len(s) or not going.any():
                _check_stats(np, b, pending, stat_ids, has_stats, other)
                pending, waiting = [], 0
        live, qi = live[going], se[going]
    return {
        "metadata_id": values[0],
        "offset_ps": values[1],
        "duration_ps": values[2],
        "start": s,
        "end": e,
        "has_stats": has_stats,
        "other": other,
    }
