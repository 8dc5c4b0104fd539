"""Find and load XSpace (`*.xplane.pb`) traces written by the TF profiler.

TensorFlow ships the `XSpace` protobuf bindings as
`tensorflow/tsl/profiler/protobuf/xplane_pb2.py`, but importing them the usual
way runs `tensorflow/__init__.py` first (several seconds, and all of TF). The
bindings themselves only need `google.protobuf`, so when TensorFlow is not yet
imported we load that one generated module straight from TensorFlow's install
directory. The descriptors it registers are identical to the ones TensorFlow
registers later, which protobuf accepts.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

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
    "load_xspace",
    "xplane_pb2",
]

TRACE_SUFFIX = ".xplane.pb"
# 2 GiB is protobuf's own hard limit for one message; stay well below it so a
# runaway trace fails fast with a clear message instead of exhausting memory.
DEFAULT_MAX_TRACE_BYTES = 1 << 30

_XPLANE_MODULE = "tensorflow.tsl.profiler.protobuf.xplane_pb2"
_xplane_pb2: ModuleType | None = None


def xplane_pb2() -> ModuleType:
    """Returns TensorFlow's generated `xplane_pb2` module.

    Returns:
        The module that defines `XSpace`, `XPlane`, `XLine` and `XEvent`.

    Raises:
        ImportError: If TensorFlow is not installed.
    """
    global _xplane_pb2
    if _xplane_pb2 is not None:
        return _xplane_pb2
    if "tensorflow" in sys.modules or _XPLANE_MODULE in sys.modules:
        _xplane_pb2 = importlib.import_module(_XPLANE_MODULE)
        return _xplane_pb2
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "keras-xla-guard reads traces with TensorFlow's xplane_pb2 "
            "bindings, but TensorFlow is not installed. Install it with "
            "`pip install 'keras-xla-guard[cpu]'` (or `[gpu]`)."
        )
    root = Path(next(iter(spec.submodule_search_locations)))
    path = root / "tsl" / "profiler" / "protobuf" / "xplane_pb2.py"
    if not path.is_file():
        _xplane_pb2 = importlib.import_module(_XPLANE_MODULE)
        return _xplane_pb2
    module_spec = importlib.util.spec_from_file_location(
        "keras_xla_guard._xplane_pb2", path
    )
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    _xplane_pb2 = module
    return module


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
    for trace in Path(log_dir).rglob("*" + TRACE_SUFFIX):
        if not trace.is_file():
            continue
        mtime = trace.stat().st_mtime
        runs[trace.parent] = max(runs.get(trace.parent, 0.0), mtime)
    return sorted(runs, key=lambda run: (runs[run], run.name))


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
    """
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
        TraceParseError: If the bytes are not an XSpace with at least one
            plane (empty, truncated, random bytes, another message type).
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ValueError(
            f"`max_bytes` must be a positive integer. Received: max_bytes={max_bytes!r}"
        )
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
        data = p.read_bytes()
    except OSError as e:
        raise TraceError(f"Cannot read trace file {str(p)!r}: {e}") from None
    return parse_xspace(data, source=str(p))


def parse_xspace(data: bytes, *, source: str = "<bytes>") -> Any:
    """Parses serialized bytes into an `XSpace` and checks its shape.

    Args:
        data: The serialized message.
        source: Name used in error messages. Defaults to `"<bytes>"`.

    Returns:
        The parsed `xplane_pb2.XSpace` message.

    Raises:
        TraceParseError: If the bytes do not decode to an XSpace with at
            least one plane.
    """
    from google.protobuf.message import DecodeError

    space = xplane_pb2().XSpace()
    try:
        space.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise TraceParseError(
            f"{source} is not a valid XSpace trace (protobuf decode failed: {e})."
        ) from None
    if not space.planes:
        raise TraceParseError(
            f"{source} decoded to an XSpace without planes: not a TF profiler "
            "trace, or an empty one."
        )
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                if event.metadata_id not in plane.event_metadata and event.metadata_id:
                    # Dangling references mean the bytes were something else
                    # that happened to decode; analysis would be meaningless.
                    raise TraceParseError(
                        f"{source} is not a consistent XSpace trace: event "
                        f"metadata id {event.metadata_id} is undefined in "
                        f"plane {plane.name!r}."
                    )
                break
    return space
