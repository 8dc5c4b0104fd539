"""Tests for keras_xla_guard.trace._wire: the framing and event-column reader
agree with protobuf's own parser on every event they accept."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_xla_guard.trace._reader import frame_events
from keras_xla_guard.trace._wire import (
    WireError,
    decode_events,
    iter_fields,
    read_varint,
)
from keras_xla_guard.trace.xplane import xplane_pb2

_INT64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 300),
    st.sampled_from([0, 1, 127, 128, 2**56, 2**63 - 1, -1]),
)
_STAT = st.tuples(
    st.integers(0, 300),
    st.sampled_from(
        ["double_value", "uint64_value", "int64_value", "str_value", "bytes_value", "ref_value", None]
    ),
    st.integers(0, 2**64 - 1),
)
_EVENT = st.tuples(_INT64, st.one_of(_INT64, st.none()), _INT64, st.lists(_STAT, max_size=4))


def _event(pb, spec):
    mid, offset, duration, stats = spec
    event = pb.XEvent(metadata_id=mid, duration_ps=duration)
    if offset is None:
        event.num_occurrences = 3
    else:
        event.offset_ps = offset
    for stat_mid, kind, value in stats:
        stat = event.stats.add(metadata_id=stat_mid)
        if kind == "double_value":
            stat.double_value = value / 7
        elif kind in ("uint64_value", "ref_value"):
            setattr(stat, kind, value)
        elif kind == "int64_value":
            stat.int64_value = value - 2**63
        elif kind is not None:
            setattr(stat, kind, str(value) if kind == "str_value" else bytes(value % 300))
    return event


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(_EVENT, min_size=1, max_size=12),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), max_size=6),
    stat_id=st.sampled_from([-1, 0, 1, 5, 200]),
    second_id=st.sampled_from([-1, 1, 3, 200]),
)
def test_decoded_columns_equal_protobufs_values(events, flips, stat_id, second_id):
    """Events (flipped bytes inside them too): values decoded are protobuf's, or the event is left to it."""
    from google.protobuf.message import DecodeError

    pb = xplane_pb2()
    data = bytearray(pb.XLine(events=[_event(pb, e) for e in events]).SerializeToString())
    header: list[bytes] = []
    used, heads, _ = frame_events(bytes(data), True, header)
    assert used == len(data) and len(heads) == len(events) and not header
    lengths = [len(pb.XLine(events=[_event(pb, e)]).SerializeToString()) for e in events]
    # Flip bytes inside event payloads only, so the framing stays valid.
    starts = np.cumsum([0] + lengths[:-1])
    for where, mask in flips:
        k = min(int(where * len(events)), len(events) - 1)
        head = int(starts[k])
        payload_at = head + 1 + (1 if lengths[k] - 2 < 128 else 2)
        if payload_at < head + lengths[k]:
            data[payload_at + int(where * (head + lengths[k] - payload_at - 1))] ^= mask
    cols = decode_events(np, bytes(data), np.array(heads, dtype=np.int64), (stat_id, second_id))
    checked = 0
    for i in range(len(events)):
        if cols["other"][i]:
            continue
        try:
            event = pb.XEvent.FromString(bytes(data[cols["start"][i] : cols["end"][i]]))
        except DecodeError:
            continue
        assert (int(cols["metadata_id"][i]), int(cols["offset_ps"][i]), int(cols["duration_ps"][i])) == (
            event.metadata_id,
            event.offset_ps,
            event.duration_ps,
        )
        assert bool(cols["has_stats"][0][i]) == any(s.metadata_id == stat_id for s in event.stats)
        assert bool(cols["has_stats"][1][i]) == any(s.metadata_id == second_id for s in event.stats)
        checked += 1
    if not flips and all(
        e[1] is not None and e[0] >= 0 and e[1] >= 0 and e[2] >= 0 and all(s[0] > 0 for s in e[3])
        for e in events
    ):
        # Canonical events of non-negative values are all decoded here.
        assert checked == len(events)


@given(data=st.binary(max_size=64))
def test_field_walk_and_varints_fail_only_with_wire_errors(data):
    """Random bytes: the field walker and varint reader give fields in bounds or WireError."""
    try:
        for number, _, start, value_start, stop in iter_fields(data, 0, len(data)):
            assert 0 <= start < value_start <= stop <= len(data) and number > 0
    except WireError:
        pass
    try:
        value, end = read_varint(data, 0, len(data))
    except WireError:
        return
    assert 0 <= value < 2**64 and 1 <= end <= 10


