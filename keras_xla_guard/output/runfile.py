"""The run file: one reader and one writer of `xla_guard_reports.json`.

Every guard leaves a run file, `xla_guard_reports.json`, beside its
traces: the `RunFileSink` of a single-worker run writes it in `log_dir`,
and each worker of a multi-worker run writes its own in
`log_dir/<worker>/` (`distributed.ClusterSink`, through `save_run_file`).
It holds each profiled epoch's `CoverageReport`, each epoch's
`EpochSignatures` and each test or predict call's `CallRecord` (`fit`'s
validations, and `evaluate`/`predict` calls the guard was passed to, which
are added to the file already in `log_dir`) as `to_dict()` gives them, so `keras-xla-guard report
LOG_DIR --html`, the chief of a multi-worker run and
`distributed.worker_coverage` read what TensorBoard shows without a
TensorFlow import. Everything that reads it goes through `read_run_file`
into a `RunData`; everything that writes it goes through `save_run_file`.

The file's layout, name and version live in `run_schema.py` (a TensorBoard
plugin's `metadata.py` habit), which both sides import: the writer stamps
`RUN_FILE_VERSION`; the reader checks every field against the layout, reads
a file without a version (written before versions: version 0, the same
layout) and refuses a newer one by name.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keras_xla_guard.errors import RunFileError
from keras_xla_guard.output.run_schema import (
    MAX_RUN_FILE_BYTES,
    RUN_FILE,
    RUN_FILE_VERSION,
    check_compare,
    check_run_file,
)
from keras_xla_guard.runtime.compile_log import EpochCompilations
from keras_xla_guard.runtime.sink import INCOMPLETE, CallRecord, EpochRecord
from keras_xla_guard.signatures.tracker import EpochSignatures
from keras_xla_guard.trace.report import CoverageReport

__all__ = [
    "COMPARE_FILE",
    "RUN_FILE",
    "RUN_FILE_VERSION",
    "RunData",
    "RunFileSink",
    "find_compare",
    "find_run_files",
    "incomplete_windows",
    "read_run_file",
    "save_run_file",
    "worker_run_files",
    "write_page",
]

# `compare` saves its result here, under `<log_dir>/compare/` (beside its
# TensorBoard summaries, `output.compare_summaries.COMPARE_SUBDIR`).
COMPARE_FILE = "compare_report.json"


@dataclass(frozen=True)
class RunData:
    """One run's figures (or one worker's), as its run file holds them.

    What every reader of run files gets, whatever it renders: the HTML
    page, the multi-worker chief, `distributed.worker_coverage`.

    Attributes:
        name: The worker's name, e.g. `"worker_1"`; `""` for a
            single-worker run.
        reports: `CoverageReport.to_dict()` of each profiled epoch (or of
            each analyzed trace), in order.
        signatures: `EpochSignatures.to_dict()` of each epoch with
            observed steps, in order; empty when not tracked.
        saved_at: When the file was written (`time.time()`); `None` when
            the figures did not come from a file.
        compilations: `EpochCompilations.to_dict()` of each epoch whose
            compilations the backend counted (JAX), in order; empty
            otherwise.
        version: The run file's schema version; `0` for a file written
            before versions.
        calls: `CallRecord.to_dict()` of each call of the test and predict
            functions (validations, `evaluate`, `predict`), in order; empty
            before version 2 or when none was tracked.
    """

    name: str
    reports: tuple[Mapping[str, Any], ...] = ()
    signatures: tuple[Mapping[str, Any], ...] = ()
    saved_at: float | None = None
    version: int = RUN_FILE_VERSION
    calls: tuple[Mapping[str, Any], ...] = ()
    compilations: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(
        cls,
        name: str,
        reports: Iterable[Any],
        signatures: Iterable[Any] = (),
        calls: Iterable[Any] = (),
        compilations: Iterable[Any] = (),
    ) -> RunData:
        """Builds run data from `CoverageReport`s, `EpochSignatures`, `CallRecord`s and `EpochCompilations` (or dicts).

        Args:
            name: The worker's name; `""` for a single-worker run.
            reports: The reports, in order (a dict keyed by epoch gives its
                values in epoch order).
            signatures: The epochs' signature figures, in order. Defaults to
                `()`.
            calls: The test and predict calls, in order. Defaults to `()`.
            compilations: The epochs' counted compilations, in order.
                Defaults to `()`.

        Returns:
            The `RunData`.
        """

        def as_dicts(items: Iterable[Any]) -> tuple[Mapping[str, Any], ...]:
            if isinstance(items, Mapping):
                items = [items[k] for k in sorted(items)]
            return tuple(i if isinstance(i, Mapping) else i.to_dict() for i in items)

        return cls(
            name,
            as_dicts(reports),
            as_dicts(signatures),
            calls=as_dicts(calls),
            compilations=as_dicts(compilations),
        )

    def coverage_reports(self) -> dict[int, CoverageReport]:
        """The reports of the run's epochs as `CoverageReport`s, keyed by epoch."""
        return {
            int(r["epoch"]): CoverageReport.from_dict(dict(r))
            for r in self.reports
            if r.get("epoch") is not None
        }


