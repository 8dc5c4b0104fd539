"""Find and load XSpace (`*.xplane.pb`) traces written by the TF profiler.

The `XSpace` protobuf bindings are the package's own
(`keras_xla_guard.trace._proto`): reading a trace needs protobuf, not
TensorFlow. Reading a file piece by piece lives in `trace._reader`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from keras_xla_guard.errors import TraceNotFoundError
from keras_xla_guard.trace._proto import xplane_pb2
from keras_xla_guard.trace._reader import (
    LazyPlane,
    LazySpace,
    TraceFile,
    check_metadata,
    check_planes,
    check_trace_file,
    decode,
    read_line_chunks,
    read_plane,
    read_trace,
    trace_errors,
)
from keras_xla_guard.trace._wire import iter_fields

__all__ = [
    "COMPARE_SUBDIR",
    "DEFAULT_MAX_TRACE_BYTES",
    "TRACE_SUFFIX",
    "find_run_dirs",
    "find_trace_files",
    "host_of",
    "iter_lines",
    "load_xspace",
    "open_xspace",
    "parse_xspace",
    "read_line_chunks",
    "stat_index",
    "trace_errors",
    "xplane_pb2",
]

TRACE_SUFFIX = ".xplane.pb"
# 2 GiB is protobuf's own hard limit for one message; stay well below it so a
# runaway trace fails fast with a clear message instead of exhausting memory.
DEFAULT_MAX_TRACE_BYTES = 1 << 30
# `compare` profiles each mode under `<log_dir>/compare/<mode>/plugins/profile/
# <time>_<mode>/`, beside the guard's own runs: a log dir's runs are the
# guard's, so its newest run is never a compare pass.
COMPARE_SUBDIR = "compare"


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
    "newest" means the run written last. The profiles `compare` writes
    below `log_dir` (`compare/<mode>/plugins/profile/<time>_<mode>/`) are
    not the log dir's runs: pass `<log_dir>/compare` (or a mode's
    directory) to list them.

    Args:
        log_dir: A directory to search recursively.

    Returns:
        The run directories, oldest first; empty if there are none.
    """
    runs: dict[Path, float] = {}
    for trace in _walk_traces(Path(log_dir)):
        try:
            if not trace.is_file():
                continue
            mtime = trace.stat().st_mtime
        except FileNotFoundError:
            # A live log dir: the file went (a guard moved or removed it) after the walk saw it.
            continue
        runs[trace.parent] = max(runs.get(trace.parent, 0.0), mtime)
    return sorted(runs, key=lambda run: (runs[run], run.name))


