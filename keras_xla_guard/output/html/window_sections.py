"""The HTML report's sections of the profiled windows: coverage, trace quality, programs, devices, ops.

Each section is one function of a worker's `RunData`, returning its HTML
(`""` when the run has nothing for it); `window_parts` gives them in page
order. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from keras_xla_guard.output.html.markup import (
    count_cell,
    escape,
    label,
    ms_cell,
    notes_list,
    num_cell,
    percent_cell,
    table,
    window_label,
)
from keras_xla_guard.output.html.plots import Plots
from keras_xla_guard.output.runfile import RunData
from keras_xla_guard.output.table import format_ms
from keras_xla_guard.trace.findings import NOISE_FLOOR, split_findings

__all__ = ["window_parts"]

_TOP_OPS_PLOTTED = 10
# Scopes TensorFlow wraps a whole traced step in: they name no layer.
_CALL_SCOPES = frozenset({"StatefulPartitionedCall", "PartitionedCall"})
# Characters of a scope path a chart label keeps (its end: the layer).
_LABEL_SCOPE = 48


def _scope(op_name: str) -> str:
    """An op's scope path without the step's call wrappers; `-` for none."""
    scopes = op_name.split("/")[:-1]
    while scopes and scopes[0] in _CALL_SCOPES:
        scopes.pop(0)
    return "/".join(scopes) or "-"


def _layer(op: Mapping[str, Any]) -> str:
    """The op's Keras layer when the guard knew the model, else its scope path."""
    return str(op.get("layer") or _scope(op["op_name"]))


def _chart_label(op: Mapping[str, Any]) -> str:
    """The op type and its layer; a long scope path loses its start, never the layer at its end."""
    layer = _layer(op)
    if len(layer) > _LABEL_SCOPE:
        layer = "..." + layer[3 - _LABEL_SCOPE :]
    return f"{op['op_type']}  {layer}"


def _window_head(report: Mapping[str, Any], index: int, columns: int, epoch: bool) -> str:
    """A window's row up to its figures; a window without figures says why in `columns` cells, ended."""
    attr = "" if not epoch or report.get("epoch") is None else f' data-epoch="{int(report["epoch"])}"'
    head = f'<tr class="report" data-index="{index}"{attr}><td>{escape(window_label(report, index))}</td>'
    if report.get("status") == "ok":
        return head
    return (
        head
        + f'<td colspan="{columns}">{escape(report.get("status"))}: {escape(report.get("reason"))}</td></tr>'
    )


def _jax_windows(section: RunData) -> str:
    """The profiled windows of a JAX run: the programs' share of each window, not a coverage."""
    from keras_xla_guard.trace._text import JAX_COVERAGE_NOTE, jax_busy
    from keras_xla_guard.trace.report import CoverageReport

    rows = []
    for i, r in enumerate(section.reports):
        head = _window_head(r, i, 6, epoch=False)
        if r.get("status") != "ok":
            rows.append(head)
            continue
        busy = jax_busy(CoverageReport.from_dict(dict(r)))
        rows.append(
            head
            + num_cell(
                "busy", None if busy is None else busy[0], "-" if busy is None else f"{100 * busy[0]:.1f}%"
            )
            + ms_cell("xla_time_s", r["xla_time_s"])
            + ms_cell("host_gap_s", None if busy is None else busy[1])
            + count_cell("xla_executions", r["xla_executions"])
            + count_cell("compilations", r["compilations"])
            + count_cell("steps_profiled", r.get("steps_profiled"))
            + "</tr>"
        )
    return (
        "<h3>XLA programs per profiled window (JAX)</h3>"
        f'<p class="muted jax-note">{escape(JAX_COVERAGE_NOTE[0].upper() + JAX_COVERAGE_NOTE[1:])}.</p>'
        + table(
            ["window", "busy", "program time", "host between programs", "launches", "compilations", "steps"],
            rows,
            "coverage",
        )
        + notes_list(section.reports)
    )


