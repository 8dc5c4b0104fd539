"""The guard's Markdown for TensorBoard's text dashboard: reports, compile tables, signatures, workers.

Every name from a trace or a user goes through `escape_markdown` (or
`markdown_table`, which escapes each cell), so no op or layer name can
break a table or inject markup. Pure; `output.tensorboard` writes it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from keras_xla_guard.output.compilations import (
    SOURCE_WORDS,
    compilations_headline,
    phase_ms,
    unexplained_note,
)
from keras_xla_guard.output.tensorboard_metadata import device_names
from keras_xla_guard.runtime.compile_log import EpochCompilations
from keras_xla_guard.signatures import EpochSignatures
from keras_xla_guard.trace.findings import NOISE_FLOOR, split_findings
from keras_xla_guard.trace.report import CoverageReport

__all__ = [
    "compilations_markdown",
    "compiles_markdown",
    "escape_markdown",
    "markdown_table",
    "report_markdown",
    "signatures_markdown",
    "signatures_unavailable_markdown",
    "unprofiled_markdown",
    "workers_markdown",
    "worst_worker",
]

# ASCII characters with a meaning in Markdown (Python-Markdown, which
# TensorBoard's text plugin uses, and CommonMark) or in HTML. They become
# numeric character references: those render as the character itself in
# every dialect, whereas a backslash escape is literal text wherever the
# dialect does not define it (Python-Markdown shows `\~` as `\~`).
_MD_SPECIAL = frozenset("\\`*_{}[]()#+-.!|~<>&^=")


def _plain_char(char: str) -> str:
    if char in _MD_SPECIAL:
        return f"&#{ord(char)};"
    # Line and paragraph separators, tabs, control and format characters
    # (bidi overrides, Python-Markdown's STX/ETX placeholders) would end a
    # table row, reorder the text or confuse the renderer.
    if char != " " and (char.isspace() or unicodedata.category(char)[0] in "CZ"):
        return " "
    return char


def escape_markdown(text: str) -> str:
    """Escapes text so Markdown and HTML render it literally, on one line.

    Op and layer names are user-controlled; no name may break a table row,
    start a list or code block, or inject links or markup into TensorBoard's
    text dashboard.

    Args:
        text: Any string.

    Returns:
        The string with Markdown and HTML punctuation and leading or
        trailing spaces as numeric character references (`|` becomes
        `&#124;`), and line breaks, tabs, control and format characters as
        spaces.

    Example:

    ```python
    from keras_xla_guard.output.tensorboard_markdown import escape_markdown

    escape_markdown("dense|1")  # 'dense&#124;1', shown as dense|1
    ```
    """
    escaped = "".join(map(_plain_char, text))
    # Leading spaces would start a code block and two trailing ones a line
    # break when the text begins or ends a line.
    body = escaped.strip(" ")
    if not body:
        return "&#32;" * len(escaped)
    lead = len(escaped) - len(escaped.lstrip(" "))
    trail = len(escaped) - len(escaped.rstrip(" "))
    return "&#32;" * lead + body + "&#32;" * trail


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Renders a Markdown table with every cell escaped.

    Args:
        header: Column titles. A title ending in `":"` is right-aligned (the
            colon is not shown).
        rows: One sequence of cell values per row, as many as `header`;
            values are converted with `str`.

    Returns:
        The table as Markdown lines joined with `"\\n"`.

    Raises:
        ValueError: If a row has a different number of cells than `header`.

    Example:

    ```python
    from keras_xla_guard.output.tensorboard_markdown import markdown_table

    print(markdown_table(["op", "ms:"], [["MatMul", "1.5"]]))
    ```
    """
    titles = [h[:-1] if h.endswith(":") else h for h in header]
    align = ["---:" if h.endswith(":") else "---" for h in header]
    lines = [
        "| " + " | ".join(escape_markdown(t) for t in titles) + " |",
        "|" + "|".join(align) + "|",
    ]
    for row in rows:
        cells = [str(c) for c in row]
        if len(cells) != len(header):
            raise ValueError(f"Each row needs {len(header)} cells. Received: row={list(row)!r}")
        lines.append("| " + " | ".join(escape_markdown(c) for c in cells) + " |")
    return "\n".join(lines)