def _walk_traces(root: Path) -> list[Path]:
    """Trace files anywhere under `root`, without following directory links.

    Iterative: `Path.rglob` recurses once per directory level and fails
    with `RecursionError` on trees about 1,000 levels deep. A directory that
    cannot be read, or that went away since its parent was listed (a guard
    still writing the log dir moves its staged runs), holds nothing.
    """
    found: list[Path] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except (PermissionError, FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != COMPARE_SUBDIR or not _holds_compare_runs(Path(entry.path)):
                    stack.append(Path(entry.path))
            elif entry.name.endswith(TRACE_SUFFIX):
                found.append(Path(entry.path))
    return found


def _holds_compare_runs(directory: Path) -> bool:
    """Whether `directory` (named `compare`) holds `compare`'s profiles: `<mode>/plugins/profile/<time>_<mode>/`."""
    try:
        modes = [entry for entry in os.scandir(directory) if entry.is_dir(follow_symlinks=False)]
        for mode in modes:
            profile = Path(mode.path) / "plugins" / "profile"
            if profile.is_dir() and any(run.name.endswith(f"_{mode.name}") for run in profile.iterdir()):
                return True
    except OSError:
        return False
    return False


def find_trace_files(path: str | os.PathLike[str], *, all_runs: bool = False) -> list[Path]:
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
        raise TraceNotFoundError(f"Expected an .xplane.pb file or a directory. Received: {str(p)!r}.")
    runs = find_run_dirs(p)
    if not runs:
        compared = p / COMPARE_SUBDIR
        hint = (
            f" Only compare's profiles are there, which are not a log dir's runs: pass {str(compared)!r} "
            "to read them."
            if _holds_compare_runs(compared)
            else ""
        )
        raise TraceNotFoundError(
            f"No *{TRACE_SUFFIX} trace found under {str(p)!r}. Traces are "
            f"written to <log_dir>/plugins/profile/<run>/<host>.xplane.pb.{hint}"
        )
    selected = runs if all_runs else runs[-1:]
    return [f for run in selected for f in sorted(run.glob("*" + TRACE_SUFFIX)) if f.is_file()]


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
    return parse_xspace(read_trace(path, max_bytes), source=str(path))


def open_xspace(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_TRACE_BYTES,
) -> Any:
    """Opens one `.xplane.pb` file for analysis without reading its events.

    A fully parsed XSpace takes about 5-6 times the file size in memory.
    This reader walks the file's protobuf framing instead: it notes where
    each plane's lines and metadata lie in the file and reads its name and
    id. A plane's metadata is parsed when first used (the analysis never
    uses `/host:metadata`, which holds every compiled program's HLO); the
    lines are read later, one at a time (`iter_lines`), or in slices of
    their events (`keras_xla_guard.analyze_xspace`), so memory stays far
    below the file size. Nothing else of the file is held in memory
    between reads.

    Args:
        path: Path of the trace file.
        max_bytes: Refuse files larger than this many bytes. Defaults to
            `DEFAULT_MAX_TRACE_BYTES` (1 GiB).

    Returns:
        An XSpace-like object for `keras_xla_guard.analyze_xspace`: its
        `planes` have `name`, `id`, `event_metadata`, `stat_metadata` and
        `stats` as in `XPlane`; read their lines with `iter_lines`. Its
        `errors` and `warnings` are the XSpace's.

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
    size = check_trace_file(path, max_bytes)
    planes = []
    # XSpace fields 2 and 3: the profiler's errors and warnings.
    notes: dict[int, list[str]] = {2: [], 3: []}
    with trace_errors(source), TraceFile(path, size) as f:
        for number, wire, _, start, stop in iter_fields(f, 0, size):
            if number == 1 and wire == 2:
                planes.append(read_plane(f, start, stop, source))
            elif number in notes and wire == 2:
                notes[number].append(f.read(start, stop).decode("utf-8", "replace"))
    space = LazySpace(planes, tuple(notes[2]), tuple(notes[3]))
    check_planes(space, source)
    return space


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
    if not isinstance(plane, LazyPlane):
        if indices is None:
            yield from plane.lines
        else:
            yield from (line for i, line in enumerate(plane.lines) if i in indices)
        return
    xline = xplane_pb2().XLine
    for index, (start, stop) in enumerate(plane.line_spans):
        if indices is not None and index not in indices:
            continue
        with trace_errors(source), TraceFile(plane.path, plane.size) as f:
            data = f.read(start, stop)
        line = decode(xline, data, source)
        del data
        if line.events:
            check_metadata(plane, line.events[0], source)
        yield line


def stat_index(plane: Any) -> dict[str, int]:
    """Maps each stat metadata name of a plane to its id.

    Every reader of a plane's stats goes through this map or the scan's
    `find_stat_ids`, which agree: a name that a (hand-edited) trace defines
    twice gets its lowest id in both, so no two figures of one report read
    different stats.

    Args:
        plane: An `XPlane` of a parsed XSpace or of `open_xspace`.

    Returns:
        A dict of stat name -> metadata id, a name given twice mapped to
        its lowest id.
    """
    # Keys then lookups: a third faster than `.items()`, which protobuf's
    # maps serve through `collections.abc`, and a plane may define
    # thousands of stats (every string a `ref_value` points to). Highest
    # first, so that a name's lowest id is the one written last.
    metadata = plane.stat_metadata
    return {metadata[mid].name: mid for mid in sorted(metadata, reverse=True)}


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
    space = decode(xplane_pb2().XSpace, data, source)
    check_planes(space, source)
    for plane in space.planes:
        for line in plane.lines:
            if line.events:
                check_metadata(plane, line.events[0], source)
    return space