def test_varint_reader_agrees_with_protobuf_encoding():
    """Varints written by protobuf (via a message field) read back exactly."""
    pb = xplane_pb2()
    for value in (1, 127, 128, 300, 2**35, 2**63 - 1, -1, -(2**63)):
        data = pb.XEvent(metadata_id=value).SerializeToString()
        assert data[0] == 0x08
        decoded, end = read_varint(data, 1, len(data))
        assert decoded == value % 2**64 and end == len(data)


def test_event_running_past_its_line_is_a_wire_error():
    """A line whose last event claims more bytes than there are raises WireError."""
    pb = xplane_pb2()
    data = pb.XLine(events=[pb.XEvent(metadata_id=1, offset_ps=5, duration_ps=9)]).SerializeToString()
    with pytest.raises(WireError) as caught:
        frame_events(data[:-2], True, [])
    assert str(caught.value) == "event runs past the end of its line"


@pytest.mark.parametrize("data", [b"\xff" * 11, b"\x80"], ids=["over_long", "truncated"])
def test_a_bad_varint_is_a_wire_error_saying_so(data):
    """A varint of more than 10 bytes, or cut off, raises WireError with its message."""
    with pytest.raises(WireError) as caught:
        read_varint(data, 0, len(data))
    assert str(caught.value) == "truncated or over-long varint"


@pytest.mark.parametrize("name", ["mlp", "jit", "jax_cpu", "eager_loop", "tf220_async_launch"])
def test_stats_checked_in_columns_agree_with_protobuf_on_stored_traces(name):
    """Real lines: every event decoded (none left to protobuf), and the stats found are protobuf's."""
    import collections
    import gzip

    from tests.trace._golden import DATA

    space = xplane_pb2().XSpace.FromString(gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes()))
    checked = found = 0
    for plane in space.planes:
        uses = collections.Counter(
            s.metadata_id for line in plane.lines for e in line.events for s in e.stats
        )
        # The most and the least used stat ids of the plane, so both marks are exercised.
        stat_ids = (uses.most_common()[0][0], uses.most_common()[-1][0]) if uses else (-1, -1)
        for line in plane.lines:
            data = line.SerializeToString()
            _, heads, _ = frame_events(data, True, [])
            if not len(heads):
                continue
            cols = decode_events(np, data, np.array(heads, dtype=np.int64), stat_ids)
            assert not cols["other"].any()
            for k, stat_id in enumerate(stat_ids):
                want = [any(s.metadata_id == stat_id for s in e.stats) for e in line.events]
                assert cols["has_stats"][k].tolist() == want
                found += sum(want)
            checked += len(heads)
    assert checked == sum(len(line.events) for plane in space.planes for line in plane.lines)
    assert found > 0


def _stat_field(stat: bytes) -> bytes:
    """An `XEvent.stats` field (tag 0x22) holding the hand-written XStat bytes `stat`."""
    return bytes([0x22, len(stat)]) + stat


@pytest.mark.parametrize("stat_ids", [(3, 5), (5, 3)])
def test_stats_of_other_layouts_leave_their_event_to_protobuf(stat_ids):
    """A stat that is not "id, then at most one value" (its id twice, a value before its id, two values)
    marks its event `other`; a plain stat beside it in another event does not."""
    pb = xplane_pb2()
    head = bytes([0x08, 0x01, 0x10, 0x0A, 0x18, 0x05])
    stats = [
        bytes([0x08, 0x03, 0x20, 0x07]),  # id 3, int64 7: decoded here
        bytes([0x08, 0x05, 0x08, 0x03]),  # id 5 then id 3: protobuf keeps 3
        bytes([0x20, 0x07, 0x08, 0x03]),  # the value before the id
        bytes([0x08, 0x03, 0x20, 0x01, 0x20, 0x02]),  # two values: protobuf keeps the last
        bytes([0x08, 0x05]),  # id 5, no value: decoded here
    ]
    payloads = [head + _stat_field(s) for s in stats]
    data = b"".join(bytes([0x22, len(p)]) + p for p in payloads)
    _, heads, _ = frame_events(data, True, [])
    cols = decode_events(np, data, np.array(heads, dtype=np.int64), stat_ids)
    assert cols["other"].tolist() == [False, True, True, True, False]
    events = [pb.XEvent.FromString(p) for p in payloads]
    assert [e.stats[0].metadata_id for e in events] == [3, 3, 3, 3, 5]
    for k, stat_id in enumerate(stat_ids):
        decoded = [i for i in range(len(events)) if not cols["other"][i]]
        assert [bool(cols["has_stats"][k][i]) for i in decoded] == [
            events[i].stats[0].metadata_id == stat_id for i in decoded
        ]


