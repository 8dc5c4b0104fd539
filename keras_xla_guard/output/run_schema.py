"""The run file's layout: its name, its version and the check every read passes.

Like a TensorBoard plugin's `metadata.py`, this module holds what the run
file's writer and reader (`output/runfile.py`) must agree on: the file
name, the layout version the writer stamps, and `check_run_file`, which a
file must pass before anything renders it. A run file is data from disk
(another version, a half-written copy, a hand edit): every field any output
reads is checked for its type and range here, so a bad one is one
`RunFileError` naming the file and the field, never a crash further on.
Pure: no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from keras_xla_guard.errors import RunFileError
from keras_xla_guard.runtime.compile_log import COUNTED, FUNCTIONS, OTHER, PREDICTED, WARM_UP
from keras_xla_guard.trace.report import CoverageReport, MeasuredFigures

__all__ = ["MAX_RUN_FILE_BYTES", "RUN_FILE", "RUN_FILE_VERSION", "check_compare", "check_run_file"]

RUN_FILE = "xla_guard_reports.json"
# The layout `save_run_file` writes and `read_run_file` reads: 1 added the
# `version` key, and a report's `compile_time_s` became wall-clock (the sum
# of its compile table's rows), the thread-summed figure moving to
# `compile_thread_time_s`; 2 added `calls` (the test and predict functions'
# calls) and each signature figure's `function`; 3 records every epoch's
# compilations on every backend (`compilations`, each epoch's `source`:
# counted as they happened, or one per new input signature, whose
# `compile_s` is `None` where no window timed it) and the `warm_up`
# function's. A file without a version is version 0; an older file reads
# with no calls, and its compilations (JAX's only) as counted.
RUN_FILE_VERSION = 3
# A run file holds a few kB per epoch; one this large is not one.
MAX_RUN_FILE_BYTES = 256 << 20
# Counts and steps beyond 2**53 have no exact JSON number, and durations
# beyond 1e9 s (31 years) no measurement: both are refused, so that no
# output meets an infinite or unrepresentable figure.
_MAX_INT = 2**53
_MAX_SECONDS = 1e9
_EPOCH_KEY = re.compile(r"[0-9]{1,15}")
# The figures an `ok` report must hold (every output shows them, through
# `CoverageReport.measured()`).
_OK_FIGURES = tuple(f.name for f in dataclasses.fields(MeasuredFigures))

_Check = Callable[[Any, str], Any]


class _Bad(Exception):
    """One field's problem, raised inside the check and reported with the file."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem)
        self.field, self.problem = field, problem


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(field: str, expected: str, value: Any) -> _Bad:
    return _Bad(field, f"expected {expected}, got {_shown(value)}")


def _optional(check: _Check) -> _Check:
    def optional(value: Any, field: str) -> Any:
        return None if value is None else check(value, field)

    return optional


