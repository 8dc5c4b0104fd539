"""TensorBoard output: scalars, a Custom Scalars layout and text tables.

Everything goes through TensorBoard's own classes, with no TensorFlow:
its `EventFileWriter` writes the event file, and each summary is built by
its plugin's `*_pb` builder (`scalar_pb`, `text_pb`, the custom-scalar
`pb`), which write the same tags, plugin metadata and tensors as
`tf.summary.scalar`/`text`. So the guard writes the same TensorBoard
files under TensorFlow and under JAX (where `tf.summary` does not exist),
in one code path, beside Keras' own TensorBoard callback in one log dir.
"""

from __future__ import annotations

import os
import re
import threading
import time
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from keras_xla_guard.output.compilations import (
    SOURCE_WORDS,
    compilation_scalars,
    compilations_headline,
    unexplained_note,
)
from keras_xla_guard.runtime.compile_log import COUNTED, EpochCompilations
from keras_xla_guard.runtime.sink import CallRecord, EpochRecord
from keras_xla_guard.signatures import EpochSignatures
from keras_xla_guard.trace._text import format_ms
from keras_xla_guard.trace.analysis import combine_reports
from keras_xla_guard.trace.findings import NOISE_FLOOR, split_findings
from keras_xla_guard.trace.report import CoverageReport

__all__ = [
    "DEVICE_TAG",
    "DEVICE_TAGS",
    "JAX_SKIPPED_TAGS",
    "LAYOUT_CATEGORY",
    "PROGRAM_TAG",
    "SCALAR_TAGS",
    "SIGNATURE_TAGS",
    "WORKER_TAGS",
    "SummaryWriter",
    "TensorBoardSink",
    "compilations_markdown",
    "compiles_markdown",
    "escape_markdown",
    "layout_proto",
    "markdown_table",
    "report_markdown",
    "report_scalars",
    "signatures_markdown",
    "signatures_unavailable_markdown",
    "unprofiled_markdown",
    "workers_markdown",
    "worst_worker",
    "write_worker_summaries",
]

PREFIX = "xla_guard"
LAYOUT_CATEGORY = "XLA Guard"
# Tag -> how to read it from a report. The step of every point is the epoch.
SCALAR_TAGS: dict[str, Any] = {
    f"{PREFIX}/xla_time_fraction": lambda r: r.xla_time_fraction,
    f"{PREFIX}/coverage_percent": lambda r: 100.0 * r.xla_time_fraction,
    f"{PREFIX}/xla_time_s": lambda r: r.xla_time_s,
    f"{PREFIX}/non_xla_op_time_s": lambda r: r.non_xla_op_time_s,
    f"{PREFIX}/xla_executions": lambda r: r.xla_executions,
    f"{PREFIX}/compilations": lambda r: r.compilations,
    f"{PREFIX}/compile_time_s": lambda r: r.compile_time_s,
    f"{PREFIX}/compile_thread_time_s": lambda r: r.compile_thread_time_s,
    f"{PREFIX}/input_pipeline_time_s": lambda r: r.input_pipeline_time_s,
}
# Figures only device traces have (`None` on host traces): written when set.
DEVICE_TAGS: dict[str, Any] = {
    f"{PREFIX}/transfer_time_s": lambda r: r.transfer_time_s,
    f"{PREFIX}/collective_time_s": lambda r: r.collective_time_s,
    f"{PREFIX}/xla_run_span_s": lambda r: r.xla_run_span_s,
}
# Each device's figures when a report sums several: `DEVICE_TAG.format(device=..., figure=...)`,
# `device` the plane's name without its slash (`device:GPU:1`, `<host>/device:GPU:1` across hosts).
DEVICE_TAG = PREFIX + "/device/{device}/{figure}"
_DEVICE_FIGURES = ("xla_time_s", "xla_time_fraction", "launches", "transfer_time_s")
# Each XLA program's device time: `PROGRAM_TAG.format(program=..., figure="time_s"|"runs")`.
PROGRAM_TAG = PREFIX + "/program/{program}/{figure}"
# Under JAX every step is one XLA program: the coverage tags would read 100%
# (or 0 s of plain ops) by construction, so a JAX window does not write them.
JAX_SKIPPED_TAGS = frozenset(
    f"{PREFIX}/{t}" for t in ("xla_time_fraction", "coverage_percent", "non_xla_op_time_s")
)
# Tag suffix -> how to read it from an epoch's `EpochSignatures`; written for
# every epoch with observed steps (`expected_compilations` only under XLA).
# A test or predict call writes the same figures under its kind:
# `validation/...` at its epoch, `evaluate/...` and `predict/...` at its
# call number (`CallRecord.kind` names the prefix).
SIGNATURE_TAGS: dict[str, Any] = {
    "distinct_signatures": lambda s: s.distinct_signatures,
    "new_signatures": lambda s: s.new_signatures,
    "expected_compilations": lambda s: s.expected_compilations,
}
# Tag suffix -> how to read it from a worker's report; a multi-worker chief
# writes them under `xla_guard/<worker>/...` and combined under `xla_guard/...`
# (`write_worker_summaries`).
WORKER_TAGS: dict[str, Any] = {
    "xla_time_fraction": lambda r: r.xla_time_fraction,
    "coverage_percent": lambda r: 100.0 * r.xla_time_fraction,
    "xla_time_s": lambda r: r.xla_time_s,
    "non_xla_op_time_s": lambda r: r.non_xla_op_time_s,
    "compilations": lambda r: r.compilations,
    "compile_time_s": lambda r: r.compile_time_s,
}
# Signature figures a chief writes per worker, and their largest combined.
_WORKER_SIGNATURE_FIGURES = ("distinct_signatures", "new_signatures")

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
    from keras_xla_guard.output.tensorboard import escape_markdown

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
    from keras_xla_guard.output.tensorboard import markdown_table

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