def save_run_file(
    directory: str | os.PathLike[str],
    reports: Mapping[int, CoverageReport | Mapping[str, Any]],
    signatures: Mapping[int, EpochSignatures | Mapping[str, Any]],
    worker: str | None = None,
    calls: Iterable[CallRecord | Mapping[str, Any]] = (),
    compilations: Mapping[int, EpochCompilations | Mapping[str, Any]] | None = None,
) -> Path:
    """Rewrites `directory/xla_guard_reports.json` atomically (rename into place).

    Args:
        directory: The run's (or the worker's) directory.
        reports: Reports keyed by epoch (or their `to_dict()`).
        signatures: Signature figures keyed by epoch (or their `to_dict()`).
        worker: The worker's name in a multi-worker run. Defaults to `None`.
        calls: The test and predict calls, in order (or their
            `to_dict()`). Defaults to `()`.
        compilations: Counted compilations keyed by epoch (JAX), or their
            `to_dict()`. Defaults to `None` (none).

    Returns:
        The file's path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RUN_FILE
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    data = {
        "version": RUN_FILE_VERSION,
        "worker": worker,
        "saved_at": time.time(),
        "reports": {str(e): _as_dict(r) for e, r in sorted(reports.items())},
        "signatures": {str(e): _as_dict(s) for e, s in sorted(signatures.items())},
        "calls": [_as_dict(c) for c in calls],
    }
    if compilations:
        data["compilations"] = {str(e): _as_dict(c) for e, c in sorted(compilations.items())}
    try:
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except BaseException:
        # A full disk leaves no half-written file behind (the one in place stays whole).
        tmp.unlink(missing_ok=True)
        raise
    return path


def _as_dict(item: Any) -> Mapping[str, Any]:
    return item if isinstance(item, Mapping) else item.to_dict()


def read_run_file(path: str | os.PathLike[str]) -> RunData:
    """Reads and checks a run file (any version up to `RUN_FILE_VERSION`).

    Every field any output shows is checked (`run_schema.check_run_file`)
    before it is returned, so what comes back renders.

    Args:
        path: The file, or the directory holding it.

    Returns:
        Its `RunData`, named after the file's worker (`""` for a
        single-worker run), reports and signatures in epoch order, calls in
        order.

    Raises:
        OSError: If the file cannot be read.
        RunFileError: If it is not JSON, larger than `MAX_RUN_FILE_BYTES`,
            nested too deep, of a newer version, or a field has the wrong
            type: one line naming the file and the field.
    """
    path = Path(path)
    if path.is_dir():
        path = path / RUN_FILE
    where = os.fspath(path)
    size = path.stat().st_size
    if size > MAX_RUN_FILE_BYTES:
        raise RunFileError(
            f"{where!r} is not a readable run file: {size} bytes, more than the "
            f"{MAX_RUN_FILE_BYTES} a run file may hold"
        )
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except RecursionError:
        raise RunFileError(
            f"{where!r} is not a readable run file: its JSON is nested deeper than any run file"
        ) from None
    except (UnicodeDecodeError, ValueError) as e:
        # ValueError: not JSON, or an integer too long to convert.
        raise RunFileError(f"{where!r} is not a readable run file: not JSON ({e})") from None
    checked = check_run_file(data, where)
    return RunData(
        str(checked["worker"] or ""),
        tuple(checked["reports"]),
        tuple(checked["signatures"]),
        checked["saved_at"],
        checked["version"],
        tuple(checked["calls"]),
        tuple(checked["compilations"]),
    )


def worker_run_files(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The run files of a multi-worker run's workers, `log_dir/*/xla_guard_reports.json`, in name order.

    Args:
        log_dir: The `log_dir` all workers were given.

    Returns:
        The files; `[]` when there is none.
    """
    return sorted(p for p in Path(log_dir).glob(f"*/{RUN_FILE}") if p.is_file())


