"""The plain-text form of a `CoverageReport` (`str(report)`, the console).

It lives beside the report type so that `CoverageReport.__str__` needs
nothing from the output room; `output.console` prints it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from keras_xla_guard.trace.findings import NOISE_FLOOR, split_findings

if TYPE_CHECKING:
    from keras_xla_guard.trace.report import CoverageReport

__all__ = [
    "JAX_COVERAGE_NOTE",
    "compile_lines",
    "device_lines",
    "format_ms",
    "format_report",
    "jax_busy",
    "quality_lines",
    "step_lines",
]


def format_ms(seconds: float, digits: int = 1) -> str:
    """Seconds as milliseconds, the way every text output shows a duration.

    Args:
        seconds: The duration.
        digits: Decimals shown. Defaults to `1`.

    Returns:
        E.g. `"12.3 ms"` for `0.01234`.
    """
    return f"{seconds * 1e3:.{digits}f} ms"


def _thread_compile(report: CoverageReport) -> str:
    """The thread-summed compile time, labelled as such (never the headline)."""
    thread = report.compile_thread_time_s
    return "" if thread is None else f", {format_ms(thread)} summed over threads"


def format_report(report: CoverageReport, *, max_ops: int = 5, max_programs: int = 3) -> str:
    """Formats a report as a short human-readable text block.

    Args:
        report: The report to format.
        max_ops: How many of the top non-XLA ops to list. Defaults to `5`.
        max_programs: How many XLA programs, and ops inside XLA, to list
            with their device time. Defaults to `3`.

    Returns:
        Multi-line text, no trailing newline.
    """
    where = f"epoch {report.epoch}" if report.epoch is not None else "trace"
    if report.status != "ok":
        return f"XLA coverage ({where}): {report.status} - {report.reason}"
    steps = f", {report.steps_profiled} steps" if report.steps_profiled is not None else ""
    wall = f", {format_ms(report.window_wall_s)} wall" if report.window_wall_s is not None else ""
    totals = f", {report.totals_label}" if report.totals_label else ""
    if report.backend == "jax":
        return "\n".join(_jax_lines(report, where + steps + wall + totals))
    figures = report.measured()
    lines = [
        f"XLA coverage ({where}{steps}{wall}{totals}): {figures.xla_time_fraction:.1%} of op time ran inside XLA",
        f"  XLA executables:   {format_ms(figures.xla_time_s):>12}  ({figures.xla_executions} launches)",
        *_span_lines(report),
        *_program_lines(report, max_programs),
        f"  plain TF ops:      {format_ms(figures.non_xla_op_time_s):>12}",
        f"  XLA compilations:  {figures.compilations:>9}     ({format_ms(figures.compile_time_s)} wall-clock"
        f"{_thread_compile(report)})",
        f"  input pipeline:    {format_ms(figures.input_pipeline_time_s):>12}",
    ]
    if report.transfer_time_s is not None:
        lines.append(
            f"  device transfers:  {format_ms(report.transfer_time_s):>12}  (memcpy/memset, not counted)"
        )
    if report.collective_time_s:
        lines.append(
            f"  collectives:       {format_ms(report.collective_time_s):>12}  "
            "(XLA time inside programs, not counted outside)"
        )
    if report.guard_op_time_s:
        lines.append(
            f"  guard's own ops:   {format_ms(report.guard_op_time_s):>12}  (signature tap, not counted)"
        )
    if report.time_base != "host":
        lines.append(f"  times measured on: {report.time_base}")
    lines.extend(device_lines(report))
    if report.top_xla_ops:
        lines.append("  top ops inside XLA (device time):")
        for op in report.top_xla_ops[:max_programs]:
            lines.append(f"    {format_ms(op.self_time_s):>10}  x{op.count:<5} {op.op_type:<20} {op.op_name}")
    lines.extend(_op_lines(report, max_ops))
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
    lines.extend(compile_lines(report))
    lines.extend(quality_lines(report))
    for note in report.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def _op_lines(report: CoverageReport, max_ops: int) -> list[str]:
    """The op table above the noise floor, then the rest of the plain-op time as one "other" line."""
    ops = report.top_non_xla_ops
    if not ops:
        return []
    plain = report.non_xla_op_time_s or 0.0
    split = split_findings(ops, lambda op: op.self_time_s, report.xla_time_s or 0.0, plain)
    below = f"each below {NOISE_FLOOR:.0%} of op time"
    if not split.findings:
        return [f"  top ops outside XLA: none is a finding ({format_ms(plain, 3)} of plain ops, {below})"]
    shown = split.findings[:max_ops]
    lines = ["  top ops outside XLA (self time):"]
    for op in shown:
        layer = f"[{op.layer}] " if op.layer else ""
        lines.append(
            f"    {format_ms(op.self_time_s):>10}  x{op.count:<5} {op.op_type:<20} {layer}{op.op_name}"
        )
    rest = plain - sum(op.self_time_s for op in shown)
    if rest > 0:
        # The table is sorted: once it reached an op below the floor, all
        # it left out (top_k) are below too.
        noise = len(shown) == len(split.findings) < len(ops)
        lines.append(f"    {format_ms(rest):>10}         other plain ops{f' ({below})' if noise else ''}")
    return lines


# Said once under every JAX window, where the coverage headline would mislead.
JAX_COVERAGE_NOTE = (
    "under JAX every step is one XLA program, so XLA coverage is 100% by construction and "
    "not shown; what matters is how busy the programs keep the device and how often they compile"
)


def jax_busy(report: CoverageReport) -> tuple[float, float] | None:
    """`(share of the time the XLA programs ran, host time between them in seconds)`.

    Over the window's steps when the trace has step markers (each step's
    `busy_s`, the programs' spans on every thread, each moment once: on
    XLA:CPU a launch returns to Python before its program finishes on a
    worker thread), else over the window, where the XLA time summed over
    several devices is their mean. The host time is the rest less the
    wall-clock compile time: Python, the input pipeline, dispatch. `None`
    without a time to divide by.
    """
    if report.steps:
        wall = sum(step.wall_s for step in report.steps)
        busy = sum(step.busy_s for step in report.steps)
    else:
        wall = report.window_wall_s or 0.0
        busy = min((report.xla_time_s or 0.0) / max(1, len(report.devices)), wall)
    if not wall:
        return None
    return busy / wall, max(0.0, wall - busy - (report.compile_time_s or 0.0))


def _jax_lines(report: CoverageReport, where: str) -> list[str]:
    """A JAX window: the programs' share of the window and the host time around them."""
    figures = report.measured()
    busy = jax_busy(report)
    over = "its steps" if report.steps else "the window"
    share = (
        f"XLA programs kept the device {busy[0]:.1%} busy over {over} "
        f"(host {format_ms(busy[1], 2)} between programs, compiles aside)"
        if busy is not None
        else f"XLA programs ran {format_ms(figures.xla_time_s, 2)}"
    )
    lines = [
        f"JAX window ({where}): {share}",
        f"  program launches:  {figures.xla_executions:>9}",
        f"  XLA compilations:  {figures.compilations:>9}     ({format_ms(figures.compile_time_s)} wall-clock"
        f"{_thread_compile(report)})",
    ]
    if report.transfer_time_s is not None:
        lines.append(f"  device transfers:  {format_ms(report.transfer_time_s):>12}")
    lines.extend(_span_lines(report))
    lines.extend(device_lines(report))
    lines.extend(step_lines(report))
    if report.distinct_signatures is not None:
        lines.append(
            f"  input signatures:  {report.distinct_signatures:>9}     ({report.new_signatures} new)"
        )
        for line in report.signature_explanations[:2]:
            lines.append(f"    {line}")
    elif report.signatures_unavailable:
        lines.append(f"  input signatures:  unavailable ({report.signatures_unavailable})")
    lines.extend(compile_lines(report))
    for note in (JAX_COVERAGE_NOTE, *report.notes):
        lines.append(f"  note: {note}")
    return lines