def report_scalars(report: CoverageReport) -> dict[str, float]:
    """Every scalar a measured report writes: tag -> value.

    Args:
        report: An ok report.

    Returns:
        `SCALAR_TAGS`' figures, `DEVICE_TAGS`' that are set, each XLA
        program's device time and runs (`PROGRAM_TAG`) and, when the
        report sums several devices, each device's XLA time, share,
        launches and transfers (`DEVICE_TAG`).
    """
    scalars = {tag: float(read(report)) for tag, read in SCALAR_TAGS.items()}
    scalars.update(
        {tag: float(value) for tag, read in DEVICE_TAGS.items() if (value := read(report)) is not None}
    )
    for p in report.programs:
        scalars[PROGRAM_TAG.format(program=p.program, figure="time_s")] = p.time_s
        scalars[PROGRAM_TAG.format(program=p.program, figure="runs")] = float(p.runs)
    if len(report.devices) > 1:
        for d, name in zip(report.devices, _device_names(report)):
            for figure in _DEVICE_FIGURES:
                scalars[DEVICE_TAG.format(device=name.lstrip("/"), figure=figure)] = float(getattr(d, figure))
    return scalars


def _device_names(report: CoverageReport) -> list[str]:
    """Each device's name, with its host where the devices come from several hosts."""
    several = len({d.host for d in report.devices}) > 1
    return [f"{d.host}{d.device}" if several and d.host else d.device for d in report.devices]


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
                for d, name in zip(report.devices, _device_names(report))
            ),
        ),
        "",
    ]


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
    transfers = (
        ""
        if report.transfer_time_s is None
        else f"; {report.transfer_time_s * 1e3:.2f} ms device transfers, not counted"
    )
    # A report read back from a run file may lack the thread-summed time.
    thread = (
        ""
        if report.compile_thread_time_s is None
        else f", {report.compile_thread_time_s * 1e3:.1f} ms summed over threads"
    )
    figures = report.measured()
    totals = f", {report.totals_label}" if report.totals_label else ""
    span = (
        ""
        if report.xla_run_span_s is None
        else f"; XLA runs spanned {report.xla_run_span_s * 1e3:.2f} ms, idle gaps inside runs included"
    )
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


def _phase_ms(seconds: float | None) -> str:
    return "-" if seconds is None else format_ms(seconds)


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
            _phase_ms(row.trace_s),
            _phase_ms(row.lower_s),
            _phase_ms(row.compile_s),
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


