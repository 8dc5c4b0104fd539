"""Reading XSpace files piece by piece: the trace room's file layer.

`trace.xplane` (finding and opening traces) and the analysis (`_events`,
`_scan`) share what is here: a file read by position (`TraceFile`), planes
whose lines are still in the file (`LazySpace`, `LazyPlane`), lines walked
in slices of whole events (`read_line_chunks`, `frame_events`), and the
checks and decoding that turn bad bytes into `TraceError`s. The names in
`__all__` are the package's contract with this module; nothing outside
`keras_xla_guard.trace` uses them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from keras_xla_guard._checks import check_int
from keras_xla_guard.errors import (
    TraceError,
    TraceNotFoundError,
    TraceParseError,
    TraceTooLargeError,
)
from keras_xla_guard.trace._proto import plane_head, xplane_pb2
from keras_xla_guard.trace._wire import EVENT_TAG, WireError, frame_run, iter_fields, read_varint

__all__ = [
    "CHUNK_BYTES",
    "LazyPlane",
    "LazySpace",
    "TraceFile",
    "check_metadata",
    "check_planes",
    "check_trace_file",
    "decode",
    "frame_events",
    "read_line_chunks",
    "read_plane",
    "read_trace",
    "trace_errors",
]

# Bytes of a line read at once: large enough that the per-slice cost
# vanishes, small enough that a slice's memory does not count. A slice is
# scanned with the batch it completes (`_scan.BATCH_EVENTS`): 128 KiB of
# small events (15-35 bytes each) keeps batches near that size, where
# 256 KiB made them up to twice as large, and their arrays' memory with them.
CHUNK_BYTES = 1 << 17


def check_trace_file(path: str | os.PathLike[str], max_bytes: int) -> int:
    """Checks a trace file exists and fits the cap; returns its size."""
    check_int("max_bytes", max_bytes, minimum=1)
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise TraceNotFoundError(f"No such trace file: {str(p)!r}.") from None
    except OSError as e:
        raise TraceError(f"Cannot read trace file {str(p)!r}: {e}") from None
    if not p.is_file():
        raise TraceNotFoundError(f"Not a file: {str(p)!r}.")
    if size > max_bytes:
        raise TraceTooLargeError(
            f"Trace file {str(p)!r} is {size} bytes, above the cap of "
            f"{max_bytes} bytes. Raise `max_bytes` (CLI: --max-bytes) to "
            "analyze it anyway."
        )
    if size == 0:
        raise TraceParseError(f"Trace file {str(p)!r} is empty.")
    return size


def read_trace(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """Reads a trace file's bytes after checking it exists and fits the cap."""
    check_trace_file(path, max_bytes)
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TraceError(f"Cannot read trace file {str(path)!r}: {e}") from None


class TraceFile:
    """A trace file read by position, through a small buffer.

    Indexing gives one byte, as `iter_fields` reads them; `read` gives a
    span. Only the buffer and the spans asked for are ever in memory.
    """

    _BUFFER = 1 << 16

    def __init__(self, path: str | os.PathLike[str], size: int) -> None:
        self.path = path
        self.size = size
        self._file: Any = None
        self._base = 0
        self._data = b""

    def __enter__(self) -> TraceFile:
        self._file = open(self.path, "rb")
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()
        self._file = None
        self._data = b""

    def __getitem__(self, pos: int) -> int:
        i = pos - self._base
        if not 0 <= i < len(self._data):
            self._base, self._data = pos, self.read(pos, min(self.size, pos + self._BUFFER))
            i = 0
        return self._data[i]

    def read(self, start: int, stop: int) -> bytes:
        """Returns the bytes `[start, stop)` of the file."""
        self._file.seek(start)
        data = self._file.read(stop - start)
        if len(data) != stop - start:
            # The file shrank since it was measured.
            raise WireError("the file ended early")
        return data


# A plane's fields after its lines are its metadata. They are walked one by
# one while they are large (`/host:metadata` holds an HLO module in each),
# and checked in one protobuf parse once this many of them turn out small
# (names of ops and stats, thousands on a host plane): walking costs per
# field, the parse per byte (it copies what it does not know).
_WALKED_FIELDS = 32
_SMALL_FIELD_BYTES = 1024


def read_plane(f: TraceFile, start: int, stop: int, source: str) -> LazyPlane:
    """Notes where a plane's lines and metadata lie and parses its name and id.

    The metadata (every field but the lines) is parsed when first used:
    a plane the analysis never looks into (`/host:metadata`) is never
    parsed. Name, id and metadata are what parsing all fields but the
    lines as one `XPlane` gives, whatever the order of the fields.
    """
    head, runs, lines, rest = _walk_plane(f, start, stop, whole=False)
    if rest < stop:
        if _only_metadata(f, rest, stop):
            runs[-1][1] = stop
        else:
            head, runs, lines, _ = _walk_plane(f, start, stop, whole=True)
    names = decode(xplane_pb2().XPlane, b"".join(f.read(a, b) for a, b in head), source)
    return LazyPlane(names.name, names.id, f.path, f.size, lines, runs, source)


