"""Console text of coverage reports."""

from __future__ import annotations

from keras_xla_guard.trace.report import CoverageReport

__all__ = ["format_report"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def format_report(report: CoverageReport, *, max_ops: int = 5) -> str:
    """Formats a report as a short human-readable text block.

    Args:
        report: The report to format.
        max_ops: How many of the top non-XLA ops to list. Defaults to `5`.

    Returns:
        Multi-line text, no trailing newline.
    """
    where = f"epoch {report.epoch}" if report.epoch is not None else "trace"
    if report.status != "ok":
        return f"XLA coverage ({where}): {report.status} - {report.reason}"
    steps = f", {report.steps_profiled} steps" if report.steps_profiled is not None else ""
    wall = f", {report.window_wall_s:.2f} s wall" if report.window_wall_s is not None else ""
    lines = [
        f"XLA coverage ({where}{steps}{wall}): "
        f"{report.xla_time_fraction:.1%} of op time ran inside XLA",
        f"  XLA executables:   {_ms(report.xla_time_s):>12}  ({report.xla_executions} launches)",
        f"  plain TF ops:      {_ms(report.non_xla_op_time_s):>12}",
        f"  XLA compilations:  {report.compilations:>9}     ({_ms(report.compile_time_s)})",
        f"  input pipeline:    {_ms(report.input_pipeline_time_s):>12}",
    ]
    if report.guard_op_time_s:
        lines.append(f"  guard's own ops:   {_ms(report.guard_op_time_s):>12}  (signature tap, not counted)")
    if report.time_base != "host":
        lines.append(f"  times measured on: {report.time_base}")
    if report.top_non_xla_ops:
        lines.append("  top ops outside XLA (self time):")
        for op in report.top_non_xla_ops[:max_ops]:
            lines.append(
                f"    {_ms(op.self_time_s):>10}  x{op.count:<5} {op.op_type:<20} {op.op_name}"
            )
    if report.distinct_signatures is not None:
        expected = (
            f", {report.expected_compilations} expected compilation(s)"
            if report.expected_compilations is not None
            else ""
        )
        lines.append(
            f"  input signatures:  {report.distinct_signatures:>9}     "
            f"({report.new_signatures} new{expected})"
        )
        for line in report.signature_explanations[:2]:
            lines.append(f"    {line}")
    elif report.signatures_unavailable:
        lines.append(f"  input signatures:  unavailable ({report.signatures_unavailable})")
    for note in report.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
