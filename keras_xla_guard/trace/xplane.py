"""Find and load XSpace (`*.xplane.pb`) traces written by the TF profiler.

The `XSpace` protobuf bindings are TensorFlow's own `xplane_pb2`, loaded
without importing all of TensorFlow (see `keras_xla_guard.seam.tf_internals`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from keras_xla_guard._checks import check_int
from keras_xla_guard.seam.tf_internals import xplane_pb2
from keras_xla_guard.errors import (
    TraceError,
    TraceNotFoundError,
    TraceParseError,
    TraceTooLargeError,
)

__all__ = [
    "DEFAULT_MAX_TRACE_BYTES",
    "TRACE_SUFFIX",
    "find_run_dirs",
    "find_trace_files",
    "host_of",
    "iter_lines",
    "load_xspace",
    "open_xspace",
    "xplane_pb2",
]

TRACE_SUFFIX = ".xplane.pb"
# 2 GiB is protobuf's own hard limit for one message; stay well below it so a
# runaway trace fails fast with a clear message instead of exhausting memory.
DEFAULT_MAX_TRACE_BYTES = 1 << 30

# Events parsed at once when a line is read lazily: large enough that the
# per-chunk cost vanishes, small enough that a chunk's memory does not count.
_CHUNK_EVENTS = 8192
_LAZY_PACKAGE = "keras_xla_guard.lazy"
_lazy_classes: tuple[Any, Any, Any] | None = None


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


def _read_trace(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """Reads a trace file's bytes after checking it exists and fits the cap."""
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
    try:
        return p.read_bytes()
    except OSError as e:
        raise TraceError(f"Cannot read trace file {str(p)!r}: {e}") from None


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
    """Reads one `.xplane.pb` file for analysis, keeping its events serialized.

    A fully parsed XSpace takes about 5-6 times the file size in memory.
    This reader keeps each line serialized; `iter_lines` then parses one
    line at a time, its events a chunk at a time, so peak memory stays near
    the file size plus 3-4 times its largest line.

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
            from `iter_lines`.

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
    space_cls, _, _ = _lazy_message_classes()
    space = _decode(space_cls, _read_trace(path, max_bytes), source)
    _check_planes(space, source)
    # Take the lines' bytes out and let the parsed message (whose arena holds
    # another copy of them) go: memory then holds them once.
    return _LazySpace([_LazyPlane(plane) for plane in space.planes])


class _LazySpace(NamedTuple):
    """What `open_xspace` returns: planes whose lines are still serialized."""

    planes: list["_LazyPlane"]


class _LazyPlane:
    """An XPlane's metadata, parsed, and its lines, serialized."""

    __slots__ = ("name", "id", "event_metadata", "stat_metadata", "stats", "line_bytes")

    def __init__(self, plane: Any) -> None:
        self.line_bytes: list[bytes] = list(plane.lines)
        del plane.lines[:]
        meta = type(plane)()
        meta.CopyFrom(plane)
        self.name: str = meta.name
        self.id: int = meta.id
        # The containers keep `meta` alive.
        self.event_metadata = meta.event_metadata
        self.stat_metadata = meta.stat_metadata
        self.stats = meta.stats


def iter_lines(plane: Any, *, source: str = "<trace>") -> Iterator[Any]:
    """Yields a plane's lines, parsing the lines of an `open_xspace` plane lazily.

    Args:
        plane: An `XPlane` of a parsed XSpace or of `open_xspace`.
        source: Name used in error messages. Defaults to `"<trace>"`.

    Yields:
        Objects with the `XLine` fields `name` and `events`. For a lazily
        read plane, `events` decodes chunk by chunk while it is iterated;
        drop each line before asking for the next to keep memory low.

    Raises:
        TraceParseError: If a lazily read line does not decode, or its
            first event names undefined metadata.
    """
    if not isinstance(plane, _LazyPlane):
        yield from plane.lines
        return
    for data in plane.line_bytes:
        yield _LazyLine(data, plane, source)


class _LazyLine:
    """One line of an `open_xspace` plane; its events decode chunk by chunk."""

    __slots__ = ("name", "timestamp_ns", "events")

    def __init__(self, data: bytes, plane: Any, source: str) -> None:
        _, line_cls, _ = _lazy_message_classes()
        line = _decode(line_cls, data, source)
        self.name: str = line.name
        self.timestamp_ns: int = line.timestamp_ns
        self.events = _LazyEvents(line.events, plane, source)


class _LazyEvents:
    """A line's serialized events, iterable (as `XEvent`s) any number of times."""

    __slots__ = ("_raw", "_plane", "_source")

    def __init__(self, raw: Any, plane: Any, source: str) -> None:
        self._raw = raw
        self._plane = plane
        self._source = source

    def __len__(self) -> int:
        return len(self._raw)

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(self._chunks())

    def _chunks(self) -> Iterator[Any]:
        _, line_cls, xline_cls = _lazy_message_classes()
        raw = self._raw
        for i in range(0, len(raw), _CHUNK_EVENTS):
            # Re-serializing a slice of the events with protobuf itself gives
            # the wire form of an XLine holding just those events.
            chunk = line_cls()
            chunk.events.extend(raw[i : i + _CHUNK_EVENTS])
            events = _decode(xline_cls, chunk.SerializeToString(), self._source).events
            if i == 0:
                _check_metadata(self._plane, events[0], self._source)
            yield events


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


def _lazy_message_classes() -> tuple[Any, Any, Any]:
    """Returns (lazy XSpace, lazy XLine, real XLine) message classes.

    The lazy twins come from TensorFlow's own `xplane.proto` descriptor,
    copied into a private pool under another package, with `XPlane.lines`
    and `XLine.events` retyped as `bytes` (the wire format of an embedded
    message and of bytes is the same, so the twins read the same files).
    """
    global _lazy_classes
    if _lazy_classes is not None:
        return _lazy_classes
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    real = xplane_pb2()
    proto = descriptor_pb2.FileDescriptorProto()
    real.DESCRIPTOR.CopyToProto(proto)
    old_prefix = f".{proto.package}."
    proto.name = "keras_xla_guard/lazy_xplane.proto"
    proto.package = _LAZY_PACKAGE
    messages = list(proto.message_type)
    while messages:
        message = messages.pop()
        messages.extend(message.nested_type)
        for f in message.field:
            if f.type_name.startswith(old_prefix):
                f.type_name = f".{_LAZY_PACKAGE}." + f.type_name[len(old_prefix):]
            if (message.name, f.name) in (("XPlane", "lines"), ("XLine", "events")):
                f.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                f.ClearField("type_name")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    classes = message_factory.GetMessages([proto], pool=pool)
    _lazy_classes = (
        classes[f"{_LAZY_PACKAGE}.XSpace"],
        classes[f"{_LAZY_PACKAGE}.XLine"],
        real.XLine,
    )
    return _lazy_classes


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