def _walk_plane(
    f: TraceFile, start: int, stop: int, whole: bool
) -> tuple[list[tuple[int, int]], list[list[int]], list[tuple[int, int]], int]:
    """Walks a plane's fields: the spans of its id and name fields, of all its fields but the lines
    (adjacent ones merged) and of its lines, and where the walk stopped.

    Unless `whole`, the walk stops after `_WALKED_FIELDS` small metadata
    fields: the rest, up to `stop`, is not in the spans.
    """
    head: list[tuple[int, int]] = []
    runs: list[list[int]] = []
    lines: list[tuple[int, int]] = []
    fields = size = 0
    for number, wire, field_start, value_start, field_stop in iter_fields(f, start, stop):
        if number == 3 and wire == 2:
            lines.append((value_start, field_stop))
            continue
        if runs and runs[-1][1] == field_start:
            runs[-1][1] = field_stop
        else:
            runs.append([field_start, field_stop])
        if number in (1, 2):
            head.append((field_start, field_stop))
            continue
        fields += 1
        size += field_stop - field_start
        if not whole and fields == _WALKED_FIELDS and size < _WALKED_FIELDS * _SMALL_FIELD_BYTES:
            return head, runs, lines, field_stop
    return head, runs, lines, stop


def _only_metadata(f: TraceFile, start: int, stop: int) -> bool:
    """Whether the plane's fields in `[start, stop)` parse and hold no id, name or line."""
    from google.protobuf.message import DecodeError

    seen = plane_head()()
    try:
        seen.ParseFromString(f.read(start, stop))
    except (DecodeError, RuntimeError, ValueError):
        # Bytes protobuf refuses: the whole walk names what is wrong.
        return False
    return not (seen.lines or seen.HasField("id") or seen.HasField("name"))


class LazySpace(NamedTuple):
    """What `open_xspace` returns: planes whose lines are still in the file.

    `errors` and `warnings` are the XSpace's own (what the profiler
    reported, e.g. dropped GPU events).
    """

    planes: list[LazyPlane]
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


class LazyPlane:
    """An XPlane's name and id, where its lines lie in the file, and its metadata once used.

    `event_metadata`, `stat_metadata` and `stats` are those of the `XPlane`
    that the plane's fields other than its lines make up, parsed on first
    use and kept.
    """

    __slots__ = ("_meta", "_runs", "id", "line_spans", "name", "path", "size", "source")

    def __init__(
        self,
        name: str,
        plane_id: int,
        path: Any,
        size: int,
        line_spans: list[tuple[int, int]],
        runs: list[list[int]],
        source: str,
    ) -> None:
        self.name = name
        self.id = plane_id
        self.path = path
        self.size = size
        self.line_spans = line_spans
        self.source = source
        self._runs = runs
        self._meta: Any = None

    def _parsed(self) -> Any:
        if self._meta is None:
            with trace_errors(self.source), TraceFile(self.path, self.size) as f:
                data = b"".join([f.read(a, b) for a, b in self._runs])
            self._meta = decode(xplane_pb2().XPlane, data, self.source)
        return self._meta

    @property
    def event_metadata(self) -> Any:
        return self._parsed().event_metadata

    @property
    def stat_metadata(self) -> Any:
        return self._parsed().stat_metadata

    @property
    def stats(self) -> Any:
        return self._parsed().stats


def read_line_chunks(
    plane: LazyPlane, span: tuple[int, int], header: list[bytes], source: str
) -> Iterator[tuple[bytes, Any]]:
    """Walks one line of an `open_xspace` plane in slices of whole events.

    Args:
        plane: The plane.
        span: Where the line's bytes lie in the file.
        header: Receives the line's fields other than its events, each
            serialized (parse their concatenation as an `XLine`); after
            the first slice it holds those written before the first event.
        source: Name used in error messages.

    Yields:
        `(data, heads)`: bytes holding whole events, and the positions in
        `data` of their tags (int64, `frame_events`), in file order.

    Raises:
        TraceParseError: If the line breaks the wire format.
    """
    start, stop = span
    with trace_errors(source), TraceFile(plane.path, plane.size) as f:
        pos, want = start, CHUNK_BYTES
        while pos < stop:
            end = min(stop, pos + want)
            data = f.read(pos, end)
            last = end == stop
            used, heads, need = frame_events(data, last, header)
            if not used:
                # One field larger than the slice: read it whole.
                want = max(want, need)
                continue
            pos += used
            if len(heads):
                yield data, heads
            del data


