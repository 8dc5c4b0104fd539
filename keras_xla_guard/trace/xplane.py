"""Find and load XSpace (`*.xplane.pb`) traces written by the TF profiler.

The `XSpace` protobuf bindings are the package's own
(`keras_xla_guard.trace._proto`): reading a trace needs protobuf, not
TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from keras_xla_guard._checks import check_int
from keras_xla_guard.errors import (
    TraceError,
    TraceNotFoundError,
    TraceParseError,
    TraceTooLargeError,
)
from keras_xla_guard.trace._proto import xplane_pb2
from keras_xla_guard.trace._wire import EVENT_TAG, WireError, iter_fields, read_varint

__all__ = [
    "DEFAULT_MAX_TRACE_BYTES",
    "TRACE_SUFFIX",
    "find_run_dirs",
    "find_trace_files",
    "host_of",
    "iter_lines",
    "load_xspace",
    "open_xspace",
    "read_line_chunks",
    "trace_errors",
    "xplane_pb2",
]

TRACE_SUFFIX = ".xplane.pb"
# 2 GiB is protobuf's own hard limit for one message; stay well below it so a
# runaway trace fails fast with a clear message instead of exhausting memory.
DEFAULT_MAX_TRACE_BYTES = 1 << 30

# Bytes of a line read at once: large enough that the per-slice cost
# vanishes, small enough that a slice's memory does not count.
_CHUNK_BYTES = 1 << 18


def host_of(path: str | os.PathLike[str]) -> str:
    """The host a trace file belongs to: TensorFlow names it `<host>.xplane.pb`.

    Args:
        path: The trace file.

    Returns:
        The file name without `.xplane.pb` (or without its last suffix).
    """
    p = Path(path)
    return p.name[: -len(TRACE_SUFFIX)] if p.name.endswith(TRACE_SUFFIX) else p.stem


def find_run_dirs(log_dir: str | os.PathLike[str]) -> list[Path]:
    """Lists profile run directories under a log directory, oldest first.

    A run directory is any directory that directly holds `*.xplane.pb`
    files; TensorFlow writes them as `<log_dir>/plugins/profile/<run>/`.
    Runs are ordered by the newest trace file they hold (then by name), so
    "newest" means the run written last.

    Args:
        log_dir: A directory to search recursively.

    Returns:
        The run directories, oldest first; empty if there are none.
    """
    runs: dict[Path, float] = {}
    for trace in _walk_traces(Path(log_dir)):
        if not trace.is_file():
            continue
        mtime = trace.stat().st_mtime
        runs[trace.parent] = max(runs.get(trace.parent, 0.0), mtime)
    return sorted(runs, key=lambda run: (runs[run], run.name))


def _walk_traces(root: Path) -> list[Path]:
    """Trace files anywhere under `root`, without following directory links.

    Iterative: `Path.rglob` recurses once per directory level and fails
    with `RecursionError` on trees about 1,000 levels deep.
    """
    found: list[Path] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except PermissionError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.name.endswith(TRACE_SUFFIX):
                found.append(Path(entry.path))
    return found


def find_trace_files(
    path: str | os.PathLike[str], *, all_runs: bool = False
) -> list[Path]:
    """Resolves a user-given path to the trace files to analyze.

    Args:
        path: An `.xplane.pb` file, a run directory holding one file per
            host, or a log directory holding runs under
            `plugins/profile/`.
        all_runs: With a log directory, return the traces of every run
            instead of only the newest run. Defaults to `False`.

    Returns:
        Trace file paths, sorted by run (oldest first) then host name.

    Raises:
        TraceNotFoundError: If the path does not exist or holds no trace.
        ValueError: If `path` is not a str or `os.PathLike`.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(
            "`path` must be an .xplane.pb file, a run directory or a log directory "
            f"(a str or os.PathLike). Received: path={path!r}"
        )
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.exists():
        raise TraceNotFoundError(f"No such file or directory: {str(p)!r}.")
    if not p.is_dir():
        raise TraceNotFoundError(
            f"Expected an .xplane.pb file or a directory. Received: {str(p)!r}."
        )
    runs = find_run_dirs(p)
    if not runs:
        raise TraceNotFoundError(
            f"No *{TRACE_SUFFIX} trace found under {str(p)!r}. Traces are "
            "written to <log_dir>/plugins/profile/<run>/<host>.xplane.pb."
        )
    selected = runs if all_runs else runs[-1:]
    return [
        f
        for run in selected
        for f in sorted(run.glob("*" + TRACE_SUFFIX))
        if f.is_file()
    ]