def find_run_files(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The run files of a log dir: its own, else one per worker directory.

    Args:
        log_dir: A guard's log dir.

    Returns:
        `log_dir/xla_guard_reports.json` if it exists, else the
        `log_dir/*/xla_guard_reports.json` of a multi-worker run in name
        order; `[]` when there is none.
    """
    own = Path(log_dir) / RUN_FILE
    if own.is_file():
        return [own]
    return worker_run_files(log_dir)


def incomplete_windows(log_dir: str | os.PathLike[str]) -> dict[str, CoverageReport]:
    """The profile runs of a log dir whose window did not complete, as its run file says.

    A guard saves a window that training left (an exception, a worker of
    the cluster gone) as an `incomplete` report naming its partial trace;
    that trace is not a measurement.

    Args:
        log_dir: A guard's log dir (or a worker's directory in it): the
            one holding `plugins/profile/<run>/`.

    Returns:
        Profile run directory name (`<time>_epoch<N>`) -> the guard's
        `incomplete` report of it; `{}` without a run file.

    Raises:
        OSError: If the run file cannot be read.
        RunFileError: If it is not a readable run file.
    """
    path = Path(log_dir) / RUN_FILE
    if not path.is_file():
        return {}
    return {
        Path(trace).parent.name: report
        for report in read_run_file(path).coverage_reports().values()
        if report.status == INCOMPLETE
        for trace in report.trace_paths
    }


def find_compare(log_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The `compare` result saved in a log dir, if there is one.

    Args:
        log_dir: The log dir `compare` was given (`log_dir=`, `--log-dir`).

    Returns:
        `CompareReport.to_dict()` as `compare` saved it in
        `<log_dir>/compare/compare_report.json`, or `None`.

    Raises:
        ValueError: If the file is not a saved compare result.
    """
    path = Path(log_dir) / "compare" / COMPARE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError(f"{os.fspath(path)!r} is not a saved compare result (nested too deep)") from None
    except ValueError as e:
        raise ValueError(f"{os.fspath(path)!r} is not a saved compare result ({e})") from None
    return check_compare(data, os.fspath(path))


def write_page(path: str | os.PathLike[str], page: str) -> Path:
    """Writes an HTML page (UTF-8), creating its directory.

    Args:
        path: Where.
        page: The document, as `output.html.render_html` returns it.

    Returns:
        The path written.
    """
    path = Path(path)
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


class RunFileSink:
    """The engine's `ReportSink` that keeps the run file up to date.

    Rewrites `<directory>/xla_guard_reports.json` whenever an epoch's
    record comes in, so the file is there even when training ends early.
    A new run (`fit`) starts a new file; an `evaluate` or `predict` call
    outside `fit` (`write_call`) is added to the file already there, so
    the calls after a `fit` land beside its epochs.

    Args:
        directory: The run's log dir.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        # What a warning about a failed write names (`runtime/failures.py`).
        self.what = (
            f"the run file {os.fspath(self.directory / RUN_FILE)!r} (read by `keras-xla-guard report` "
            "and the HTML report)"
        )
        self._reports: dict[int, CoverageReport | Mapping[str, Any]] = {}
        self._signatures: dict[int, EpochSignatures | Mapping[str, Any]] = {}
        self._calls: list[CallRecord | Mapping[str, Any]] = []
        self._written = False
        self._compilations: dict[int, EpochCompilations | Mapping[str, Any]] = {}
        self._lock = threading.Lock()

    def write_epoch(self, record: EpochRecord) -> None:
        """Adds (or replaces) one epoch's report, signature figures and validation calls, and saves."""
        with self._lock:
            if record.report is not None:
                self._reports[record.epoch] = record.report
            if record.signatures is not None:
                self._signatures[record.epoch] = record.signatures
            if record.compilations is not None:
                self._compilations[record.epoch] = record.compilations
            self._calls.extend(record.calls)
            self._save()

    def write_call(self, record: CallRecord) -> None:
        """Adds an `evaluate` or `predict` call to the run file in the directory, and saves.

        A sink that has written nothing yet (the call came outside a run)
        first takes over the file already there, if it reads; one that
        does not read is replaced.
        """
        with self._lock:
            if not self._written and (self.directory / RUN_FILE).is_file():
                try:
                    existing = read_run_file(self.directory)
                except (OSError, RunFileError):
                    existing = None
                if existing is not None and not existing.name:
                    self._reports = {
                        int(r["epoch"]): r for r in existing.reports if r.get("epoch") is not None
                    }
                    self._signatures = {int(s["epoch"]): s for s in existing.signatures}
                    self._calls = list(existing.calls)
                    self._compilations = {int(c["epoch"]): c for c in existing.compilations}
            self._calls.append(record)
            self._save()

    def close(self, records: Mapping[int, EpochRecord]) -> None:
        """Nothing: every record is saved as it comes.

        A run that measured nothing leaves no file, as it leaves no event file.
        """

    def _save(self) -> None:
        save_run_file(
            self.directory,
            self._reports,
            self._signatures,
            calls=self._calls,
            compilations=self._compilations,
        )
        self._written = True