def test_field_walk_gives_each_wire_types_bounds():
    """A varint, a fixed64, a length-delimited and a fixed32 field: each one's number, wire type and
    bounds, the value start after the tag (and the length, for wire type 2)."""
    data = b"\x08\x96\x01" + b"\x11" + bytes(range(8)) + b"\x1a\x03abc" + b"\x25" + bytes(4)
    assert list(iter_fields(data, 0, len(data))) == [
        (1, 0, 0, 1, 3),
        (2, 1, 3, 4, 12),
        (3, 2, 12, 14, 17),
        (4, 5, 17, 18, 22),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x01", "field number 0"),
        (b"\x0f\x01", "unsupported wire type 7"),
        (b"\x0b\x01", "unsupported wire type 3"),
        (b"\x0a\x05abc", "field runs past the end of its message"),
        (b"\x09" + bytes(7), "field runs past the end of its message"),
    ],
    ids=["number_0", "wire_7", "group", "length", "fixed64"],
)
def test_field_walk_errors_say_what_is_wrong(data, message):
    """Each malformed field raises WireError with its own message (quoted in the TraceParseError)."""
    with pytest.raises(WireError) as caught:
        list(iter_fields(data, 0, len(data)))
    assert str(caught.value) == message


def test_events_of_other_stat_layouts_keep_their_xla_and_step_marks_end_to_end(tmp_path):
    """A step marker whose `_r` stat and an HLO op whose `hlo_module` stat are written value first (left
    to protobuf): still a step of 100 us and 20 us of XLA time, streamed as parsed."""
    from _xspace import build_space, pb_field, varint

    from keras_xla_guard import analyze_trace, analyze_xspace
    from keras_xla_guard.trace.xplane import load_xspace

    space = build_space(
        {"python": [("train", 0, 100, {"_r": 1, "step_num": 3}), ("fusion.1", 10, 20, {"hlo_module": "m"})]}
    )
    plane = space.planes[0]
    sid = {md.name: md.id for md in plane.stat_metadata.values()}
    mid = {md.name: md.id for md in plane.event_metadata.values()}

    def event(name: str, start_us: int, dur_us: int, stats: list[bytes]) -> bytes:
        head = (
            b"\x08"
            + varint(mid[name])
            + b"\x10"
            + varint(start_us * 10**6)
            + b"\x18"
            + varint(dur_us * 10**6)
        )
        return pb_field(0x22, head + b"".join(pb_field(0x22, s) for s in stats))

    line = (
        b"\x12\x06python\x18"
        + varint(1000)
        + event(
            "train",
            0,
            100,
            [b"\x20\x01\x08" + varint(sid["_r"]), b"\x08" + varint(sid["step_num"]) + b"\x20\x03"],
        )
        + event("fusion.1", 10, 20, [pb_field(0x2A, b"m") + b"\x08" + varint(sid["hlo_module"])])
    )
    del plane.lines[:]
    data = pb_field(0x0A, plane.SerializeToString() + pb_field(0x1A, line))
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(data)
    streamed, parsed = analyze_trace(path), analyze_xspace(load_xspace(path))
    assert streamed.xla_time_s == parsed.xla_time_s == 20_000_000 * 1e-12
    assert [(s.step, s.wall_s) for s in streamed.steps] == [(3, 100_000_000 * 1e-12)]
    assert streamed.steps == parsed.steps


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x22" + b"\xff" * 10 + b"\x01", "event length is not a varint"),
        (b"\x22\x05\x08\x01", "event runs past the end of its line"),
    ],
    ids=["length", "past_the_end"],
)
def test_events_framed_wrongly_are_wire_errors_saying_what_is_wrong(data, message):
    """An event whose length is no varint, or runs past its line, raises WireError with its own message."""
    with pytest.raises(WireError) as caught:
        decode_events(np, data, np.array([0], dtype=np.int64), (-1, -1))
    assert str(caught.value) == message