def _coverage(section: RunData, plots: Plots) -> str:
    """Each profiled window's coverage figures and their chart (a JAX run's: its programs' share)."""
    if section.reports and all(r.get("backend") == "jax" for r in section.reports):
        return _jax_windows(section)
    rows = []
    for i, r in enumerate(section.reports):
        head = _window_head(r, i, 13, epoch=True)
        if r.get("status") != "ok":
            rows.append(head)
            continue
        rows.append(
            head
            + percent_cell("xla_time_fraction", r["xla_time_fraction"])
            + ms_cell("xla_time_s", r["xla_time_s"])
            + ms_cell("non_xla_op_time_s", r["non_xla_op_time_s"])
            + count_cell("xla_executions", r["xla_executions"])
            + count_cell("compilations", r["compilations"])
            + ms_cell("compile_time_s", r["compile_time_s"])
            + ms_cell("compile_thread_time_s", r.get("compile_thread_time_s"))
            + ms_cell("input_pipeline_time_s", r["input_pipeline_time_s"])
            + ms_cell("transfer_time_s", r.get("transfer_time_s"))
            + ms_cell("collective_time_s", r.get("collective_time_s"))
            + ms_cell("xla_run_span_s", r.get("xla_run_span_s"))
            + count_cell("steps_profiled", r.get("steps_profiled"))
            + f'<td class="name">{escape(", ".join(r.get("hosts") or ()))}</td></tr>'
        )
    ok = [(i, r) for i, r in enumerate(section.reports) if r.get("status") == "ok"]
    figure = (
        plots.coverage([label(r, i) for i, r in ok], [r["xla_time_fraction"] for _, r in ok]) if ok else ""
    )
    return (
        "<h3>XLA coverage per profiled epoch</h3>"
        + figure
        + table(
            [
                "window",
                "XLA share",
                "XLA time",
                "plain TF ops",
                "launches",
                "compilations",
                "compile time",
                "compile, summed over threads",
                "input pipeline",
                "device transfers",
                "collectives",
                "XLA run spans",
                "steps",
                "hosts",
            ],
            rows,
            "coverage",
        )
        + notes_list(section.reports)
    )


def _programs(section: RunData) -> str:
    """Each measured window's XLA programs with their device time and runs (device traces only)."""
    rows = [
        f'<tr class="program" data-report="{i}" data-program="{escape(p["program"])}">'
        f'<td>{escape(label(r, i))}</td><td class="name">{escape(p["program"])}</td>'
        + ms_cell("time_s", p["time_s"], 3)
        + count_cell("runs", p["runs"])
        + f"<td>{'yes' if p.get('per_op', True) else 'no: command buffers'}</td>"
        + "</tr>"
        for i, r in enumerate(section.reports)
        if r.get("status") == "ok"
        for p in r.get("programs") or ()
    ]
    if not rows:
        return ""
    return (
        "<h3>XLA programs on the device</h3>"
        '<p class="muted">Device time of each XLA program\'s runs (the busy time of their kernels, idle '
        "gaps left out), and whether the trace splits it per op (kernels inside CUDA graphs do not say "
        "which op they ran).</p>"
        + table(["window", "program", "device time", "runs", "per op"], rows, "programs")
        + _xla_ops(section)
    )


def _devices(section: RunData) -> str:
    """Each device's figures, for the windows whose totals add up several devices."""
    rows = [
        f'<tr class="device" data-report="{i}" data-device="{escape(d["device"])}">'
        f"<td>{escape(label(r, i))}</td>"
        f'<td class="name">{escape((d.get("host") or "") + d["device"] if len({x.get("host") for x in r["devices"]}) > 1 else d["device"])}</td>'
        + percent_cell("xla_time_fraction", d["xla_time_fraction"])
        + ms_cell("xla_time_s", d["xla_time_s"], 3)
        + ms_cell("xla_run_span_s", d.get("xla_run_span_s"))
        + ms_cell("non_xla_op_time_s", d["non_xla_op_time_s"], 3)
        + count_cell("launches", d["launches"])
        + ms_cell("transfer_time_s", d.get("transfer_time_s"))
        + "</tr>"
        for i, r in enumerate(section.reports)
        if r.get("status") == "ok" and len(r.get("devices") or ()) > 1
        for d in r["devices"]
    ]
    if not rows:
        return ""
    return (
        "<h3>Per device</h3>"
        '<p class="muted">The totals above add up these devices; each device\'s XLA share is its own XLA '
        "time (busy time of its XLA kernels) over its XLA and plain-op time.</p>"
        + table(
            ["window", "device", "XLA share", "XLA time", "run span", "plain ops", "launches", "transfers"],
            rows,
            "devices",
        )
    )


