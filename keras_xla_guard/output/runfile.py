"""A run's figures as JSON in its log dir, and the HTML page written from them.

Every guard leaves `xla_guard_reports.json` beside its traces: the
`RunFileSink` of a single-worker run writes it in `log_dir`, and each
worker of a multi-worker run writes its own in `log_dir/<worker>/`
(`distributed.ClusterSink`). The file holds each profiled epoch's
`CoverageReport` and each epoch's `EpochSignatures` as `to_dict()` gives
them, so `keras-xla-guard report LOG_DIR --html` can show what TensorBoard
shows, signatures and explanations included, without a TensorFlow import.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from keras_xla_guard.output.html import HtmlSection
from keras_xla_guard.runtime.sink import EpochRecord
from keras_xla_guard.signatures.tracker import EpochSignatures
from keras_xla_guard.trace.report import CoverageReport

__all__ = [
    "COMPARE_FILE",
    "REPORTS_FILE",
    "RunFileSink",
    "find_compare",
    "find_run_files",
    "read_run_file",
    "save_run_file",
    "write_page",
]

REPORTS_FILE = "xla_guard_reports.json"
# `compare` saves its result here, under `<log_dir>/compare/` (beside its
# TensorBoard summaries, `comparison.runner.COMPARE_SUBDIR`).
COMPARE_FILE = "compare_report.json"


def save_run_file(
    directory: str | os.PathLike[str],
    reports: Mapping[int, CoverageReport],
    signatures: Mapping[int, EpochSignatures],
    worker: str | None = None,
) -> Path:
    """Rewrites `directory/xla_guard_reports.json` atomically (rename into place).

    Args:
        directory: The run's (or the worker's) directory.
        reports: Reports keyed by epoch.
        signatures: Signature figures keyed by epoch.
        worker: The worker's name in a multi-worker run. Defaults to `None`.

    Returns:
        The file's path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / REPORTS_FILE
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    data = {
        "worker": worker,
        "saved_at": time.time(),
        "reports": {str(e): r.to_dict() for e, r in sorted(reports.items())},
        "signatures": {str(e): s.to_dict() for e, s in sorted(signatures.items())},
    }
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
    return path


def read_run_file(path: str | os.PathLike[str]) -> HtmlSection:
    """Reads a run file as the page's section of that run (or worker).

    Args:
        path: The file, or the directory holding it.

    Returns:
        An `HtmlSection` named after the file's worker (`""` for a
        single-worker run), its reports and signatures in epoch order.

    Raises:
        OSError: If the file cannot be read.
        ValueError: If it is not a keras-xla-guard run file.
    """
    path = Path(path)
    if path.is_dir():
        path = path / REPORTS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{os.fspath(path)!r} is not a keras-xla-guard run file ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("reports"), dict):
        raise ValueError(f"{os.fspath(path)!r} is not a keras-xla-guard run file")
    signatures = data.get("signatures") or {}
    return HtmlSection(
        str(data.get("worker") or ""),
        tuple(data["reports"][k] for k in sorted(data["reports"], key=int)),
        tuple(signatures[k] for k in sorted(signatures, key=int)),
    )


def find_run_files(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The run files of a log dir: its own, else one per worker directory.

    Args:
        log_dir: A guard's log dir.

    Returns:
        `log_dir/xla_guard_reports.json` if it exists, else the
        `log_dir/*/xla_guard_reports.json` of a multi-worker run in name
        order; `[]` when there is none.
    """
    log_dir = Path(log_dir)
    own = log_dir / REPORTS_FILE
    if own.is_file():
        return [own]
    return sorted(p for p in log_dir.glob(f"*/{REPORTS_FILE}") if p.is_file())


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
    except json.JSONDecodeError as e:
        raise ValueError(f"{os.fspath(path)!r} is not a saved compare result ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("modes"), dict) or "verdict" not in data:
        raise ValueError(f"{os.fspath(path)!r} is not a saved compare result")
    return data


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

    Args:
        directory: The run's log dir.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._reports: dict[int, CoverageReport] = {}
        self._signatures: dict[int, EpochSignatures] = {}
        self._lock = threading.Lock()

    def write_epoch(self, record: EpochRecord) -> None:
        """Adds (or replaces) one epoch's report and signature figures, and saves."""
        with self._lock:
            if record.report is not None:
                self._reports[record.epoch] = record.report
            if record.signatures is not None:
                self._signatures[record.epoch] = record.signatures
            self._save()

    def close(self, records: Mapping[int, EpochRecord]) -> None:
        """Nothing: every record is saved as it comes.

        A run that measured nothing leaves no file, as it leaves no event file.
        """

    def _save(self) -> None:
        save_run_file(self.directory, self._reports, self._signatures)