def _walk(data: bytes, last: bool) -> tuple[int, list[int], list[bytes], int]:
    """The field-by-field walk `frame_events` must agree with: (used, heads, header, need)."""
    heads: list[int] = []
    header: list[bytes] = []
    n = len(data)
    limit = n if last else n - 24
    i = 0
    while i < limit:
        if data[i] == 0x22 and i + 1 < n:
            size, end = read_varint(data, i + 1, n)
            end += size
            if end > n:
                if last:
                    raise WireError("event runs past the end of its line")
                return i, heads, header, end - i
            heads.append(i)
            i = end
            continue
        try:
            *_, end = next(iter_fields(data, i, n))
        except WireError:
            if last:
                raise
            return i, heads, header, 2 * n
        header.append(data[i:end])
        i = end
    return i, heads, header, 0


def _framed(data: bytes, last: bool) -> tuple[int, list[int], list[bytes], int]:
    header: list[bytes] = []
    used, heads, need = frame_events(data, last, header)
    assert isinstance(heads, np.ndarray) and heads.dtype == np.int64
    return used, heads.tolist(), header, need


# Payloads that trip the numpy run: an event without `offset_ps` (its `metadata_id` is followed by
# `duration_ps`), a `metadata_id` of 4 varint bytes, and stats whose bytes look like events.
_ODD_EVENT = st.sampled_from(
    [
        {"metadata_id": 3, "duration_ps": 7},
        {"metadata_id": 2**21, "offset_ps": 5, "duration_ps": 1},
        {"metadata_id": 0, "offset_ps": 9},
        {"metadata_id": 1, "offset_ps": 0x22, "duration_ps": 0x22},
    ]
)
_LOOKALIKE_STR = st.sampled_from(
    [
        bytes([0x22, 0x04, 0x08, 0x01, 0x10, 0x02]).decode("latin-1"),
        bytes([0x22, 0x7F, 0x08, 0x05, 0x10]).decode("latin-1"),
        "\x22\x02\x08\x10",
    ]
)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(1, 900),
    odd=st.lists(st.tuples(st.floats(0, 1), _ODD_EVENT), max_size=4),
    lookalikes=st.lists(st.tuples(st.floats(0, 1), _LOOKALIKE_STR), max_size=4),
    fields=st.lists(
        st.tuples(st.floats(0, 1), st.sampled_from([b"\x12\x03abc", b"\x48\x05", b"\x08\x07"])), max_size=3
    ),
    cut=st.one_of(st.none(), st.floats(0, 1)),
    big=st.integers(0, 2),
)
def test_framing_in_numpy_gives_the_field_by_field_walk(count, odd, lookalikes, fields, cut, big):
    """Lines of up to 900 events (the numpy run framing from 8 KiB on), with events and stats that
    look like events or break the run, other fields between events, 2-3 byte lengths and a cut end:
    positions, header fields, bytes used and bytes needed are the field-by-field walk's."""
    pb = xplane_pb2()
    events = [
        pb.XEvent(
            metadata_id=1 + k % 40,
            offset_ps=1000 + 37 * k,
            duration_ps=5 + k % 300,
            stats=[pb.XStat(metadata_id=2, int64_value=k), pb.XStat(metadata_id=3, ref_value=0x22 + k % 3)],
        )
        for k in range(count)
    ]
    for where, spec in odd:
        events[int(where * (count - 1))] = pb.XEvent(**spec)
    for where, text in lookalikes:
        events[int(where * (count - 1))].stats.add(metadata_id=4, str_value=text)
    if big:
        # Lengths of 2 (a 200-byte event) and 3 varint bytes (a 20,000-byte one).
        events[count // 2].stats.add(metadata_id=5, str_value="x" * (200 if big == 1 else 20000))
    pieces = [bytes([0x08, 0x01, 0x12, 0x01, 0x6E])]
    pieces += [pb.XLine(events=[e]).SerializeToString() for e in events]
    for where, field in fields:
        pieces.insert(1 + int(where * count), field)
    data = b"".join(pieces)
    if cut is None:
        assert _framed(data, True) == _walk(data, True)
    else:
        part = data[: max(1, int(cut * len(data)))]
        assert _framed(part, False) == _walk(part, False)
        try:
            want = _walk(part, True)
        except WireError as e:
            with pytest.raises(WireError, match=str(e)):
                frame_events(part, True, [])
        else:
            assert _framed(part, True) == want


def test_a_run_breaks_where_an_event_has_no_offset_and_the_walk_goes_on(monkeypatch):
    """3,000 events of 9 bytes with one of 6 (no `offset_ps`) at 600: the first run stops before it,
    the walk takes it, a second run starts after it and frames the rest."""
    from keras_xla_guard.trace import _reader

    pb = xplane_pb2()
    # Offsets 200-3199 are 2 varint bytes: every event but the odd one is 9 bytes, tag and length included.
    events = [pb.XEvent(metadata_id=1, offset_ps=200 + k, duration_ps=3) for k in range(3000)]
    events[600] = pb.XEvent(metadata_id=1, duration_ps=3)
    data = pb.XLine(events=events).SerializeToString()
    runs = []
    real = _reader.frame_run

    def spy(np_, data_, pos, limit):
        heads, stop = real(np_, data_, pos, limit)
        runs.append((pos, len(heads), stop))
        return heads, stop

    monkeypatch.setattr(_reader, "frame_run", spy)
    used, heads, need = frame_events(data, True, [])
    assert (used, need, len(data)) == (len(data), 0, 2999 * 9 + 6)
    assert heads.tolist() == [9 * k - (3 if k > 600 else 0) for k in range(3000)]
    assert runs == [(0, 600, 5400), (5406, 2399, len(data))]


def test_a_stat_that_looks_like_an_event_does_not_end_the_run_early():
    """An event whose stat's bytes read as a whole event: the guess takes it, the check drops it,
    and every real event is framed by the run itself."""
    from keras_xla_guard.trace._wire import frame_run

    pb = xplane_pb2()
    events = [pb.XEvent(metadata_id=1, offset_ps=10 + k, duration_ps=3) for k in range(1000)]
    events[10].stats.add(metadata_id=2, str_value="\x22\x04\x08\x01\x10\x02")
    data = pb.XLine(events=events).SerializeToString()
    heads, stop = frame_run(np, data, 0, len(data))
    assert heads.tolist() == _walk(data, True)[1][: len(heads)]
    assert (len(heads), stop) == (1000, len(data))


@pytest.mark.parametrize("name", ["mlp", "jit", "jax_cpu", "eager_loop", "tf220_async_launch"])
def test_framing_real_lines_in_slices_gives_the_walk(name, monkeypatch):
    """Every line of the stored traces, framed whole and in 16 KiB slices as the reader cuts them:
    the field-by-field walk's positions, with numpy runs framing most events of the long lines."""
    import gzip

    from keras_xla_guard.trace import _reader
    from tests.trace._golden import DATA

    framed_in_runs = []
    real = _reader.frame_run

    def spy(np_, data_, pos, limit):
        heads, stop = real(np_, data_, pos, limit)
        framed_in_runs.append(len(heads))
        return heads, stop

    monkeypatch.setattr(_reader, "frame_run", spy)
    space = xplane_pb2().XSpace.FromString(gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes()))
    total = 0
    for plane in space.planes:
        for line in plane.lines:
            data = line.SerializeToString()
            assert _framed(data, True) == _walk(data, True)
            pos, heads = 0, []
            while pos < len(data):
                end = min(len(data), pos + (1 << 14))
                used, part, header, need = _framed(data[pos:end], end == len(data))
                assert (used, part, header, need) == _walk(data[pos:end], end == len(data))
                assert used, f"a field of {need} bytes does not fit a 16 KiB slice"
                heads += [pos + h for h in part]
                pos += used
            assert heads == _walk(data, True)[1]
            total += len(heads)
    assert sum(framed_in_runs) > total