def write_worker_summaries(
    writer: SummaryWriter,
    epoch: int,
    reports: Mapping[str, CoverageReport],
    own: CoverageReport,
    own_name: str,
    top_k: int = 10,
) -> None:
    """Writes the chief's TensorBoard summaries of one epoch of all workers.

    Args:
        writer: A `SummaryWriter` on the base log dir.
        epoch: The epoch (the TensorBoard step).
        reports: Each worker's measured (`ok`) report of the epoch, keyed
            by worker name.
        own: The chief's own report (its op table goes in as text; each
            measured worker's compile table too, as `<worker>/compiles`).
        own_name: The chief's worker name.
        top_k: Plain TF ops kept in the combined op table. Defaults to `10`.
    """
    combined = combine_reports(list(reports.values()), top_k=top_k)
    scalars = {tag: read(combined) for tag, read in WORKER_TAGS.items()}
    scalars["xla_executions"] = combined.xla_executions
    scalars["input_pipeline_time_s"] = combined.input_pipeline_time_s
    for name, report in reports.items():
        for tag, read in WORKER_TAGS.items():
            scalars[f"{name}/{tag}"] = read(report)
    scalars["worst_worker_xla_time_fraction"] = reports[worst_worker(reports)].xla_time_fraction
    for figure in _WORKER_SIGNATURE_FIGURES:
        seen = {n: getattr(r, figure) for n, r in reports.items() if getattr(r, figure) is not None}
        for name, value in seen.items():
            scalars[f"{name}/{figure}"] = value
        if seen:
            # Each worker reads its own shard; the most shapes any
            # worker met is what drives its compilations.
            scalars[figure] = max(seen.values())
    writer.write_scalars(scalars, step=epoch)
    writer.write_text("workers", workers_markdown(reports), step=epoch)
    writer.write_text(f"{own_name}/report", report_markdown(own), step=epoch)
    for name, report in sorted(reports.items()):
        # What a single-process run writes as `xla_guard/compiles`, per worker.
        if report.compile_table or report.persistent_cache:
            writer.write_text(f"{name}/compiles", compiles_markdown(report), step=epoch)


def layout_proto(counted_compilations: bool = False) -> Any:
    """Builds the Custom Scalars layout of the "XLA Guard" category.

    Args:
        counted_compilations: The run counts its compilations as they happen
            (JAX): charts of them per function replace the coverage charts,
            which read 100% by construction there. Defaults to `False`.

    Returns:
        A `tensorboard.plugins.custom_scalar.layout_pb2.Layout`.
    """
    from tensorboard.plugins.custom_scalar import layout_pb2

    def chart(title: str, *tags: str) -> Any:
        return layout_pb2.Chart(
            title=title,
            multiline=layout_pb2.MultilineChartContent(
                tag=[f"^{re.escape(PREFIX + '/' + t)}$" for t in tags]
            ),
        )

    if counted_compilations:
        functions = ("train", "test", "predict", "warm_up", "other")
        return layout_pb2.Layout(
            category=[
                layout_pb2.Category(
                    title=LAYOUT_CATEGORY,
                    chart=[
                        chart("Compilations per function", *(f"{f}/compilations" for f in functions)),
                        chart("Compile time per function (s)", *(f"{f}/compile_time_s" for f in functions)),
                        chart(
                            "Compilations vs new signatures",
                            "compilations",
                            "expected_compilations",
                            "new_signatures",
                        ),
                        chart("XLA program time in the window (s)", "xla_time_s"),
                    ],
                )
            ]
        )
    return layout_pb2.Layout(
        category=[
            layout_pb2.Category(
                title=LAYOUT_CATEGORY,
                chart=[
                    chart("XLA coverage (%)", "coverage_percent"),
                    chart("XLA vs non-XLA op time (s)", "xla_time_s", "non_xla_op_time_s"),
                    # Measured compilations beside the signature tracker's
                    # prediction: a gap means shapes are not the only cause.
                    chart(
                        "Compilations vs new signatures",
                        "compilations",
                        "expected_compilations",
                        "new_signatures",
                    ),
                    # The test function compiles on its own: the validation's
                    # compilations beside the train function's, per epoch.
                    chart(
                        "Expected compilations: train vs validation",
                        "expected_compilations",
                        "validation/expected_compilations",
                    ),
                    chart(
                        "Compile time (s): wall-clock, and summed over threads",
                        "compile_time_s",
                        "compile_thread_time_s",
                    ),
                    chart("Input pipeline time (s)", "input_pipeline_time_s"),
                    chart("Device transfers and collectives (s)", "transfer_time_s", "collective_time_s"),
                ],
            )
        ]
    )