def _jax_report_markdown(report: CoverageReport) -> str:
    """A JAX window: how busy the programs kept the device, per step, launches, compilations, why no coverage."""
    from keras_xla_guard.trace._text import JAX_COVERAGE_NOTE, jax_busy

    steps = f" over {report.steps_profiled} steps" if report.steps_profiled is not None else ""
    busy = jax_busy(report)
    share = (
        f"XLA programs kept the device {100 * busy[0]:.1f}% busy**{steps} (host {busy[1] * 1e3:.2f} ms "
        "between programs, compiles aside)"
        if busy is not None
        else f"XLA programs ran**{steps}"
    )
    figures = report.measured()
    totals = f" ({report.totals_label})" if report.totals_label else ""
    parts = [
        f"**JAX window: {share}; {figures.xla_executions} program launches{totals}, {figures.compilations} "
        f"compilation(s), {figures.compile_time_s * 1e3:.1f} ms.",
    ]
    if len(report.devices) > 1:
        parts += ["", *_devices_markdown(report)]
    if report.steps:
        parts += [
            "",
            markdown_table(
                ["step:", "wall (ms):", "busy (ms):", "host gap (ms):", "launches:"],
                (
                    [
                        s.step,
                        f"{s.wall_s * 1e3:.2f}",
                        f"{s.busy_s * 1e3:.2f}",
                        f"{s.idle_s * 1e3:.2f}",
                        s.launches,
                    ]
                    for s in report.steps
                ),
            ),
        ]
    for note in (JAX_COVERAGE_NOTE, *report.notes):
        parts += ["", f"- {escape_markdown(note)}"]
    return "\n".join(parts)


def _devices_markdown(report: CoverageReport) -> list[str]:
    """The per-device table of a report that sums several devices (empty for one)."""
    if len(report.devices) < 2:
        return []
    return [
        markdown_table(
            [
                "device",
                "XLA share:",
                "XLA time (ms):",
                "run span (ms):",
                "plain ops (ms):",
                "launches:",
                "transfers (ms):",
            ],
            (
                [
                    name,
                    f"{100 * d.xla_time_fraction:.1f}%",
                    f"{d.xla_time_s * 1e3:.3f}",
                    f"{d.xla_run_span_s * 1e3:.3f}",
                    f"{d.non_xla_op_time_s * 1e3:.3f}",
                    d.launches,
                    f"{d.transfer_time_s * 1e3:.3f}",
                ]
                for d, name in zip(report.devices, device_names(report))
            ),
        ),
        "",
    ]


def _ms_clause(seconds: float | None, template: str) -> str:
    """`template` with the figure in ms; `""` for a figure the report has not got."""
    return "" if seconds is None else template.format(seconds * 1e3)


