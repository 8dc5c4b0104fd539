"""TensorBoard output: scalars, a Custom Scalars layout and text tables.

Everything goes through `tf.summary` and TensorBoard's own plugin summary
APIs; TensorFlow is imported only when a writer is created.
"""

from __future__ import annotations

import os
import re
from typing import Any

from keras_xla_guard.report import CoverageReport

__all__ = [
    "SCALAR_TAGS",
    "SummaryWriter",
    "escape_markdown",
    "layout_proto",
    "report_markdown",
]

PREFIX = "xla_guard"
# Tag -> how to read it from a report. The step of every point is the epoch.
SCALAR_TAGS: dict[str, Any] = {
    f"{PREFIX}/xla_time_fraction": lambda r: r.xla_time_fraction,
    f"{PREFIX}/coverage_percent": lambda r: 100.0 * r.xla_time_fraction,
    f"{PREFIX}/xla_time_s": lambda r: r.xla_time_s,
    f"{PREFIX}/non_xla_op_time_s": lambda r: r.non_xla_op_time_s,
    f"{PREFIX}/xla_executions": lambda r: r.xla_executions,
    f"{PREFIX}/compilations": lambda r: r.compilations,
    f"{PREFIX}/compile_time_s": lambda r: r.compile_time_s,
    f"{PREFIX}/input_pipeline_time_s": lambda r: r.input_pipeline_time_s,
}

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~])")


def escape_markdown(text: str) -> str:
    """Escapes text so Markdown and HTML render it literally.

    Op names are user-controlled (layer names); no name may break a table
    row or inject markup into TensorBoard's text dashboard.

    Args:
        text: Any string.

    Returns:
        The string with Markdown punctuation backslash-escaped, `<`, `>`
        and `&` as HTML entities, and newlines as spaces.
    """
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("\r", " ").replace("\n", " ")
    return _MD_SPECIAL.sub(r"\\\1", text)


def report_markdown(report: CoverageReport) -> str:
    """Renders a report as Markdown: a headline and the top non-XLA ops.

    Args:
        report: The report to render.

    Returns:
        Markdown text for TensorBoard's Text dashboard.
    """
    if report.status != "ok":
        return f"**XLA coverage: {escape_markdown(report.status)}** - {escape_markdown(report.reason)}"
    steps = f" over {report.steps_profiled} steps" if report.steps_profiled is not None else ""
    parts = [
        f"**XLA coverage: {100 * report.xla_time_fraction:.1f}%** of op time{steps} ran inside "
        f"XLA executables ({report.xla_time_s * 1e3:.2f} ms XLA, "
        f"{report.non_xla_op_time_s * 1e3:.2f} ms plain TF ops; "
        f"{report.compilations} compilation(s), {report.compile_time_s * 1e3:.1f} ms).",
        "",
    ]
    if report.top_non_xla_ops:
        parts += [
            "| # | op type | op name | self time (ms) | count |",
            "|---|---|---|---:|---:|",
        ]
        for i, op in enumerate(report.top_non_xla_ops, 1):
            parts.append(
                f"| {i} | {escape_markdown(op.op_type)} | {escape_markdown(op.op_name)} "
                f"| {op.self_time_s * 1e3:.3f} | {op.count} |"
            )
    else:
        parts.append("No plain TF op ran outside XLA in this window.")
    for note in report.notes:
        parts += ["", f"- {escape_markdown(note)}"]
    return "\n".join(parts)


def layout_proto() -> Any:
    """Builds the Custom Scalars layout of the "XLA Guard" category.

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

    return layout_pb2.Layout(
        category=[
            layout_pb2.Category(
                title="XLA Guard",
                chart=[
                    chart("XLA coverage (%)", "coverage_percent"),
                    chart("XLA vs non-XLA op time (s)", "xla_time_s", "non_xla_op_time_s"),
                    chart("Compilations vs new signatures", "compilations", "new_signatures"),
                    chart("Compile time (s)", "compile_time_s"),
                    chart("Input pipeline time (s)", "input_pipeline_time_s"),
                ],
            )
        ]
    )


class SummaryWriter:
    """Writes guard reports as TensorBoard summaries into one run directory.

    Args:
        log_dir: The run directory (event files are written directly in it).
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.log_dir = os.fspath(log_dir)
        self._writer: Any = None
        self._layout_written = False

    def _get(self) -> Any:
        if self._writer is None:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(self.log_dir)
        return self._writer

    def write_layout(self) -> None:
        """Writes the Custom Scalars layout once per writer."""
        if self._layout_written:
            return
        import tensorflow as tf
        from tensorboard.plugins.custom_scalar import summary as cs_summary

        with self._get().as_default():
            tf.summary.experimental.write_raw_pb(
                cs_summary.pb(layout_proto()).SerializeToString(), step=0
            )
        self._layout_written = True

    def write_report(self, report: CoverageReport, step: int) -> None:
        """Writes one report's scalars and text at `step` (the epoch).

        Args:
            report: The report; a skipped/failed one writes only its text.
            step: The TensorBoard step, normally the 0-based epoch index.
        """
        import tensorflow as tf

        self.write_layout()
        with self._get().as_default(step=step):
            if report.status == "ok":
                for tag, read in SCALAR_TAGS.items():
                    tf.summary.scalar(tag, float(read(report)))
            tf.summary.text(f"{PREFIX}/report", report_markdown(report))
        self._writer.flush()

    def write_scalars(self, values: dict[str, float], step: int) -> None:
        """Writes extra scalars (e.g. signature counts) under `xla_guard/`.

        Args:
            values: Tag suffix -> value.
            step: The TensorBoard step.
        """
        import tensorflow as tf

        with self._get().as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(f"{PREFIX}/{name}", float(value))

    def write_text(self, name: str, markdown: str, step: int) -> None:
        """Writes a Markdown text summary under `xla_guard/<name>`.

        Args:
            name: Tag suffix.
            markdown: The (already escaped) Markdown.
            step: The TensorBoard step.
        """
        import tensorflow as tf

        with self._get().as_default(step=step):
            tf.summary.text(f"{PREFIX}/{name}", markdown)

    def close(self) -> None:
        """Flushes and closes the event file."""
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None