def _layout_summary(layout: Any) -> Any:
    """The Custom Scalars summary of `layout`, built as the plugin's `summary.pb` builds it.

    The plugin's own `pb` imports TensorFlow; this is the same summary
    (its metadata, its tag, the layout's bytes as a string tensor) from
    TensorBoard's own classes, the way `text_pb` builds a text summary.
    """
    import numpy as np
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.custom_scalar import metadata
    from tensorboard.util import tensor_util

    summary = summary_pb2.Summary()
    summary.value.add(
        tag=metadata.CONFIG_SUMMARY_TAG,
        metadata=metadata.create_summary_metadata(),
        tensor=tensor_util.make_tensor_proto(layout.SerializeToString(), dtype=np.object_),
    )
    return summary


class SummaryWriter:
    """Writes guard reports as TensorBoard summaries into one run directory.

    The Custom Scalars layout is written with the first summary, so any run
    holding guard data also holds its layout. Safe to use from several
    threads (the engine writes from its analysis thread).

    Args:
        log_dir: The run directory (event files are written directly in it).

    Example:

    ```python
    from keras_xla_guard import CoverageReport
    from keras_xla_guard.output.tensorboard import SummaryWriter

    writer = SummaryWriter("logs/xla_guard")
    writer.write_report(CoverageReport(xla_time_s=0.9, non_xla_op_time_s=0.1,
                                       xla_time_fraction=0.9), step=1)
    writer.close()
    ```
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.log_dir = os.fspath(log_dir)
        self._writer: Any = None
        self._layout_written = False
        self._lock = threading.RLock()
        self.counted_compilations = False

    def _get(self) -> Any:
        if self._writer is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            # The suffix tf.summary gives its files, so each writer's file is told apart.
            self._writer = EventFileWriter(self.log_dir, filename_suffix=".v2")
        return self._writer

    def _write(self, summary: Any, step: int) -> None:
        from tensorboard.compat.proto import event_pb2

        event = event_pb2.Event(wall_time=time.time(), step=int(step))
        # With TensorFlow installed the plugins' builders return TensorFlow's
        # Summary class, with TensorBoard's the same message under another
        # class: copied by its bytes, never by class.
        event.summary.ParseFromString(summary.SerializeToString())
        self._get().add_event(event)

    def write_layout(self) -> None:
        """Writes the Custom Scalars layout once per writer."""
        with self._lock:
            if self._layout_written:
                return
            self._write(_layout_summary(layout_proto(self.counted_compilations)), step=0)
            self._layout_written = True

    def write_report(self, report: CoverageReport, step: int) -> None:
        """Writes one report's scalars and text at `step` (the epoch).

        Args:
            report: The report; a skipped/failed one writes only its text.
            step: The TensorBoard step, normally the 0-based epoch index.
        """
        from tensorboard.plugins.scalar.summary_v2 import scalar_pb
        from tensorboard.plugins.text.summary_v2 import text_pb

        with self._lock:
            self.write_layout()
            if report.status == "ok":
                for tag, value in report_scalars(report).items():
                    if report.backend != "jax" or tag not in JAX_SKIPPED_TAGS:
                        self._write(scalar_pb(tag, value), step)
            self._write(text_pb(f"{PREFIX}/report", report_markdown(report)), step)
            self._writer.flush()

    def write_scalars(self, values: dict[str, float], step: int) -> None:
        """Writes extra scalars (e.g. signature counts) under `xla_guard/`.

        Args:
            values: Tag suffix -> value, e.g. `{"new_signatures": 3}`.
            step: The TensorBoard step, normally the 0-based epoch index.
        """
        from tensorboard.plugins.scalar.summary_v2 import scalar_pb

        with self._lock:
            self.write_layout()
            for name, value in values.items():
                self._write(scalar_pb(f"{PREFIX}/{name}", float(value)), step)
            self._writer.flush()

    def write_text(self, name: str, markdown: str, step: int) -> None:
        """Writes a Markdown text summary under `xla_guard/<name>`.

        Args:
            name: Tag suffix, e.g. `"recompilation"`.
            markdown: The Markdown; build it with `escape_markdown` and
                `markdown_table` so names cannot inject markup.
            step: The TensorBoard step, normally the 0-based epoch index.
        """
        from tensorboard.plugins.text.summary_v2 import text_pb

        with self._lock:
            self.write_layout()
            self._write(text_pb(f"{PREFIX}/{name}", markdown), step)
            self._writer.flush()

    def close(self) -> None:
        """Flushes and closes the event file."""
        with self._lock:
            if self._writer is not None:
                self._writer.flush()
                self._writer.close()
                self._writer = None


class TensorBoardSink:
    """The engine's `ReportSink` for TensorBoard: one event file per run directory.

    Reports become `xla_guard/...` scalars and a text table, signature
    figures become scalars and text, all at step = epoch; a validation's
    figures go under `xla_guard/validation/...` at its epoch, an
    `evaluate` or `predict` call's under `xla_guard/evaluate/...` or
    `xla_guard/predict/...` at its call number. The event file is
    opened at the first write, so a run that measures nothing leaves none.

    Args:
        log_dir: The run directory for the event file.

    Example:

    ```python
    from keras_xla_guard import XlaGuardEngine
    from keras_xla_guard.output.tensorboard import TensorBoardSink

    engine = XlaGuardEngine(sinks=[TensorBoardSink("logs/xla_guard")])
    ```
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.writer = SummaryWriter(log_dir)
        self.directory = os.fspath(log_dir)
        # What a warning about a failed write names (`runtime/failures.py`).
        self.what = f"the TensorBoard summaries in {os.fspath(log_dir)!r}"

    def write_epoch(self, record: EpochRecord) -> None:
        """Writes an epoch's report, signature figures and compile table at its epoch.

        The report's scalars and text table (text only when it measured
        nothing), the signature scalars and their explanation (or why
        there are none), and the window's compile table
        (`xla_guard/compiles`) when the window was measured.
        """
        epoch, report = record.epoch, record.report
        if record.compilations is not None and record.compilations.source == COUNTED:
            self.writer.counted_compilations = True
        if report is not None:
            self.writer.write_report(report, step=epoch)
        stats = record.signatures
        if stats is not None:
            values = {tag: read(stats) for tag, read in SIGNATURE_TAGS.items()}
            self.writer.write_scalars(
                {tag: value for tag, value in values.items() if value is not None}, step=epoch
            )
            self.writer.write_text("signatures", signatures_markdown(stats), step=epoch)
        elif record.signatures_unavailable is not None:
            self.writer.write_text(
                "signatures", signatures_unavailable_markdown(record.signatures_unavailable), step=epoch
            )
        if report is not None and report.ok:
            self.writer.write_text("compiles", compiles_markdown(report), step=epoch)
        if record.compilations is not None:
            self.writer.write_scalars(compilation_scalars(record.compilations), step=epoch)
            self.writer.write_text(
                "counted_compilations", compilations_markdown(record.compilations), step=epoch
            )
        for call in record.calls:
            self._write_call(call, step=epoch)

    def write_call(self, record: CallRecord) -> None:
        """Writes an `evaluate` or `predict` call outside `fit` at its call number.

        Under `xla_guard/evaluate/...` or `xla_guard/predict/...`: the
        signature scalars and their explanation (or why there are none).
        """
        self._write_call(record, step=record.call)

    def _write_call(self, call: CallRecord, step: int) -> None:
        prefix = call.kind
        if call.compilations is not None:
            counted = EpochCompilations(step, call.compilations)
            scalars = {f"{prefix}/compilations": float(counted.count(call.function))}
            seconds = counted.seconds(call.function)
            if seconds is not None:  # untimed (TensorFlow): left out, never a fake 0
                scalars[f"{prefix}/compile_time_s"] = seconds
            self.writer.write_scalars(scalars, step=step)
        stats = call.signatures
        if stats is not None:
            values = {f"{prefix}/{tag}": read(stats) for tag, read in SIGNATURE_TAGS.items()}
            self.writer.write_scalars(
                {tag: value for tag, value in values.items() if value is not None}, step=step
            )
            self.writer.write_text(f"{prefix}/signatures", signatures_markdown(stats), step=step)
        elif call.signatures_unavailable is not None:
            self.writer.write_text(
                f"{prefix}/signatures",
                signatures_unavailable_markdown(call.signatures_unavailable),
                step=step,
            )

    def close(self, records: Mapping[int, EpochRecord]) -> None:
        """Flushes and closes the event file."""
        self.writer.close()
