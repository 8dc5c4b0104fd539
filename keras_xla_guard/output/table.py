"""Compact text tables of coverage reports, for the command line."""

from __future__ import annotations

from collections.abc import Sequence

from keras_xla_guard.trace._text import format_ms
from keras_xla_guard.trace.findings import split_findings
from keras_xla_guard.trace.report import CoverageReport

__all__ = ["coverage_table", "format_ms", "printable", "text_table"]

_HEADER = (
    "run",
    "host",
    "XLA share",
    "XLA time",
    "plain ops",
    "launches",
    "compiles",
    "compile time",
    "compile, summed over threads",
    "input",
    "device transfers",
    "top op outside XLA",
)
# Text columns are left-aligned, numbers right-aligned.
_LEFT = (True, True, False, False, False, False, False, False, False, False, False, True)


def printable(text: str) -> str:
    """Escapes the characters of `text` a terminal would not just print.

    Names in a trace are arbitrary strings: a control sequence in one
    (e.g. `"\\x1b]0;title\\x07"`) would retitle or clear the terminal, and a
    newline would forge a table row. Each non-printable character is
    written as its Python escape (`\\x1b`, `\\n`, `\\u202e`); the bytes of
    a file name that did not decode (surrogate escapes, e.g. under
    `LANG=C`) are written as `\\xNN` each.

    Args:
        text: Any text.

    Returns:
        `text` with every non-printable character escaped.
    """
    if text.isprintable():
        return text
    return "".join(_escape(c) for c in text)


def _escape(char: str) -> str:
    if char.isprintable():
        return char
    if "\udc80" <= char <= "\udcff":
        return f"\\x{ord(char) - 0xDC00:02x}"
    return char.encode("unicode_escape").decode("ascii")


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: Sequence[bool]) -> str:
    """Lays out cells in aligned columns separated by two spaces.

    Args:
        header: Column titles.
        rows: Rows of cells, each as long as `header`.
        left: Per column, `True` to left-align, `False` to right-align.

    Returns:
        The table, one line per row after the header, no trailing spaces
        and no trailing newline. Non-printable characters in cells are
        escaped (see `printable`).

    Raises:
        ValueError: If a row or `left` is not as long as `header`.

    Example:

    ```python
    from keras_xla_guard.output.table import text_table
    print(text_table(["op", "ms"], [["MatMul", "1.5"]], [True, False]))
    ```
    """
    width = len(header)
    if len(left) != width:
        raise ValueError(f"`left` must have {width} entries. Received: left={list(left)!r}")
    for row in rows:
        if len(row) != width:
            raise ValueError(f"Every row must have {width} cells. Received: row={list(row)!r}")
    table = [[printable(str(cell)) for cell in row] for row in [header, *rows]]
    widths = [max(len(r[i]) for r in table) for i in range(width)]
    lines = []
    for row in table:
        cells = [cell.ljust(w) if is_left else cell.rjust(w) for cell, w, is_left in zip(row, widths, left)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _top_op(report: CoverageReport) -> str:
    """The biggest plain op, if it is a finding: below the noise floor it is no lead (`trace.findings`)."""
    split = split_findings(
        report.top_non_xla_ops[:1],
        lambda op: op.self_time_s,
        report.xla_time_s or 0.0,
        report.non_xla_op_time_s or 0.0,
    )
    if not split.findings:
        return "-"
    op = split.findings[0]
    return f"{op.op_type} ({format_ms(op.self_time_s)})"


def _row(run: str, host: str, report: CoverageReport) -> list[str]:
    if not report.ok:
        # Measured nothing (e.g. an incomplete window): no figure to show.
        return [run, host, report.status, *["-"] * (len(_HEADER) - 3)]
    figures = report.measured()
    return [
        run,
        host,
        # A share that is 100% by construction (every step one XLA program: JAX) is no figure.
        "n/a (JAX)" if report.backend == "jax" else f"{figures.xla_time_fraction:.1%}",
        format_ms(figures.xla_time_s),
        format_ms(figures.non_xla_op_time_s),
        str(figures.xla_executions),
        str(figures.compilations),
        format_ms(figures.compile_time_s),
        "-" if report.compile_thread_time_s is None else format_ms(report.compile_thread_time_s),
        format_ms(figures.input_pipeline_time_s),
        "-" if report.transfer_time_s is None else format_ms(report.transfer_time_s),
        _top_op(report),
    ]


def coverage_table(
    runs: Sequence[tuple[str, Sequence[CoverageReport], CoverageReport]],
) -> str:
    """Formats reports as one table: a row per host and a combined row per run.

    Args:
        runs: `(run name, per-host reports, combined report)` for each run.
            The combined row is shown only for runs with several hosts.

    Returns:
        The table as text, without a trailing newline.

    Example:

    ```python
    from keras_xla_guard import analyze_trace
    from keras_xla_guard.output.table import coverage_table
    report = analyze_trace("logs/xla_guard")
    print(coverage_table([("latest", [report], report)]))
    ```
    """
    rows: list[list[str]] = []
    for run, hosts, combined in runs:
        for report in hosts:
            host = ", ".join(report.hosts) or "-"
            rows.append(_row(run, host, report))
        if len(hosts) > 1:
            rows.append(_row(run, f"all {len(hosts)} hosts", combined))
    return text_table(_HEADER, rows, _LEFT)