def report_markdown(report: CoverageReport) -> str:
    """Renders a report as Markdown: a headline and the top non-XLA ops.

    Args:
        report: The report to render.

    Returns:
        Markdown text for TensorBoard's Text dashboard.
    """
    if report.status != "ok":
        return f"**XLA coverage: {escape_markdown(report.status)}** - {escape_markdown(report.reason)}"
    if report.backend == "jax":
        return _jax_report_markdown(report)
    steps = f" over {report.steps_profiled} steps" if report.steps_profiled is not None else ""
    transfers = _ms_clause(report.transfer_time_s, "; {:.2f} ms device transfers, not counted")
    # A report read back from a run file may lack the thread-summed time.
    thread = _ms_clause(report.compile_thread_time_s, ", {:.1f} ms summed over threads")
    figures = report.measured()
    totals = f", {report.totals_label}" if report.totals_label else ""
    span = _ms_clause(report.xla_run_span_s, "; XLA runs spanned {:.2f} ms, idle gaps inside runs included")
    parts = [
        f"**XLA coverage: {100 * figures.xla_time_fraction:.1f}%** of op time{steps} ran inside "
        f"XLA executables ({figures.xla_time_s * 1e3:.2f} ms XLA, "
        f"{figures.non_xla_op_time_s * 1e3:.2f} ms plain TF ops{totals}; "
        f"{figures.compilations} compilation(s), {figures.compile_time_s * 1e3:.1f} ms wall-clock"
        f"{thread}{transfers}{span}).",
        "",
        *_devices_markdown(report),
    ]
    if report.collective_time_s:
        parts += [
            f"Collectives: {report.collective_time_s * 1e3:.2f} ms of device time (XLA time inside "
            "programs, not counted outside).",
            "",
        ]
    if report.programs:
        parts += [
            markdown_table(
                ["XLA program", "device time (ms):", "runs:", "per op"],
                (
                    [
                        p.program,
                        f"{p.time_s * 1e3:.3f}",
                        p.runs,
                        "yes" if p.per_op else "no (command buffers)",
                    ]
                    for p in report.programs
                ),
            ),
            "",
        ]
    if report.top_xla_ops:
        parts += [
            markdown_table(
                ["op inside XLA", "op name", "device time (ms):", "count:"],
                (
                    [op.op_type, op.op_name, f"{op.self_time_s * 1e3:.3f}", op.count]
                    for op in report.top_xla_ops
                ),
            ),
            "",
        ]
    split = split_findings(
        report.top_non_xla_ops, lambda op: op.self_time_s, figures.xla_time_s, figures.non_xla_op_time_s
    )
    below = f"each below {NOISE_FLOOR:.0%} of op time, the noise floor"
    if split.findings:
        # The Keras layer of each op, when the guard knew the model.
        layers = any(op.layer for op in split.findings)
        rows = [
            [
                i,
                op.op_type,
                *([op.layer or "-"] if layers else []),
                op.op_name,
                f"{op.self_time_s * 1e3:.3f}",
                op.count,
            ]
            for i, op in enumerate(split.findings, 1)
        ]
        if split.other_s > 0:
            noise = len(split.findings) < len(report.top_non_xla_ops)
            rows.append(
                [
                    "",
                    "other",
                    *([""] if layers else []),
                    f"other plain ops{f' ({below})' if noise else ''}",
                    f"{split.other_s * 1e3:.3f}",
                    "",
                ]
            )
        parts.append(
            markdown_table(
                ["#", "op type", *(["layer"] if layers else []), "op name", "self time (ms):", "count:"], rows
            )
        )
    elif report.top_non_xla_ops:
        parts.append(
            f"No plain TF op outside XLA is a finding in this window: "
            f"{figures.non_xla_op_time_s * 1e3:.3f} ms of plain ops, {below}."
        )
    else:
        parts.append("No plain TF op ran outside XLA in this window.")
    if report.trace_quality:
        parts += ["", "**Trace quality** (what limits these figures):", ""]
        parts += [
            f"- **{escape_markdown(q.code)}**: {escape_markdown(q.detail)}. Cost: "
            f"{escape_markdown(q.cost)}. For a diagnostic run: {escape_markdown(q.remedy)}."
            for q in report.trace_quality
        ]
    for note in report.notes:
        parts += ["", f"- {escape_markdown(note)}"]
    return "\n".join(parts)


def compiles_markdown(report: CoverageReport) -> str:
    """Renders a report's compile table as Markdown.

    Args:
        report: The report whose `compile_table` to render.

    Returns:
        Markdown: one row per compilation or cache hit.
    """
    hits = f", {report.cache_hits} cache hit(s)" if report.cache_hits is not None else ""
    cache = (
        f"; persistent cache: {escape_markdown(report.persistent_cache)}" if report.persistent_cache else ""
    )
    head = f"**{report.compilations} XLA compilation(s)**{hits}{cache}."
    if not report.compile_table:
        return head
    rows = (
        [
            i,
            c.program or "-",
            "-" if c.step is None else c.step,
            c.signature or "-",
            "-" if c.compile_s is None else f"{c.compile_s * 1e3:.1f}",
            "yes" if c.cache_hit else "no",
        ]
        for i, c in enumerate(report.compile_table, 1)
    )
    return "\n".join(
        [
            head,
            "",
            markdown_table(["#", "program", "step:", "input signature", "compile (ms):", "cache hit"], rows),
        ]
    )


def signatures_markdown(stats: EpochSignatures) -> str:
    """Renders an epoch's (or a call's) input signatures and their explanation as Markdown.

    Args:
        stats: The epoch's signature figures.

    Returns:
        Markdown text: a headline (naming the function when it is not the
        train function), one bullet per explanation and the recommended
        tf.data code as a code block.
    """
    expected = (
        f", {stats.expected_compilations} expected XLA compilation(s) "
        f"({stats.compilations_so_far} for this function so far)"
        if stats.expected_compilations is not None and stats.function != "train"
        else f", {stats.expected_compilations} expected XLA compilation(s)"
        if stats.expected_compilations is not None
        else ""
    )
    of = "" if stats.function == "train" else f" of the {escape_markdown(stats.function)} function"
    parts = [
        f"**Input signatures{of}: {stats.distinct_signatures} distinct, {stats.new_signatures} new** "
        f"over {stats.steps} steps{expected}.",
        "",
    ]
    for finding in stats.explanations:
        parts.append(f"- {escape_markdown(finding.message)}")
        code = finding.fix_code
        if code:
            # Indented code blocks render literally: no escaping, no fence to break.
            # Inside a list item the block needs 8 spaces: with 4, Python-Markdown
            # continues the item as Markdown and `# comment` lines become headings.
            parts += ["", *("        " + c for c in code.splitlines()), ""]
    return "\n".join(parts)