def quality_lines(report: CoverageReport) -> list[str]:
    """The report's trace quality entries as text: what was seen, its cost, what restores it.

    Args:
        report: The report whose `trace_quality` to show.

    Returns:
        Indented lines; none when the trace showed no such condition.
    """
    if not report.trace_quality:
        return []
    lines = ["  trace quality (what limits these figures):"]
    for entry in report.trace_quality:
        lines += [
            f"    {entry.code}: {entry.detail}",
            f"      cost: {entry.cost}",
            f"      for a diagnostic run: {entry.remedy}",
        ]
    return lines


def _span_lines(report: CoverageReport) -> list[str]:
    """The XLA runs' spans on the device, beside the busy time (device traces only)."""
    if report.xla_run_span_s is None:
        return []
    return [
        f"  XLA run spans:     {format_ms(report.xla_run_span_s):>12}  "
        "(first to last kernel of each run, idle gaps included; not counted)"
    ]


def device_lines(report: CoverageReport, max_rows: int = 8) -> list[str]:
    """Each device's figures, when the report's totals add up several devices.

    Args:
        report: The report whose `devices` to show.
        max_rows: Devices listed before "... N more". Defaults to `8`.

    Returns:
        Indented lines; none for one device or a host trace.
    """
    if len(report.devices) < 2:
        return []
    lines = ["  per device:        XLA share    XLA time   run span   plain ops  launches   transfers"]
    for d in report.devices[:max_rows]:
        name = (
            d.device if d.host is None or len({x.host for x in report.devices}) < 2 else f"{d.host}{d.device}"
        )
        lines.append(
            f"    {name:<16} {d.xla_time_fraction:>8.1%} {format_ms(d.xla_time_s, 2):>11} "
            f"{format_ms(d.xla_run_span_s, 2):>10} {format_ms(d.non_xla_op_time_s, 2):>11} {d.launches:>9} "
            f"{format_ms(d.transfer_time_s, 2):>11}"
        )
    if len(report.devices) > max_rows:
        lines.append(f"    ... {len(report.devices) - max_rows} more device(s)")
    return lines