def _check_trace_file(path: str | os.PathLike[str], max_bytes: int) -> int:
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


def _read_trace(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """Reads a trace file's bytes after checking it exists and fits the cap."""
    _check_trace_file(path, max_bytes)
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TraceError(f"Cannot read trace file {str(path)!r}: {e}") from None


def load_xspace(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
) -> Any:
    """Reads one `.xplane.pb` file into an `XSpace` message.

    Args:
        path: Path of the trace file.
        max_bytes: Refuse files larger than this many bytes. Defaults to
            `DEFAULT_MAX_TRACE_BYTES` (1 GiB).

    Returns:
        The parsed `xplane_pb2.XSpace` message.

    Raises:
        ValueError: If `max_bytes` is not a positive integer.
        TraceNotFoundError: If the file does not exist.
        TraceTooLargeError: If the file is larger than `max_bytes`.
        TraceParseError: If the bytes are not an XSpace with a host or
            device plane (empty, truncated, random bytes, another message
            type).
    """
    return parse_xspace(_read_trace(path, max_bytes), source=str(path))


def open_xspace(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
) -> Any:
    """Opens one `.xplane.pb` file for analysis without reading its events.

    A fully parsed XSpace takes about 5-6 times the file size in memory.
    This reader walks the file's protobuf framing instead: it parses each
    plane's metadata and notes where its lines lie in the file; the lines
    are read later, one at a time (`iter_lines`), or in slices of their
    events (`keras_xla_guard.analyze_xspace`), so memory stays far below
    the file size. Nothing of the file is held in memory between reads.

    Args:
        path: Path of the trace file.
        max_bytes: Refuse files larger than this many bytes. Defaults to
            `DEFAULT_MAX_TRACE_BYTES` (1 GiB).

    Returns:
        An XSpace-like object for `keras_xla_guard.analyze_xspace`: its
        `planes` have `name`, `id`, `event_metadata`, `stat_metadata` and
        `stats` as in `XPlane`; read their lines with `iter_lines`.

    Raises:
        ValueError: If `max_bytes` is not a positive integer.
        TraceNotFoundError: If the file does not exist.
        TraceTooLargeError: If the file is larger than `max_bytes`.
        TraceParseError: If the bytes are not an XSpace with a host or
            device plane. Lines that turn out not to decode raise it later,
            when they are read.

    Example:

    ```python
    from keras_xla_guard.trace.xplane import iter_lines, open_xspace
    space = open_xspace("logs/plugins/profile/run/host.xplane.pb")
    for plane in space.planes:
        for line in iter_lines(plane):
            print(plane.name, line.name, len(line.events))
    ```
    """
    source = str(path)
    size = _check_trace_file(path, max_bytes)
    planes = []
    with trace_errors(source), _TraceFile(path, size) as f:
        for number, wire, _, start, stop in iter_fields(f, 0, size):
            if number == 1 and wire == 2:
                planes.append(_read_plane(f, start, stop, source))
    space = _LazySpace(planes)
    _check_planes(space, source)
    return space


class _TraceFile:
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

    def __enter__(self) -> "_TraceFile":
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


def _read_plane(f: _TraceFile, start: int, stop: int, source: str) -> "_LazyPlane":
    """Parses a plane's metadata and notes where its lines are."""
    runs: list[list[int]] = []
    lines: list[tuple[int, int]] = []
    for number, wire, field_start, value_start, field_stop in iter_fields(f, start, stop):
        if number == 3 and wire == 2:
            lines.append((value_start, field_stop))
        elif runs and runs[-1][1] == field_start:
            runs[-1][1] = field_stop
        else:
            runs.append([field_start, field_stop])
    meta = _decode(xplane_pb2().XPlane, b"".join(f.read(a, b) for a, b in runs), source)
    return _LazyPlane(meta, f.path, f.size, lines, source)


class _LazySpace(NamedTuple):
    """What `open_xspace` returns: planes whose lines are still in the file."""

    planes: list["_LazyPlane"]


class _LazyPlane:
    """An XPlane's metadata, parsed, and where its lines lie in the file."""

    __slots__ = ("name", "id", "event_metadata", "stat_metadata", "stats",
                 "path", "size", "line_spans", "source")

    def __init__(self, meta: Any, path: Any, size: int, line_spans: list[tuple[int, int]],
                 source: str) -> None:
        self.name: str = meta.name
        self.id: int = meta.id
        # The containers keep `meta` alive.
        self.event_metadata = meta.event_metadata
        self.stat_metadata = meta.stat_metadata
        self.stats = meta.stats
        self.path = path
        self.size = size
        self.line_spans = line_spans
        self.source = source


def iter_lines(
    plane: Any, *, source: str = "<trace>", indices: Collection[int] | None = None
) -> Iterator[Any]:
    """Yields a plane's lines, reading those of an `open_xspace` plane one by one.

    Args:
        plane: An `XPlane` of a parsed XSpace or of `open_xspace`.
        source: Name used in error messages. Defaults to `"<trace>"`.
        indices: Only the lines at these positions, in plane order; the
            others of an `open_xspace` plane are not read. Defaults to
            `None` (every line).

    Yields:
        `XLine` messages. Drop each line before asking for the next to keep
        memory low.

    Raises:
        TraceParseError: If a lazily read line does not decode, or its
            first event names undefined metadata.
    """
    if not isinstance(plane, _LazyPlane):
        if indices is None:
            yield from plane.lines
        else:
            yield from (line for i, line in enumerate(plane.lines) if i in indices)
        return
    xline = xplane_pb2().XLine
    for index, (start, stop) in enumerate(plane.line_spans):
        if indices is not None and index not in indices:
            continue
        with trace_errors(source), _TraceFile(plane.path, plane.size) as f:
            data = f.read(start, stop)
        line = _decode(xline, data, source)
        del data
        if line.events:
            _check_metadata(plane, line.events[0], source)
        yield line


def read_line_chunks(
    plane: "_LazyPlane", span: tuple[int, int], header: list[bytes], source: str
) -> Iterator[tuple[bytes, list[int]]]:
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
        `data` of their tags, in file order.

    Raises:
        TraceParseError: If the line breaks the wire format.
    """
    start, stop = span
    with trace_errors(source), _TraceFile(plane.path, plane.size) as f:
        pos, want = start, _CHUNK_BYTES
        while pos < stop:
            end = min(stop, pos + want)
            data = f.read(pos, end)
            last = end == stop
            used, heads, need = _frame_events(data, last, header)
            if not used:
                # One field larger than the slice: read it whole.
                want = max(want, need)
                continue
            pos += used
            if heads:
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


def _frame_events(data: bytes, last: bool, header: list[bytes]) -> tuple[int, list[int], int]:
    """Splits `data` (part of a line) into whole fields.

    Returns how many bytes held whole fields, the positions of the event
    fields among them (the other fields go to `header`), and, when not
    even one field fit, the size needed.
    """
    heads: list[int] = []
    add = heads.append
    tag = EVENT_TAG
    n = len(data)
    # Events under 128 bytes starting before `fast` end inside `data`.
    fast = n - 130
    # Leave room for any tag and length unless this is the line's end.
    limit = n if last else n - 24
    i = 0
    while True:
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
                return i, heads, end - i
            add(i)
            i = end
            continue
        try:
            for _, _, _, _, end in iter_fields(data, i, n):
                break
        except WireError:
            if last:
                raise
            # A field longer than the slice (or cut by its end): read more.
            return i, heads, 2 * n
        header.append(data[i:end])
        i = end
    return i, heads, 0


def _check_planes(space: Any, source: str) -> None:
    if not space.planes:
        raise TraceParseError(
            f"{source} decoded to an XSpace without planes: not a TF profiler "
            "trace, or an empty one."
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


def _check_metadata(plane: Any, event: Any, source: str) -> None:
    if event.metadata_id and event.metadata_id not in plane.event_metadata:
        # Dangling references mean the bytes were something else that
        # happened to decode; analysis would be meaningless.
        raise TraceParseError(
            f"{source} is not a consistent XSpace trace: event metadata id "
            f"{event.metadata_id} is undefined in plane {plane.name!r}."
        )


def _decode(cls: Any, data: bytes, source: str) -> Any:
    from google.protobuf.message import DecodeError

    message = cls()
    try:
        message.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise TraceParseError(
            f"{source} is not a valid XSpace trace (protobuf decode failed: {e})."
        ) from None
    return message


def parse_xspace(data: bytes, *, source: str = "<bytes>") -> Any:
    """Parses serialized bytes into an `XSpace` and checks its shape.

    Args:
        data: The serialized message.
        source: Name used in error messages. Defaults to `"<bytes>"`.

    Returns:
        The parsed `xplane_pb2.XSpace` message.

    Raises:
        TraceParseError: If the bytes do not decode to an XSpace with a
            host or device plane.
    """
    space = _decode(xplane_pb2().XSpace, data, source)
    _check_planes(space, source)
    for plane in space.planes:
        for line in plane.lines:
            if line.events:
                _check_metadata(plane, line.events[0], source)
    return space