def _xla_ops(section: RunData) -> str:
    """The top ops inside XLA of the window with the most XLA time."""
    ok = [(i, r) for i, r in enumerate(section.reports) if r.get("status") == "ok" and r.get("top_xla_ops")]
    if not ok:
        return ""
    i, report = max(ok, key=lambda item: (item[1]["xla_time_s"], -item[0]))
    rows = [
        f'<tr class="xla-op" data-rank="{n}"><td class="num">{n}</td><td class="name">{escape(op["op_type"])}</td>'
        f'<td class="name">{escape(op["op_name"])}</td>'
        + ms_cell("self_time_s", op["self_time_s"], 3)
        + count_cell("count", op["count"])
        + "</tr>"
        for n, op in enumerate(report["top_xla_ops"], 1)
    ]
    return f"<h3>Top ops inside XLA by device time ({escape(label(report, i))})</h3>" + table(
        ["#", "op", "op name", "device time", "kernels"], rows, "xla-ops"
    )


def _quality(section: RunData) -> str:
    """Each window's trace quality entries: what limits its figures and what restores them."""
    items = [
        f'<li class="quality" data-report="{i}" data-code="{escape(q["code"])}"><strong>{escape(label(r, i))}, '
        f"{escape(q['code'])}</strong>: {escape(q['detail'])}.<br>Cost: {escape(q['cost'])}.<br>"
        f"For a diagnostic run: <code>{escape(q['remedy'])}</code></li>"
        for i, r in enumerate(section.reports)
        if r.get("status") == "ok"
        for q in r.get("trace_quality") or ()
    ]
    if not items:
        return ""
    return (
        "<h3>Trace quality</h3>"
        '<p class="muted">Conditions of the trace that limit what the figures above can say.</p>'
        '<ul class="trace-quality">' + "".join(items) + "</ul>"
    )


def _top_ops(section: RunData, plots: Plots) -> str:
    """The plain ops outside XLA of the window with the most of them: the findings, the rest as one row."""
    ok = [(i, r) for i, r in enumerate(section.reports) if r.get("status") == "ok"]
    if not ok or all(r.get("backend") == "jax" for _, r in ok):
        # Under JAX no op runs outside an XLA program.
        return ""
    # The window with the most time outside XLA is the one to fix first.
    i, report = max(ok, key=lambda item: (item[1]["non_xla_op_time_s"], -item[0]))
    ops = report.get("top_non_xla_ops") or []
    heading = f"<h3>Top ops outside XLA by self time ({escape(label(report, i))})</h3>"
    if not ops:
        return heading + '<p class="muted">No plain TF op ran outside XLA in this window.</p>'
    split = split_findings(
        ops, lambda op: op["self_time_s"], report["xla_time_s"], report["non_xla_op_time_s"]
    )
    below = f"each below {NOISE_FLOOR:.0%} of the window's op time, the noise floor (docs/coverage.md)"
    if not split.findings:
        plain = report["non_xla_op_time_s"]
        return heading + (
            f'<p class="muted" id="noise-floor" data-value="{escape(json.dumps(plain))}">No plain TF op outside '
            f"XLA is a finding in this window: {escape(format_ms(plain, 3))} of plain ops, {escape(below)}.</p>"
        )
    shown = split.findings[:_TOP_OPS_PLOTTED]
    figure = plots.top_ops([_chart_label(op) for op in shown], [op["self_time_s"] for op in shown])
    rows = [
        f'<tr class="op" data-rank="{n}"><td class="num">{n}</td><td class="name">{escape(op["op_type"])}</td>'
        f'<td class="name layer">{escape(_layer(op))}</td><td class="name">{escape(op["op_name"])}</td>'
        + ms_cell("self_time_s", op["self_time_s"], 3)
        + count_cell("count", op["count"])
        + "</tr>"
        for n, op in enumerate(split.findings, 1)
    ]
    if split.other_s > 0:
        noise = len(split.findings) < len(ops)
        rows.append(
            '<tr class="op other"><td class="num"></td><td class="name">other</td>'
            f'<td colspan="2">other plain ops{escape(f" ({below})") if noise else ""}</td>'
            + ms_cell("self_time_s", split.other_s, 3)
            + "<td></td></tr>"
        )
    return (
        heading + figure + table(["#", "op type", "layer", "op name", "self time", "count"], rows, "top-ops")
    )


def window_parts(section: RunData, plots: Plots) -> list[str]:
    """The sections of a worker's profiled windows, in page order.

    Args:
        section: The worker's (or the run's) data.
        plots: The page's plots.

    Returns:
        Each section's HTML, `""` for one the run has nothing for.
    """
    return [
        _coverage(section, plots),
        _quality(section),
        _programs(section),
        _devices(section),
        _top_ops(section, plots),
    ]