def _str(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise _fail(field, "a string", value)
    return value


def _bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(field, "true or false", value)
    return value


def _int(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= _MAX_INT:
        raise _fail(field, f"an integer from 0 to {_MAX_INT}", value)
    return value


def _number(low: float, high: float) -> _Check:
    def number(value: Any, field: str) -> float:
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            raise _fail(field, f"a number from {low:g} to {high:g}", value)
        return value

    return number


_seconds = _number(0.0, _MAX_SECONDS)
_fraction = _number(0.0, 1.0)
_offset = _number(-_MAX_SECONDS, _MAX_SECONDS)
_unix_time = _number(0.0, 1e11)


def _list(item: _Check) -> _Check:
    def items(value: Any, field: str) -> list[Any]:
        if not isinstance(value, list):
            raise _fail(field, "a list", value)
        return [item(v, f"{field}[{i}]") for i, v in enumerate(value)]

    return items


def _object(fields: Mapping[str, _Check], required: tuple[str, ...] = (), strict: bool = False) -> _Check:
    """An object whose known keys pass their checks; `strict` refuses other keys."""

    def obj(value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _fail(field, "an object", value)

        def at(key: str) -> str:
            return f"{field}.{key}" if field else key

        for key in required:
            if key not in value:
                raise _Bad(at(key), "missing")
        if strict:
            unknown = sorted(k for k in value if k not in fields)
            if unknown:
                raise _Bad(at(unknown[0]), "not a field of this object")
        return {k: fields[k](v, at(k)) if k in fields else v for k, v in value.items()}

    return obj


def _names(item: _Check) -> _Check:
    """An object of any string keys, each value passing `item`."""

    def names(value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _fail(field, "an object", value)
        return {k: item(v, f"{field}[{k!r}]") for k, v in value.items()}

    return names


_strings = _list(_str)
_EXPLANATION = _object(
    {
        "kind": _str,
        "message": _str,
        "severity": _str,
        "input": _optional(_str),
        "dim": _optional(_int),
        "values": _list(_optional(_int)),
        "step": _optional(_int),
        "fix_code": _str,
    },
    required=("kind", "message"),
    strict=True,
)
_SIGNATURE = _object(
    {"paths": _strings, "shapes": _list(_optional(_list(_optional(_int)))), "dtypes": _strings},
    required=("paths", "shapes", "dtypes"),
)
_OP = _object(
    {"op_type": _str, "op_name": _str, "self_time_s": _seconds, "count": _int, "layer": _optional(_str)},
    required=("op_type", "op_name", "self_time_s", "count"),
    strict=True,
)
_PROGRAM = _object(
    {"program": _str, "runs": _int, "time_s": _seconds, "per_op": _bool},
    required=("program", "runs", "time_s"),
    strict=True,
)


def _one_of(*allowed: str) -> _Check:
    def one_of(value: Any, field: str) -> str:
        if value not in allowed:
            raise _fail(field, f"one of {list(allowed)}", value)
        return str(value)

    return one_of


_STEP = _object(
    {
        "step": _int,
        "wall_s": _seconds,
        "busy_s": _seconds,
        "idle_s": _seconds,
        "launches": _int,
        "transfer_s": _optional(_seconds),
    },
    required=("step", "wall_s", "busy_s", "idle_s", "launches"),
    strict=True,
)
_DEVICE = _object(
    {
        "device": _str,
        "host": _optional(_str),
        "xla_time_s": _seconds,
        "xla_run_span_s": _seconds,
        "non_xla_op_time_s": _seconds,
        "xla_time_fraction": _fraction,
        "launches": _int,
        "transfer_time_s": _seconds,
        "collective_time_s": _seconds,
    },
    required=("device", "xla_time_s", "non_xla_op_time_s", "xla_time_fraction", "launches"),
    strict=True,
)
_QUALITY = _object(
    {"code": _str, "detail": _str, "cost": _str, "remedy": _str},
    required=("code", "detail", "cost", "remedy"),
    strict=True,
)
_COMPILE = _object(
    {
        "program": _str,
        "module": _str,
        "start_s": _optional(_offset),
        "compile_s": _optional(_seconds),
        "cache_hit": _bool,
        "step": _optional(_int),
        "signature": _optional(_str),
    },
    required=("program",),
    strict=True,
)
_COMPILATION = _object(
    {
        "function": _one_of(*FUNCTIONS, WARM_UP, OTHER),
        "program": _str,
        "epoch": _optional(_int),
        "step": _optional(_int),
        "trace_s": _optional(_seconds),
        "lower_s": _optional(_seconds),
        "compile_s": _optional(_seconds),
        "cache_hit": _bool,
        "signature": _optional(_str),
    },
    required=("function", "program"),
    strict=True,
)
# An epoch's compilations, optional in any version (before 3, JAX's counted ones only).
_EPOCH_COMPILATIONS = _object(
    {"epoch": _int, "source": _one_of(COUNTED, PREDICTED), "rows": _list(_COMPILATION)},
    required=("epoch", "rows"),
)
_REPORT = _object(
    {
        "status": _str,
        "reason": _str,
        "epoch": _optional(_int),
        "steps_profiled": _optional(_int),
        "window_wall_s": _optional(_seconds),
        "trace_paths": _strings,
        "hosts": _strings,
        "time_base": _str,
        "xla_time_s": _optional(_seconds),
        "non_xla_op_time_s": _optional(_seconds),
        "xla_time_fraction": _optional(_fraction),
        "xla_executions": _optional(_int),
        "compilations": _optional(_int),
        "compile_time_s": _optional(_seconds),
        "compile_thread_time_s": _optional(_seconds),
        "transfer_time_s": _optional(_seconds),
        "collective_time_s": _optional(_seconds),
        "xla_run_span_s": _optional(_seconds),
        "devices": _list(_DEVICE),
        "totals": _optional(_str),
        "programs": _list(_PROGRAM),
        "top_xla_ops": _list(_OP),
        # `null`: the trace held no step marker (steps unknown).
        "steps": _optional(_list(_STEP)),
        "trace_quality": _list(_QUALITY),
        "compiled_modules": _strings,
        "top_non_xla_ops": _list(_OP),
        "input_pipeline_time_s": _optional(_seconds),
        "eager_overhead_s": _optional(_seconds),
        "eager_op_time_s": _optional(_seconds),
        "tracing_time_s": _optional(_seconds),
        "guard_op_time_s": _optional(_seconds),
        "notes": _strings,
        "distinct_signatures": _optional(_int),
        "new_signatures": _optional(_int),
        "expected_compilations": _optional(_int),
        "signature_explanations": _list(_EXPLANATION),
        "signatures_unavailable": _optional(_str),
        "compile_table": _list(_COMPILE),
        "cache_hits": _optional(_int),
        "persistent_cache": _optional(_str),
        "backend": _optional(_str),
        "trace_path": _optional(_str),
    },
    required=("status",),
)


def _signature_figures(epoch: _Check) -> _Check:
    """`EpochSignatures.to_dict()`'s layout, with `epoch` checked by `epoch`."""
    return _object(
        {
            "epoch": epoch,
            "steps": _int,
            "distinct_signatures": _int,
            "new_signatures": _int,
            "expected_compilations": _optional(_int),
            "compilations_so_far": _int,
            "short_last_batch": _bool,
            "explanations": _list(_EXPLANATION),
            "signatures": _list(_SIGNATURE),
            "new": _list(
                _object({"signature": _SIGNATURE, "step": _optional(_int)}, required=("signature",))
            ),
            "function": _one_of(*FUNCTIONS),
        },
        required=("epoch", "steps", "distinct_signatures", "new_signatures", "compilations_so_far"),
    )


_EPOCH_SIGNATURES = _signature_figures(_int)
_CALL = _object(
    {
        "function": _one_of("test", "predict"),
        "call": _int,
        "epoch": _optional(_int),
        "kind": _one_of("validation", "evaluate", "predict"),
        "signatures": _optional(_signature_figures(_optional(_int))),
        "signatures_unavailable": _optional(_str),
        "compilations": _optional(_list(_COMPILATION)),
    },
    required=("function", "call"),
    strict=True,
)
_TOP = _object(
    {"version": _int, "worker": _optional(_str), "saved_at": _optional(_unix_time)}, required=("reports",)
)


def _report(value: Any, field: str) -> dict[str, Any]:
    checked = _REPORT(value, field)
    if checked["status"] == "ok":
        for name in _OK_FIGURES:
            if checked.get(name) is None:
                raise _Bad(f"{field}.{name}", "missing from a measured (ok) report")
    # Every output reads the complete layout, defaults included.
    return CoverageReport.from_dict(checked).to_dict()


def _report_v0(value: Any, field: str) -> dict[str, Any]:
    """A version-0 report in today's layout: its thread-summed compile time renamed.

    Version 0 wrote the compile time summed over threads as `compile_time_s`
    (it could exceed the window); its compile table's rows were already
    wall-clock, so their sum is the figure `compile_time_s` means now.
    """
    checked = _REPORT(value, field)
    if checked["status"] == "ok" and "compile_thread_time_s" not in checked:
        compiled = [row for row in checked.get("compile_table", ()) if not row.get("cache_hit")]
        checked = {
            **checked,
            "compile_thread_time_s": checked.get("compile_time_s"),
            "compile_time_s": sum(row.get("compile_s") or 0.0 for row in compiled),
        }
    return _report(checked, field)


def _by_epoch(value: Any, field: str, check: _Check) -> list[dict[str, Any]]:
    """An object epoch -> entry, each entry's own `epoch` equal to its key; in epoch order."""
    if not isinstance(value, dict):
        raise _fail(field, "an object of epochs", value)
    entries = []
    for key, entry in value.items():
        if not isinstance(key, str) or not _EPOCH_KEY.fullmatch(key):
            raise _Bad(f"{field}[{_shown(key)}]", "expected an epoch number as the key")
        where = f"{field}[{key!r}]"
        checked = check(entry, where)
        if checked.get("epoch") != int(key):
            raise _Bad(f"{where}.epoch", f"expected {int(key)}, its key, got {_shown(checked.get('epoch'))}")
        entries.append((int(key), checked))
    return [entry for _, entry in sorted(entries, key=lambda item: item[0])]


def check_run_file(data: Any, where: str) -> dict[str, Any]:
    """Checks a parsed run file and returns its normalized content.

    Args:
        data: The file's parsed JSON.
        where: The file's path, for the error.

    Returns:
        `{"version", "worker", "saved_at", "reports", "signatures", "calls",
        "compilations"}`: the version (`0` when the file has none), the
        worker's name or `None`, the save time or `None`, the reports (each
        completed to `CoverageReport.to_dict()`'s layout) and signature
        figures as lists in epoch order, the test and predict calls in
        order (`[]` before version 2), and the epochs' counted compilations
        (JAX; `[]` when the file has none).

    Raises:
        RunFileError: If a field is missing, of the wrong type or out of
            range, or the file is of a newer version: one line naming the
            file and the field.
    """
    try:
        top = _TOP(data, "(top level)")
        version = top.get("version", 0)
        if version > RUN_FILE_VERSION:
            raise _Bad(
                "version",
                f"{version} is newer than this keras-xla-guard reads (up to "
                f"{RUN_FILE_VERSION}); read it with the version that wrote it",
            )
        reports = _by_epoch(top["reports"], "reports", _report if version >= 1 else _report_v0)
        signatures = top.get("signatures")
        stats = [] if signatures is None else _by_epoch(signatures, "signatures", _EPOCH_SIGNATURES)
        calls = _list(_CALL)(top.get("calls", []), "calls")
        counted = top.get("compilations")
        compilations = [] if counted is None else _by_epoch(counted, "compilations", _EPOCH_COMPILATIONS)
    except _Bad as bad:
        raise RunFileError(f"{where!r} is not a readable run file: {bad.field}: {bad.problem}") from None
    return {
        "version": version,
        "worker": top.get("worker"),
        "saved_at": top.get("saved_at"),
        "reports": reports,
        "signatures": stats,
        "calls": calls,
        "compilations": compilations,
    }


# What the HTML page reads of a `compare` result (`CompareReport.to_dict()`,
# saved as `<log_dir>/compare/compare_report.json` or printed by
# `compare --json`); other keys pass unchecked.
_COMPARE = _object(
    {
        "modes": _names(
            _object(
                {
                    "step_time_s": _seconds,
                    "startup_s": _seconds,
                    "compilations": _int,
                    "compile_time_s": _seconds,
                    "peak_memory_bytes": _optional(_int),
                },
                required=("step_time_s", "startup_s", "compilations", "compile_time_s"),
            )
        ),
        "projected_run_s": _names(_seconds),
        "planned_steps": _optional(_int),
        "verdict": _str,
    },
    required=("modes", "verdict"),
)


def check_compare(data: Any, where: str) -> dict[str, Any]:
    """Checks a parsed `compare` result before anything renders it.

    Args:
        data: The file's parsed JSON.
        where: The file's path, for the error.

    Returns:
        `data`, every field the HTML page reads checked.

    Raises:
        ValueError: If a field is missing or of the wrong type: one line
            naming the file and the field.
    """
    try:
        if not isinstance(data, dict):
            raise _fail("(top level)", "an object", data)
        return _COMPARE(data, "")
    except _Bad as bad:
        raise ValueError(f"{where!r} is not a saved compare result: {bad.field}: {bad.problem}") from None