def _program_lines(report: CoverageReport, max_rows: int) -> list[str]:
    """Each XLA program's device time and runs, longest first."""
    lines = [
        f"    {format_ms(p.time_s):>10}  x{p.runs:<5} program {p.program}"
        + ("" if p.per_op else "  (command buffers: not per op)")
        for p in report.programs[:max_rows]
    ]
    if len(report.programs) > max_rows:
        lines.append(f"    ... {len(report.programs) - max_rows} more program(s)")
    return lines


def step_lines(report: CoverageReport, max_rows: int = 5) -> list[str]:
    """The window's steps as text: each step's wall time, the time programs ran in it, the host gap.

    Args:
        report: The report whose `steps` to show.
        max_rows: Steps listed before "... N more". Defaults to `5`.

    Returns:
        Indented lines; none when the trace has no step marker.
    """
    if not report.steps:
        return []
    lines = ["  per step:          wall       busy   host gap  launches"]
    for step in report.steps[:max_rows]:
        transfer = "" if step.transfer_s is None else f"  transfers {format_ms(step.transfer_s, 2)}"
        lines.append(
            f"    step {step.step:>4}  {format_ms(step.wall_s, 2):>10} {format_ms(step.busy_s, 2):>10} "
            f"{format_ms(step.idle_s, 2):>10}  {step.launches:>8}{transfer}"
        )
    if len(report.steps) > max_rows:
        lines.append(f"    ... {len(report.steps) - max_rows} more step(s)")
    return lines


def compile_lines(report: CoverageReport, max_rows: int = 8) -> list[str]:
    """The compile table as text lines: a headline, then one line per compilation or cache hit.

    Args:
        report: The report whose `compile_table` to show.
        max_rows: Rows shown before "... N more". Defaults to `8`.

    Returns:
        Indented lines; none when the window compiled nothing, found
        nothing cached and no persistent cache is set.
    """
    if not report.compile_table and report.persistent_cache is None:
        return []
    hits = f", {report.cache_hits} cache hit(s)" if report.cache_hits is not None else ""
    cache = f", persistent cache {report.persistent_cache}" if report.persistent_cache else ""
    lines = [f"  compile table:     {report.compilations} compiled{hits}{cache}"]
    for row in report.compile_table[:max_rows]:
        step = "?" if row.step is None else str(row.step)
        cost = "cache hit" if row.cache_hit else format_ms(row.compile_s or 0.0)
        lines.append(
            f"    step {step:>4}  {cost:>10}  {row.program or '-':<18} {row.signature or ''}".rstrip()
        )
    if len(report.compile_table) > max_rows:
        lines.append(f"    ... {len(report.compile_table) - max_rows} more")
    return lines