@settings(max_examples=300, deadline=None, database=None)
@given(
    values=st.lists(
        st.one_of(st.integers(0, 127), st.integers(128, 2**21), st.integers(0, 2**64 - 1)),
        min_size=1,
        max_size=40,
    ),
    width=st.sampled_from([3, 9, 10]),
    spare=st.integers(0, 3),
)
def test_varints_read_as_the_one_at_a_time_reader_does(values, width, spare):
    """Varints of 1-10 bytes, few or most of them longer than a byte (the masked path): each length,
    and each value up to 9 bytes, is `read_varint`'s; `ok` is False exactly where one is longer than `width`;
    `_varint_lengths` gives the same lengths and `ok` without the values."""
    from keras_xla_guard.trace._wire import _varint_lengths, _varints

    pb = xplane_pb2()
    # As int64 ids: values from 2**63 on are negative, 10 varint bytes.
    encoded = [
        pb.XEvent(metadata_id=v if v < 2**63 else v - 2**64).SerializeToString()[1:] or b"\x00"
        for v in values
    ]
    data = b"".join(encoded) + bytes(16 + spare)
    starts = np.cumsum([0] + [len(e) for e in encoded[:-1]])
    b = np.frombuffer(data, dtype=np.uint8)
    value, length, ok = _varints(np, b, starts.astype(np.int64), width)
    only_length, only_ok = _varint_lengths(np, b, starts.astype(np.int64), width)
    assert len(only_length) == len(values)
    for k, start in enumerate(starts.tolist()):
        want, end = read_varint(data, start, len(data))
        fits = end - start <= width
        assert (ok is True or bool(ok[k])) == fits
        assert (only_ok is True or bool(only_ok[k])) == fits
        if fits:
            assert (length if isinstance(length, int) else int(length[k])) == end - start
            assert int(only_length[k]) == end - start
        if fits and end - start <= 9:
            assert int(value[k]) % 2**64 == want