def signatures_unavailable_markdown(reason: str) -> str:
    """Markdown saying an epoch's input signatures could not be recorded, and why.

    Args:
        reason: Why, as the guard's warning says it.

    Returns:
        One Markdown paragraph.
    """
    return (
        "**Input signatures: unavailable** (not 0): "
        f"{escape_markdown(reason)}. Signature counts, expected compilations and the "
        "compilation guards are off for this epoch; `guard.observe(dataset)` records the "
        "batches without Keras internals."
    )


def compilations_markdown(compiled: EpochCompilations) -> str:
    """An epoch's counted compilations as Markdown: the headline, then one row per compilation.

    Args:
        compiled: The epoch's compilations.

    Returns:
        Markdown for TensorBoard's text dashboard (`xla_guard/counted_compilations`).
    """
    source = SOURCE_WORDS.get(compiled.source, compiled.source)
    head = f"**Compilations ({source}): {compilations_headline(compiled)}.**"
    note = unexplained_note(compiled)
    if note is not None:
        head += f"\n\n- {escape_markdown(note)}"
    if not compiled.rows:
        return head
    rows = (
        [
            i,
            row.function,
            row.program,
            "-" if row.step is None else row.step,
            row.signature or "-",
            phase_ms(row.trace_s),
            phase_ms(row.lower_s),
            phase_ms(row.compile_s),
            "yes" if row.cache_hit else "no",
        ]
        for i, row in enumerate(compiled.rows, 1)
    )
    return "\n".join(
        [
            head,
            "",
            markdown_table(
                [
                    "#",
                    "function",
                    "program",
                    "step:",
                    "input signature",
                    "trace:",
                    "lower:",
                    "compile:",
                    "cache hit",
                ],
                rows,
            ),
        ]
    )


def worst_worker(reports: Mapping[str, CoverageReport]) -> str:
    """The worker with the lowest XLA share; ties go to more compile time.

    Args:
        reports: Each worker's measured (`ok`) report of one epoch, keyed by
            worker name.

    Returns:
        The worst worker's name.
    """
    figures = {name: report.measured() for name, report in reports.items()}
    return min(figures, key=lambda n: (figures[n].xla_time_fraction, -figures[n].compile_time_s, n))


def workers_markdown(reports: Mapping[str, CoverageReport]) -> str:
    """A per-worker table for TensorBoard's text dashboard, worst worker first.

    Args:
        reports: Each worker's measured report of one epoch, by name.

    Returns:
        Markdown: a headline naming the worst worker, then the table.
    """
    worst = worst_worker(reports)
    rows = []
    for name in sorted(reports, key=lambda n: (n != worst, n)):
        r = reports[name].measured()
        rows.append(
            [
                name,
                f"{100 * r.xla_time_fraction:.1f}",
                f"{r.xla_time_s * 1e3:.2f}",
                f"{r.non_xla_op_time_s * 1e3:.2f}",
                r.compilations,
                f"{r.compile_time_s * 1e3:.1f}",
                "worst" if name == worst else "",
            ]
        )
    headline = (
        f"**Worst worker: {escape_markdown(worst)}**, "
        f"{100 * reports[worst].measured().xla_time_fraction:.1f}% of its op time inside XLA "
        f"({len(reports)} workers)."
    )
    table = markdown_table(
        ["worker", "coverage %:", "XLA ms:", "non-XLA ms:", "compilations:", "compile ms:", ""],
        rows,
    )
    return headline + "\n\n" + table


def unprofiled_markdown(reports: Mapping[str, CoverageReport]) -> str:
    """The workers without figures of an epoch, and why, for TensorBoard's text dashboard.

    Args:
        reports: The reports (not ok) of those workers, by name.

    Returns:
        Markdown: one bullet per worker with its status and reason.
    """
    lines = [
        f"- **{escape_markdown(n)}**: {escape_markdown(r.status)}: {escape_markdown(r.reason)}"
        for n, r in sorted(reports.items())
    ]
    return "Workers without figures in this epoch (their XLA figures are unmeasured, not 0):\n\n" + (
        "\n".join(lines)
    )