@contextlib.contextmanager
def trace_errors(source: str) -> Iterator[None]:
    """Turns wire-format and I/O errors met while reading `source` into `TraceError`s."""
    try:
        yield
    except WireError as e:
        raise TraceParseError(
            f"{source} is not a valid XSpace trace (protobuf decode failed: {e})."
        ) from None
    except OSError as e:
        raise TraceError(f"Cannot read trace file {source!r}: {e}") from None


# Runs of events are framed in numpy (`frame_run`) from this many bytes on:
# below, numpy's cost per call weighs more than the walk's per event.
_RUN_BYTES = 1 << 13
# Runs tried per slice: one after a line's first fields does in traces
# protobuf writes; a few more for what breaks a run (an event without
# `offset_ps`), each then walked field by field.
_RUNS = 4


def frame_events(data: bytes, last: bool, header: list[bytes]) -> tuple[int, Any, int]:
    """Splits `data` (part of a line) into whole fields.

    Returns how many bytes held whole fields, the positions of the event
    fields among them (the other fields go to `header`), and, when not
    even one field fit, the size needed. The positions are an int64 numpy
    array (8 bytes an event while slices wait for their batch). Long runs
    of events are framed in numpy (`frame_run`), the rest field by field.
    """
    import numpy as np

    parts: list[Any] = []
    heads: list[int] = []
    add = heads.append
    tag = EVENT_TAG
    n = len(data)
    # Events under 128 bytes starting before `fast` end inside `data`.
    fast = n - 130
    # Leave room for any tag and length unless this is the line's end.
    limit = n if last else n - 24
    runs = 0
    i = 0
    while True:
        if runs < _RUNS and limit - i >= _RUN_BYTES and data[i] == tag:
            runs += 1
            run, i = frame_run(np, data, i, limit)
            if len(run):
                if heads:
                    parts.append(np.array(heads, dtype=np.int64))
                    heads.clear()
                parts.append(run)
        else:
            # The common case in few steps: an event under 128 bytes.
            while i < fast:
                if data[i] != tag:
                    break
                size = data[i + 1]
                if size & 0x80:
                    break
                add(i)
                i += 2 + size
        if i >= limit:
            break
        if data[i] == EVENT_TAG and i + 1 < n:
            size, end = read_varint(data, i + 1, n)
            end += size
            if end > n:
                if last:
                    raise WireError("event runs past the end of its line")
                return i, _positions(np, parts, heads), end - i
            add(i)
            i = end
            continue
        try:
            # i < limit <= n, so the walk yields this field or raises.
            *_, end = next(iter_fields(data, i, n))
        except WireError:
            if last:
                raise
            # A field longer than the slice (or cut by its end): read more.
            return i, _positions(np, parts, heads), 2 * n
        header.append(data[i:end])
        i = end
    return i, _positions(np, parts, heads), 0


def _positions(np: Any, parts: list[Any], heads: list[int]) -> Any:
    """The positions of `parts` (arrays, in order) then of `heads`, as one int64 array."""
    if heads:
        parts.append(np.array(heads, dtype=np.int64))
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def check_planes(space: Any, source: str) -> None:
    if not space.planes:
        raise TraceParseError(
            f"{source} decoded to an XSpace without planes: not a TF profiler trace, or an empty one."
        )
    # Protobuf decodes many other messages (a GraphDef, a Summary) into an
    # XSpace of oddly named planes; every profiler trace has a host or a
    # device plane.
    if not any(p.name.startswith(("/host:", "/device:")) for p in space.planes):
        names = sorted({p.name for p in space.planes})[:3]
        raise TraceParseError(
            f"{source} is not a TF profiler trace: it has no /host: or "
            f"/device: plane (plane names: {names!r})."
        )


def check_metadata(plane: Any, event: Any, source: str) -> None:
    if event.metadata_id and event.metadata_id not in plane.event_metadata:
        # Dangling references mean the bytes were something else that
        # happened to decode; analysis would be meaningless.
        raise TraceParseError(
            f"{source} is not a consistent XSpace trace: event metadata id "
            f"{event.metadata_id} is undefined in plane {plane.name!r}."
        )


def decode(cls: Any, data: bytes, source: str) -> Any:
    from google.protobuf.message import DecodeError

    message = cls()
    try:
        message.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise TraceParseError(
            f"{source} is not a valid XSpace trace (protobuf decode failed: {e})."
        ) from None
    return message