def test_frame_run_edges_each_give_the_walks_positions():
    """`frame_run` itself: no run where no event starts or the first is cut (an empty int64 array and
    the start back), a run of one event ending at the data's end, events whose `metadata_id` takes 1, 2
    or 3 varint bytes all in the run, and an event of 2 MiB (a 4-byte length) ending it before itself,
    or giving no run when it comes first."""
    from keras_xla_guard.trace._wire import frame_run

    pb = xplane_pb2()

    def line(*events):
        return pb.XLine(events=list(events)).SerializeToString()

    small = [pb.XEvent(metadata_id=1, offset_ps=10 + k, duration_ps=3) for k in range(500)]
    data = b"\x12\x01n" + line(*small)
    # A name field, not an event, at 0; the events from 3 on.
    heads, at = frame_run(np, data, 0, len(data))
    assert (heads.dtype, heads.tolist(), at) == (np.int64, [], 0)
    heads, at = frame_run(np, data, 3, len(data))
    assert (heads.tolist(), at) == (_walk(data, True)[1], len(data))
    whole = line(pb.XEvent(metadata_id=1, offset_ps=5, stats=[pb.XStat(metadata_id=2, str_value="x" * 9000)]))
    assert [h.tolist() if k == 0 else h for k, h in enumerate(frame_run(np, whole, 0, len(whole)))] == [
        [0],
        len(whole),
    ]
    cut = whole[:-1]
    heads, at = frame_run(np, cut, 0, len(cut))
    assert (heads.dtype, heads.tolist(), at) == (np.int64, [], 0)
    # 16384 is 0x80 0x80 0x01: a middle byte that only continues.
    wide = line(
        *(pb.XEvent(metadata_id=mid, offset_ps=7, duration_ps=1) for mid in [5, 300, 70000, 16384] * 300)
    )
    heads, at = frame_run(np, wide, 0, len(wide))
    assert (heads.tolist(), at) == (_walk(wide, True)[1], len(wide))
    big = pb.XEvent(metadata_id=1, offset_ps=9, stats=[pb.XStat(metadata_id=2, bytes_value=bytes(1 << 21))])
    data = line(*small, big, *small)
    heads, at = frame_run(np, data, 0, len(data))
    walked = _walk(data, True)[1]
    assert (heads.tolist(), at) == (walked[:500], walked[500])
    # A short stat first: the tag byte after the big event's own is a field whose length is short.
    big.stats.insert(0, pb.XStat(metadata_id=3, int64_value=1))
    first_big = line(big, *small)
    heads, at = frame_run(np, first_big, 0, len(first_big))
    assert (heads.tolist(), at) == ([], 0)
