"""A guard's run as one HTML page: the page's parts taken from a live engine.

`output/html/` renders run data into a page; this module gathers that
data from an `XlaGuardEngine` (its reports and signatures, or in a
multi-worker run every worker's run file) with the sentence saying how the
run ended, and writes the file. The callback and the loop guard call it
for `write_html` and `html_report=`.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from keras_xla_guard._version import __version__
from keras_xla_guard.errors import XlaGuardWarning
from keras_xla_guard.output.html import render_html
from keras_xla_guard.output.runfile import RunData, find_compare, find_run_files, read_run_file, write_page
from keras_xla_guard.runtime.engine import XlaGuardEngine

__all__ = ["exit_reason", "write_html_at_end", "write_run_html"]


def exit_reason(engine: XlaGuardEngine) -> str:
    """How the engine's run ended (or where it is), in one sentence for the page.

    Args:
        engine: The guard's engine.

    Returns:
        Whether training ran to its end, was stopped by the guard
        (`on_violation="stop"`) or ended with `RecompilationLimitError`,
        and the violation's message if there was one.
    """
    violation = f": {engine.violation}" if engine.violation else ""
    if engine.stop_requested:
        return f"Training was stopped by the guard (on_violation='stop'){violation}"
    if engine.violation and engine.config.on_violation == "raise":
        return f"Training ended with RecompilationLimitError{violation}"
    if not engine.ended:
        where = f" (epoch {engine.epoch})" if engine.epoch is not None else ""
        return f"Written while training was still running{where}." + (
            f" Warned: {engine.violation}" if engine.violation else ""
        )
    if engine.violation:
        return f"Training ran to its end after a warning{violation}"
    return "Training ran to its end."


def write_run_html(
    engine: XlaGuardEngine,
    path: str | os.PathLike[str],
    *,
    compare: Any = None,
    title: str = "keras-xla-guard report",
) -> Path:
    """Writes the engine's run as one self-contained HTML file.

    The page needs no network and no other file: the verdict and how
    the run ended at the top, XLA coverage per profiled epoch (plot),
    the top ops outside XLA by self time with their layer (bar chart),
    compilations over the run's steps with the new signatures and their
    explanations (timeline), the expected compilations of each function
    (train, test, predict) and its calls, the signatures table, the `compare` result
    when given, and in a multi-worker run one section per worker, read
    from the workers' run files under `log_dir` (docs/html-report.md).
    The plots need the `html` extra (matplotlib).

    Args:
        engine: The guard's engine.
        path: The HTML file to write.
        compare: A `CompareReport` (or its `to_dict()`) to include.
            Defaults to `None`: the result `compare` saved in this
            `log_dir`, if there is one.
        title: The page title. Defaults to `"keras-xla-guard report"`.

    Returns:
        The path written.

    Raises:
        MissingDependencyError: If matplotlib is not installed
            (`pip install "keras-xla-guard[html]"`).
        OSError: If the file cannot be written.
    """
    log_dir = engine.config.log_dir
    if compare is None:
        compare = find_compare(log_dir)
    reports = engine.reports
    if engine.trace_dir != log_dir:
        sections = [read_run_file(f) for f in find_run_files(log_dir)]
    else:
        sections = [RunData.of("", reports, engine.signatures, engine.calls, engine.compilations)]
    page = render_html(
        sections,
        exit_reason=exit_reason(engine),
        compare=compare if compare is None or isinstance(compare, dict) else compare.to_dict(),
        title=title,
        source=os.fspath(log_dir),
        tool_version=__version__,
    )
    return write_page(path, page)


def write_html_at_end(engine: XlaGuardEngine, worker: Any = None) -> None:
    """Writes `config.html_report`, if set, as a run ends; never raises.

    Args:
        engine: The guard's engine, its run ended.
        worker: This process's `WorkerInfo` in a multi-worker run: only
            the chief writes. Defaults to `None` (a single worker).
    """
    path = engine.config.html_report
    if path is None or (worker is not None and not worker.is_chief):
        return
    try:
        write_run_html(engine, path)
    except Exception as e:  # noqa: BLE001 - the run's figures are already saved
        warnings.warn(
            f"keras-xla-guard: writing the HTML report {os.fspath(path)!r} failed: {type(e).__name__}: {e}",
            XlaGuardWarning,
            stacklevel=3,
        )
