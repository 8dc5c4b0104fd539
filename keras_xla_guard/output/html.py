"""One self-contained HTML page of a run: verdict, plots and tables.

Pure: run data (`output.runfile.RunData`: the dicts `CoverageReport.to_dict()`
and `EpochSignatures.to_dict()` give, per worker, and
`CompareReport.to_dict()`) in, HTML text out. No script, no stylesheet or font to fetch: the plots are
matplotlib figures inlined as SVG, so the file opens offline, in a CI
artifact viewer or attached to a bug report (docs/html-report.md).

Every string that comes from a trace or a user (op names, input paths,
messages, worker and file names) is escaped twice over: characters a
terminal or a page would not show as themselves (control and bidi
characters) become visible Python escapes, then HTML's specials become
entities. The numbers sit in `data-value` attributes (exact JSON values),
so a test or a script can read them back from the page.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from keras_xla_guard.errors import MissingDependencyError
from keras_xla_guard.output.run_summary import run_headline
from keras_xla_guard.output.runfile import RunData
from keras_xla_guard.output.table import format_ms, printable
from keras_xla_guard.trace.findings import NOISE_FLOOR, split_findings

__all__ = [
    "escape",
    "render_html",
]

_NEW_KINDS = ("first_signature", "new_signature")
_TOP_OPS_PLOTTED = 10
_XLA_COLOR, _PLAIN_COLOR, _LINE_COLOR = "#2e7d32", "#c62828", "#1565c0"


def escape(text: Any) -> str:
    """Escapes any value for HTML text or a quoted attribute, on one line.

    Control, format and other non-printable characters become visible
    Python escapes (`\\x1b`, `\\u202e`, `\\n`) first, so no name can hide
    text, reorder it or break a line; then `&`, `<`, `>`, `"` and `'`
    become entities.

    Args:
        text: Any value; converted with `str`.

    Returns:
        The escaped text.

    Example:

    ```python
    from keras_xla_guard.output.html import escape

    escape("<b>\\x1b")  # '&lt;b&gt;\\\\x1b'
    ```
    """
    return html.escape(printable(str(text)), quote=True)


def render_html(
    sections: Sequence[RunData],
    *,
    exit_reason: str,
    verdict: tuple[str, str] | None = None,
    compare: Mapping[str, Any] | None = None,
    title: str = "keras-xla-guard report",
    source: str = "",
    tool_version: str = "",
) -> str:
    """Renders the report page.

    Args:
        sections: One per worker (one for a single-worker run).
        exit_reason: How the run or the command ended, in one sentence.
        verdict: `(level, sentence)` for the top of the page. Defaults to
            `None`: the run's headline (`run_summary.run_headline`): its
            worst finding over every epoch, recompilations first.
        compare: `CompareReport.to_dict()` of a `compare` run for the same
            model, if there is one. Defaults to `None`.
        title: The page title. Defaults to `"keras-xla-guard report"`.
        source: Where the figures come from (a log dir), shown under the
            title. Defaults to `""`.
        tool_version: The package version, shown in the footer.
            Defaults to `""`.

    Returns:
        The HTML document.

    Raises:
        MissingDependencyError: If matplotlib is not installed.
    """
    plots = _Plots()
    if verdict is None:
        headline = run_headline(sections)
        verdict = (headline.level, headline.sentence)
    level, sentence = verdict
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="source">{escape(source)}</p>' if source else "",
        f'<section class="verdict {escape(level)}" id="verdict" data-level="{escape(level)}">'
        f'<p class="headline">{escape(sentence)}</p>'
        f'<p class="exit" id="exit-reason">{escape(exit_reason)}</p></section>',
    ]
    if len(sections) > 1:
        body.append(_workers_overview(sections))
    for index, section in enumerate(sections):
        body.append(_section(section, index, plots))
    if compare is not None:
        body.append(_compare(compare, plots))
    footer = f"keras-xla-guard {escape(tool_version)}" if tool_version else "keras-xla-guard"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        # No fetch of any kind: the page is its own file.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>"
        + "\n".join(part for part in body if part)
        + f"\n<footer>Written by {footer}. Self-contained: no script, no network.</footer>"
        "</body></html>\n"
    )


# --------------------------------------------------------------------- parts

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1100px;
padding:1.5rem;color:#1f2328;line-height:1.45}
h1{font-size:1.6rem;margin:0 0 .2rem}h2{margin-top:2.2rem;border-bottom:1px solid #d0d7de}
h3{margin-top:1.6rem}.source{color:#57606a;margin:0 0 1rem;overflow-wrap:anywhere}
.verdict{border-radius:6px;padding:.8rem 1.1rem;border-left:6px solid}
.verdict p{margin:.2rem 0}.headline{font-size:1.2rem;font-weight:600}
.good{background:#e8f5e9;border-color:#2e7d32}.partial{background:#fff8e1;border-color:#f9a825}
.low,.none,.recompiles{background:#ffebee;border-color:#c62828}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}.table-wrap{overflow-x:auto}
td.name{min-width:12ch}
th,td{border:1px solid #d0d7de;padding:.25rem .55rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.name{overflow-wrap:anywhere;font-family:ui-monospace,monospace;font-size:.85rem}
figure{margin:.6rem 0}figure svg{width:100%;height:auto}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;font-size:.85rem}
.muted{color:#57606a}footer{margin-top:3rem;color:#57606a;font-size:.8rem}
"""


def _label(report: Mapping[str, Any], index: int) -> str:
    epoch = report.get("epoch")
    return f"epoch {epoch}" if epoch is not None else f"trace {index + 1}"


def _window(report: Mapping[str, Any], index: int) -> str:
    """A window's label in its coverage row, with what its totals add up when several devices or hosts."""
    totals = report.get("totals")
    return f"{_label(report, index)} ({totals})" if totals else _label(report, index)


def _num(field: str, value: Any, text: str) -> str:
    """A table cell showing `text` whose exact value is `data-value` (JSON)."""
    return (
        f'<td class="num" data-field="{escape(field)}" data-value="{escape(json.dumps(value))}">'
        f"{escape(text)}</td>"
    )


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


def _table(header: Sequence[str], rows: Sequence[str], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    attr = f' class="{cls}"' if cls else ""
    # A narrow screen scrolls a wide table sideways instead of crushing its columns.
    table = f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f'<div class="table-wrap">{table}</div>'


def _workers_overview(sections: Sequence[RunData]) -> str:
    rows = []
    for s in sections:
        ok = [r for r in s.reports if r.get("status") == "ok"]
        lowest = min(ok, key=lambda r: r["xla_time_fraction"]) if ok else None
        rows.append(
            f'<tr data-worker="{escape(s.name)}"><td class="name">{escape(s.name)}</td>'
            + (
                _num(
                    "lowest_xla_time_fraction",
                    lowest["xla_time_fraction"],
                    f"{100 * lowest['xla_time_fraction']:.1f}%",
                )
                if lowest
                else "<td>-</td>"
            )
            + _num("profiled_windows", len(s.reports), str(len(s.reports)))
            + "</tr>"
        )
    return (
        '<section id="workers"><h2>Workers</h2>'
        + _table(["worker", "lowest XLA share", "profiled windows"], rows)
        + "</section>"
    )


def _section(section: RunData, index: int, plots: _Plots) -> str:
    name = section.name
    anchor = f"worker-{index}" if name else "run"
    parts = [f'<section class="worker" id="{anchor}" data-worker="{escape(name)}">']
    if name:
        parts.append(f"<h2>Worker {escape(name)}</h2>")
    parts.append(_coverage(section, plots))
    parts.append(_quality(section))
    parts.append(_programs(section))
    parts.append(_devices(section))
    parts.append(_top_ops(section, plots))
    parts.append(_run_compilations(section))
    parts.append(_compilations(section, plots))
    parts.append(_functions(section))
    # The run's compilations hold the windows' (their times joined); a page of bare traces has only these.
    parts.append("" if section.compilations else _compile_table(section))
    parts.append(_signatures(section))
    parts.append("</section>")
    return "\n".join(parts)


def _jax_windows(section: RunData) -> str:
    """The profiled windows of a JAX run: the programs' share of each window, not a coverage."""
    from keras_xla_guard.trace._text import JAX_COVERAGE_NOTE, jax_busy
    from keras_xla_guard.trace.report import CoverageReport

    rows = []
    for i, r in enumerate(section.reports):
        label = _window(r, i)
        head = f'<tr class="report" data-index="{i}"><td>{escape(label)}</td>'
        if r.get("status") != "ok":
            rows.append(
                head + f'<td colspan="6">{escape(r.get("status"))}: {escape(r.get("reason"))}</td></tr>'
            )
            continue
        busy = jax_busy(CoverageReport.from_dict(dict(r)))
        steps = r.get("steps_profiled")
        rows.append(
            head
            + _num(
                "busy", None if busy is None else busy[0], "-" if busy is None else f"{100 * busy[0]:.1f}%"
            )
            + _num("xla_time_s", r["xla_time_s"], format_ms(r["xla_time_s"], 2))
            + _num(
                "host_gap_s",
                None if busy is None else busy[1],
                "-" if busy is None else format_ms(busy[1], 2),
            )
            + _num("xla_executions", r["xla_executions"], str(r["xla_executions"]))
            + _num("compilations", r["compilations"], str(r["compilations"]))
            + _num("steps_profiled", steps, "-" if steps is None else str(steps))
            + "</tr>"
        )
    notes = sorted({n for r in section.reports for n in r.get("notes") or ()})
    return (
        "<h3>XLA programs per profiled window (JAX)</h3>"
        f'<p class="muted jax-note">{escape(JAX_COVERAGE_NOTE[0].upper() + JAX_COVERAGE_NOTE[1:])}.</p>'
        + _table(
            ["window", "busy", "program time", "host between programs", "launches", "compilations", "steps"],
            rows,
            "coverage",
        )
        + ('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>" if notes else "")
    )


def _run_compilations(section: RunData) -> str:
    """Every compilation of the run, per epoch and function, with its phases where they were timed."""
    from keras_xla_guard.output.run_summary import run_compilations

    rows, others = [], []
    for epoch in section.compilations:
        for n, c in enumerate(epoch.get("rows") or ()):
            if c.get("function") == "other":
                others.append(str(c.get("program")))
                continue
            step, where = c.get("step"), "before epoch 0" if c.get("epoch") is None else str(epoch["epoch"])
            rows.append(
                f'<tr class="counted" data-epoch="{int(epoch["epoch"])}" data-index="{n}" '
                f'data-function="{escape(c.get("function"))}"><td>{escape(where)}</td>'
                + f'<td class="name">{escape(c.get("function"))}</td><td class="name">{escape(c.get("program"))}</td>'
                + _num("step", step, "-" if step is None else str(step))
                + "".join(
                    _num(k, c.get(k), "-" if c.get(k) is None else format_ms(c[k], 1))
                    for k in ("trace_s", "lower_s", "compile_s")
                )
                + f"<td>{'yes' if c.get('cache_hit') else 'no'}</td>"
                + f'<td class="name">{escape(c.get("signature") or "-")}</td></tr>'
            )
    if not rows:
        return ""
    counted = run_compilations(section)
    how = (
        "as JAX reported each one (jax.monitoring), with its tracing, lowering and compiling time"
        if counted.source == "counted"
        else "one per new input signature of a function compiled with XLA (TensorFlow reports no "
        "compilation outside its profiler), with the compile time where a profiled window measured it"
    )
    names = sorted(set(others), key=others.index)
    other = (
        f'<p class="muted" id="other-programs">Not listed: {len(others)} small program(s) Keras or your '
        f"code compiled outside the model's steps ({escape(', '.join(names))}).</p>"
        if others
        else ""
    )
    return (
        "<h3>Every compilation of the run</h3>"
        f'<p class="muted" id="run-compilations" data-total="{counted.total}">'
        f"Every epoch's compilations, {escape(how)}.</p>"
        + _table(
            [
                "epoch",
                "function",
                "program",
                "step",
                "trace",
                "lower",
                "compile",
                "cache hit",
                "input signature",
            ],
            rows,
            "counted",
        )
        + other
    )


def _coverage(section: RunData, plots: _Plots) -> str:
    if section.reports and all(r.get("backend") == "jax" for r in section.reports):
        return _jax_windows(section)
    rows = []
    for i, r in enumerate(section.reports):
        label = _window(r, i)
        epoch_attr = "" if r.get("epoch") is None else f' data-epoch="{int(r["epoch"])}"'
        head = f'<tr class="report" data-index="{i}"{epoch_attr}><td>{escape(label)}</td>'
        if r.get("status") != "ok":
            rows.append(
                head + f'<td colspan="13">{escape(r.get("status"))}: {escape(r.get("reason"))}</td></tr>'
            )
            continue
        steps = r.get("steps_profiled")
        rows.append(
            head
            + _num("xla_time_fraction", r["xla_time_fraction"], f"{100 * r['xla_time_fraction']:.1f}%")
            + _num("xla_time_s", r["xla_time_s"], format_ms(r["xla_time_s"], 2))
            + _num("non_xla_op_time_s", r["non_xla_op_time_s"], format_ms(r["non_xla_op_time_s"], 2))
            + _num("xla_executions", r["xla_executions"], str(r["xla_executions"]))
            + _num("compilations", r["compilations"], str(r["compilations"]))
            + _num("compile_time_s", r["compile_time_s"], format_ms(r["compile_time_s"], 2))
            + _optional_ms("compile_thread_time_s", r.get("compile_thread_time_s"))
            + _num(
                "input_pipeline_time_s", r["input_pipeline_time_s"], format_ms(r["input_pipeline_time_s"], 2)
            )
            + _optional_ms("transfer_time_s", r.get("transfer_time_s"))
            + _optional_ms("collective_time_s", r.get("collective_time_s"))
            + _optional_ms("xla_run_span_s", r.get("xla_run_span_s"))
            + _num("steps_profiled", steps, "-" if steps is None else str(steps))
            + f'<td class="name">{escape(", ".join(r.get("hosts") or ()))}</td></tr>'
        )
    notes = sorted({n for r in section.reports for n in r.get("notes") or ()})
    ok = [(i, r) for i, r in enumerate(section.reports) if r.get("status") == "ok"]
    figure = (
        plots.coverage([_label(r, i) for i, r in ok], [r["xla_time_fraction"] for _, r in ok]) if ok else ""
    )
    return (
        "<h3>XLA coverage per profiled epoch</h3>"
        + figure
        + _table(
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
        + ('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>" if notes else "")
    )


def _optional_ms(field: str, value: float | None) -> str:
    """A duration cell that shows `-` for a figure the window has not got (`null`)."""
    return _num(field, value, "-" if value is None else format_ms(value, 2))


def _programs(section: RunData) -> str:
    """Each measured window's XLA programs with their device time and runs (device traces only)."""
    rows = [
        f'<tr class="program" data-report="{i}" data-program="{escape(p["program"])}">'
        f'<td>{escape(_label(r, i))}</td><td class="name">{escape(p["program"])}</td>'
        + _num("time_s", p["time_s"], format_ms(p["time_s"], 3))
        + _num("runs", p["runs"], str(p["runs"]))
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
        + _table(["window", "program", "device time", "runs", "per op"], rows, "programs")
        + _xla_ops(section)
    )


def _devices(section: RunData) -> str:
    """Each device's figures, for the windows whose totals add up several devices."""
    rows = [
        f'<tr class="device" data-report="{i}" data-device="{escape(d["device"])}">'
        f"<td>{escape(_label(r, i))}</td>"
        f'<td class="name">{escape((d.get("host") or "") + d["device"] if len({x.get("host") for x in r["devices"]}) > 1 else d["device"])}</td>'
        + _num("xla_time_fraction", d["xla_time_fraction"], f"{100 * d['xla_time_fraction']:.1f}%")
        + _num("xla_time_s", d["xla_time_s"], format_ms(d["xla_time_s"], 3))
        + _optional_ms("xla_run_span_s", d.get("xla_run_span_s"))
        + _num("non_xla_op_time_s", d["non_xla_op_time_s"], format_ms(d["non_xla_op_time_s"], 3))
        + _num("launches", d["launches"], str(d["launches"]))
        + _optional_ms("transfer_time_s", d.get("transfer_time_s"))
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
        + _table(
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
        + _num("self_time_s", op["self_time_s"], format_ms(op["self_time_s"], 3))
        + _num("count", op["count"], str(op["count"]))
        + "</tr>"
        for n, op in enumerate(report["top_xla_ops"], 1)
    ]
    return f"<h3>Top ops inside XLA by device time ({escape(_label(report, i))})</h3>" + _table(
        ["#", "op", "op name", "device time", "kernels"], rows, "xla-ops"
    )


def _quality(section: RunData) -> str:
    """Each window's trace quality entries: what limits its figures and what restores them."""
    items = [
        f'<li class="quality" data-report="{i}" data-code="{escape(q["code"])}"><strong>{escape(_label(r, i))}, '
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


def _top_ops(section: RunData, plots: _Plots) -> str:
    ok = [(i, r) for i, r in enumerate(section.reports) if r.get("status") == "ok"]
    if not ok or all(r.get("backend") == "jax" for _, r in ok):
        # Under JAX no op runs outside an XLA program.
        return ""
    # The window with the most time outside XLA is the one to fix first.
    i, report = max(ok, key=lambda item: (item[1]["non_xla_op_time_s"], -item[0]))
    ops = report.get("top_non_xla_ops") or []
    heading = f"<h3>Top ops outside XLA by self time ({escape(_label(report, i))})</h3>"
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
        + _num("self_time_s", op["self_time_s"], format_ms(op["self_time_s"], 3))
        + _num("count", op["count"], str(op["count"]))
        + "</tr>"
        for n, op in enumerate(split.findings, 1)
    ]
    if split.other_s > 0:
        noise = len(split.findings) < len(ops)
        rows.append(
            '<tr class="op other"><td class="num"></td><td class="name">other</td>'
            f'<td colspan="2">other plain ops{escape(f" ({below})") if noise else ""}</td>'
            + _num("self_time_s", split.other_s, format_ms(split.other_s, 3))
            + "<td></td></tr>"
        )
    return (
        heading + figure + _table(["#", "op type", "layer", "op name", "self time", "count"], rows, "top-ops")
    )


def _events(section: RunData) -> tuple[list[dict[str, Any]], list[tuple[int, int]]]:
    """Each compilation of the run at the step it happened, and the cumulative count's corners.

    The run's compilation rows (every function: a warm-up's at step 0, a
    validation's at the end of its epoch's train steps) where the run file
    has them; else each new signature of an epoch (`new`), a file from
    before they existed. A train compilation's message is its signature's
    explanation when the tracker wrote one (the first few of an epoch).
    """
    explained = {
        (stats["epoch"], f["step"]): f["message"]
        for stats in section.signatures
        for f in stats.get("explanations") or ()
        if f.get("kind") in _NEW_KINDS and f.get("step") is not None
    }
    steps = {int(stats["epoch"]): int(stats.get("steps") or 0) for stats in section.signatures}
    if section.compilations:
        by_epoch = {
            int(epoch["epoch"]): [
                (r.get("function"), r.get("step"), r.get("signature"))
                for r in epoch.get("rows") or ()
                if r.get("function") != "other"
            ]
            for epoch in section.compilations
        }
    else:
        by_epoch = {
            int(stats["epoch"]): [
                ("train", entry.get("step"), _format_signature(entry.get("signature") or {}))
                for entry in stats.get("new") or ()
            ]
            for stats in section.signatures
        }
    events: list[dict[str, Any]] = []
    curve = [(0, 0)]
    offset = 0
    for epoch in sorted(set(by_epoch) | set(steps)):
        length = steps.get(epoch, 0)
        for function, step, signature in by_epoch.get(epoch, ()):
            where = (
                0
                if function == "warm_up"
                else offset + (step or 0)
                if function == "train"
                else offset + length
            )
            message = explained.get((epoch, step)) if function == "train" else None
            what = f"{function} compiled" + (f" at step {step}" if step is not None else "")
            if signature is None:
                why = "before the first epoch" if function == "warm_up" else "with no new input signature"
                message = message or f"{what} {why}"
            events.append(
                {
                    "epoch": epoch,
                    "function": function,
                    "step": step,
                    "global_step": where,
                    "message": message or f"{what}: {signature or 'signature not recorded'}",
                }
            )
        offset += length
        curve.append((offset, len(events)))
    return events, curve


def _findings(section: RunData) -> str:
    """The epochs' findings (what varied, the fix), each once with the epochs it came in."""
    found: dict[tuple[str, str, str], list[Any]] = {}
    for stats in section.signatures:
        for f in stats.get("explanations") or ():
            if f.get("kind") not in _NEW_KINDS:
                key = (str(f.get("kind")), str(f.get("message")), str(f.get("fix_code") or ""))
                found.setdefault(key, []).append(stats["epoch"])
    items = []
    for (kind, message, code), epochs in found.items():
        label = f"epoch{'s' if len(epochs) > 1 else ''} {', '.join(str(e) for e in epochs)}"
        items.append(
            f'<li data-kind="{escape(kind)}"><strong>{escape(label)}</strong>: {escape(message)}'
            + (f"<pre>{html.escape(_visible_code(code))}</pre>" if code else "")
            + "</li>"
        )
    return '<ul class="findings">' + "".join(items) + "</ul>" if items else ""


def _compilations(section: RunData, plots: _Plots) -> str:
    heading = "<h3>Compilations over steps</h3>"
    if not section.signatures and not section.compilations:
        return heading + (
            '<p class="muted">No input-signature figures for this run (signature tracking was off, '
            "or the log dir holds no xla_guard_reports.json). Measured compilations per profiled "
            "window are in the coverage table above.</p>"
        )
    events, curve = _events(section)
    xla = bool(section.compilations) or any(
        s.get("expected_compilations") is not None for s in section.signatures
    )
    epochs = sorted(
        {int(s["epoch"]) for s in section.signatures} | {int(c["epoch"]) for c in section.compilations}
    )
    figure = plots.timeline(curve, events, epochs, xla)
    rows = [
        f'<tr class="event" data-index="{n}" data-function="{escape(e["function"])}">'
        + _num("global_step", e["global_step"], str(e["global_step"]))
        + _num("epoch", e["epoch"], str(e["epoch"]))
        + f"<td>{escape(e['function'])}</td>"
        + _num("step", e["step"], "-" if e["step"] is None else str(e["step"]))
        + f'<td class="name">{escape(e["message"])}</td></tr>'
        for n, e in enumerate(events, 1)
    ]
    what = (
        "each mark is one XLA compilation: a warm-up's at step 0, a validation's at the end of its epoch"
        if xla
        else "the step is not compiled with XLA, so new signatures cost no compilation"
    )
    return (
        heading
        + f'<p class="muted">Compilations over the run\'s training steps ({what}).</p>'
        + figure
        + _table(["step (run)", "epoch", "function", "step", "what compiled"], rows, "events")
        + _findings(section)
    )


def _call_label(call: Mapping[str, Any]) -> str:
    kind = call.get("kind") or call.get("function")
    if kind == "validation":
        return f"validation, epoch {call.get('epoch')}"
    return f"{kind} call {call.get('call')}"


def _functions(section: RunData) -> str:
    """The expected compilations of each function (train, test, predict), and each test or predict call."""
    if not section.calls:
        return ""
    figures = [c.get("signatures") or {} for c in section.calls]
    per_function = {"train": ("epoch", list(section.signatures))}
    for function in ("test", "predict"):
        per_function[function] = (
            "call",
            [s for c, s in zip(section.calls, figures) if c.get("function") == function],
        )
    totals = []
    for function, (unit, entries) in per_function.items():
        if not entries:
            continue
        each = [s.get("expected_compilations") for s in entries]
        total = None if None in each else sum(e or 0 for e in each)
        steps = sum(int(s.get("steps") or 0) for s in entries)
        totals.append(
            f'<tr class="function" data-function="{escape(function)}"><td>{escape(function)}</td>'
            + _num("calls", len(entries), f"{len(entries)} {unit}{'s' if len(entries) != 1 else ''}")
            + _num("steps", steps, str(steps))
            + _num("expected_compilations", total, "-" if total is None else str(total))
            + "</tr>"
        )
    rows = []
    for n, (call, stats) in enumerate(zip(section.calls, figures)):
        head = (
            f'<tr class="call" data-index="{n}" data-function="{escape(call.get("function"))}" '
            f'data-kind="{escape(call.get("kind"))}"><td>{escape(_call_label(call))}</td>'
        )
        if not stats:
            why = call.get("signatures_unavailable") or "no step observed"
            rows.append(head + f'<td colspan="5">input signatures unavailable: {escape(why)}</td></tr>')
            continue
        expected = stats.get("expected_compilations")
        rows.append(
            head
            + _num("steps", stats["steps"], str(stats["steps"]))
            + _num("distinct_signatures", stats["distinct_signatures"], str(stats["distinct_signatures"]))
            + _num("new_signatures", stats["new_signatures"], str(stats["new_signatures"]))
            + _num("expected_compilations", expected, "-" if expected is None else str(expected))
            + _num("compilations_so_far", stats["compilations_so_far"], str(stats["compilations_so_far"]))
            + "</tr>"
        )
    return (
        "<h3>Compilations per function</h3>"
        '<p class="muted">Keras compiles its train, test (evaluate and validation) and predict functions '
        "each on its own: a batch shape the train function compiled is new to the test function. Each new "
        "input signature of a function is one XLA compilation of it.</p>"
        + _table(["function", "calls", "steps", "expected compilations"], totals, "functions")
        + _table(
            ["call", "steps", "distinct", "new", "expected compilations", "function's so far"], rows, "calls"
        )
    )


def _compile_table(section: RunData) -> str:
    """Each profiled window's compile table, and the test and predict calls' new signatures."""
    rows = []
    for i, r in enumerate(section.reports):
        for n, c in enumerate(r.get("compile_table") or ()):
            step, seconds = c.get("step"), c.get("compile_s")
            took = "cache hit" if c.get("cache_hit") else "-" if seconds is None else format_ms(seconds, 2)
            rows.append(
                f'<tr class="compile" data-report="{i}" data-index="{n}" data-function="train">'
                f"<td>{escape(_label(r, i))}</td><td>train</td>"
                + _num("step", step, "-" if step is None else str(step))
                + f'<td class="name">{escape(c.get("program"))}</td>'
                + _num("compile_s", seconds, took)
                + f'<td class="name">{escape(c.get("signature") or "-")}</td></tr>'
            )
    for i, call in enumerate(section.calls):
        stats = call.get("signatures") or {}
        if stats.get("expected_compilations") is None:
            continue
        for n, entry in enumerate(stats.get("new") or ()):
            step = entry.get("step")
            rows.append(
                f'<tr class="compile" data-call="{i}" data-index="{n}" data-function="{escape(call.get("function"))}">'
                f"<td>{escape(_call_label(call))}</td><td>{escape(call.get('function'))}</td>"
                + _num("step", step, "-" if step is None else str(step))
                + '<td class="name">-</td>'
                + _num("compile_s", None, "not profiled")
                + f'<td class="name">{escape(_format_signature(entry.get("signature") or {}))}</td></tr>'
            )
    if not rows:
        return ""
    return (
        "<h3>Compile table</h3>"
        '<p class="muted">Every XLA compilation of the profiled windows (wall-clock time), new '
        "input signatures that found their program already compiled (cache hits), and the compilations "
        "the test and predict functions' new signatures cause (not profiled: no compile time).</p>"
        + _table(
            ["window or call", "function", "step", "program", "compile time", "input signature"],
            rows,
            "compiles",
        )
    )


def _visible_code(code: str) -> str:
    """Code keeps its line breaks; every other unprintable character is escaped."""
    return "\n".join(printable(line) for line in code.split("\n"))


def _format_signature(sig: Mapping[str, Any]) -> str:
    """A signature dict of the run file as every output writes signatures (`Signature.__str__`)."""
    from keras_xla_guard.signatures.signature import Signature

    shapes = tuple(None if shape is None else tuple(shape) for shape in sig.get("shapes") or ())
    return str(Signature(tuple(sig.get("paths") or ()), shapes, tuple(sig.get("dtypes") or ())))


def _signatures(section: RunData) -> str:
    if not section.signatures:
        return ""
    rows = []
    for s in section.signatures:
        expected = s.get("expected_compilations")
        sigs = "<br>".join(escape(_format_signature(sig)) for sig in s.get("signatures") or ())
        rows.append(
            f'<tr class="epoch-signatures" data-epoch="{int(s["epoch"])}"><td>{escape(s["epoch"])}</td>'
            + _num("steps", s["steps"], str(s["steps"]))
            + _num("distinct_signatures", s["distinct_signatures"], str(s["distinct_signatures"]))
            + _num("new_signatures", s["new_signatures"], str(s["new_signatures"]))
            + _num("expected_compilations", expected, "-" if expected is None else str(expected))
            + _num("compilations_so_far", s["compilations_so_far"], str(s["compilations_so_far"]))
            + f"<td>{'yes' if s.get('short_last_batch') else 'no'}</td>"
            + f'<td class="name">{sigs}</td></tr>'
        )
    return "<h3>Input signatures per epoch</h3>" + _table(
        [
            "epoch",
            "steps",
            "distinct",
            "new",
            "expected compilations",
            "seen so far",
            "short last batch",
            "signatures (first seen first)",
        ],
        rows,
        "signatures",
    )


def _compare(compare: Mapping[str, Any], plots: _Plots) -> str:
    modes = compare.get("modes") or {}
    projected = compare.get("projected_run_s") or {}
    rows = []
    for name, m in modes.items():
        memory = m.get("peak_memory_bytes")
        rows.append(
            f'<tr class="mode" data-mode="{escape(name)}"><td>{escape(name)}</td>'
            + _num("step_time_s", m["step_time_s"], format_ms(m["step_time_s"], 2))
            + _num("startup_s", m["startup_s"], f"{m['startup_s']:.2f} s")
            + _num("compilations", m["compilations"], str(m["compilations"]))
            + _num("compile_time_s", m["compile_time_s"], f"{m['compile_time_s']:.2f} s")
            + _num("projected_run_s", projected.get(name), f"{projected.get(name, math.nan):.1f} s")
            + _num("peak_memory_bytes", memory, "-" if memory is None else f"{memory / 2**20:.1f} MiB")
            + "</tr>"
        )
    names = [n for n in modes if n in projected]
    figure = plots.projected(names, [projected[n] for n in names]) if names else ""
    return (
        '<section id="compare"><h2>Is XLA worth it? compare</h2>'
        f'<p class="headline" id="compare-verdict">{escape(compare.get("verdict", ""))}</p>'
        + figure
        + _table(
            [
                "mode",
                "step time",
                "startup",
                "compilations",
                "compile time",
                f"projected run ({compare.get('planned_steps')} steps)",
                "peak memory",
            ],
            rows,
            "compare",
        )
        + "</section>"
    )


# --------------------------------------------------------------------- plots


class _Plots:
    """matplotlib figures as inline SVG, each with its own id prefix."""

    def __init__(self) -> None:
        try:
            import matplotlib
        except ImportError:
            raise MissingDependencyError(
                "The HTML report draws its plots with matplotlib, which is not installed: "
                'pip install "keras-xla-guard[html]"'
            ) from None
        self._matplotlib = matplotlib
        self._count = 0

    def _figure(self, height: float) -> Any:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(9, height), layout="constrained")
        return fig, fig.add_subplot()

    def _svg(self, fig: Any, kind: str) -> str:
        self._count += 1
        prefix = f"kxg{self._count}-"
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
        svg = buf.getvalue()
        svg = svg[svg.index("<svg") :]
        # Several figures in one document: their ids (clip paths, markers) must not collide.
        svg = re.sub(r'(\bid="|url\(#|href="#)', rf"\g<1>{prefix}", svg)
        return f'<figure class="plot" data-plot="{kind}">{svg}</figure>'

    def _rc(self) -> Any:
        return self._matplotlib.rc_context(
            {
                # Text stays text (small, searchable); `$` in an op name is not math.
                "svg.fonttype": "none",
                "svg.hashsalt": "keras-xla-guard",
                "text.parse_math": False,
                "font.size": 10,
                "axes.spines.top": False,
                "axes.spines.right": False,
            }
        )

    def coverage(self, labels: Sequence[str], fractions: Sequence[float]) -> str:
        with self._rc():
            fig, ax = self._figure(2.8)
            xs = range(len(labels))
            percents = [100 * f for f in fractions]
            ax.bar(xs, percents, color=_XLA_COLOR, width=0.6, label="inside XLA")
            ax.bar(
                xs,
                [100 - p for p in percents],
                bottom=percents,
                color=_PLAIN_COLOR,
                alpha=0.35,
                width=0.6,
                label="plain TF ops",
            )
            for x, p in zip(xs, percents):
                ax.annotate(
                    f"{p:.1f}%",
                    (x, p),
                    ha="center",
                    va="bottom",
                    fontsize=9,
                    xytext=(0, 2),
                    textcoords="offset points",
                )
            ax.set_xticks(list(xs), [printable(label) for label in labels])
            # Room for five bars at least, so one profiled epoch is not one wide block.
            ax.set_xlim(-0.6, max(len(labels), 5) - 0.4)
            ax.set_ylim(0, 108)
            ax.set_ylabel("share of op time (%)")
            # Above the axes, beside each other: the axes keep the figure's whole width.
            ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.02), ncols=2, frameon=False, borderaxespad=0)
            return self._svg(fig, "coverage")

    def top_ops(self, labels: Sequence[str], seconds: Sequence[float]) -> str:
        with self._rc():
            fig, ax = self._figure(0.8 + 0.32 * len(labels))
            ys = list(range(len(labels)))[::-1]
            ax.barh(ys, [s * 1e3 for s in seconds], color=_PLAIN_COLOR)
            ax.set_yticks(ys, [printable(label) for label in labels], fontsize=8)
            ax.set_xlabel("self time (ms)")
            return self._svg(fig, "top_ops")

    def timeline(
        self,
        curve: Sequence[tuple[int, int]],
        events: Sequence[Mapping[str, Any]],
        epochs: Sequence[int],
        xla: bool,
    ) -> str:
        with self._rc():
            fig, ax = self._figure(2.8)
            xs, ys = [], []
            count, position = 0, 0
            corners = iter(curve[1:])
            pending = sorted(events, key=lambda e: e["global_step"])
            # A step curve: +1 at each compilation, the epoch's exact total
            # at its end (an old run file explains only its first few).
            xs.append(0)
            ys.append(0)
            for end, total in corners:
                for e in [e for e in pending if position <= e["global_step"] < end]:
                    count += 1
                    xs.append(e["global_step"])
                    ys.append(count)
                count = max(count, total)
                xs.append(end)
                ys.append(count)
                position = end
            ax.step(xs, ys, where="post", color=_LINE_COLOR)
            marks = [(e["global_step"], _y_at(xs, ys, e["global_step"])) for e in events]
            if marks:
                ax.plot(
                    [m[0] for m in marks],
                    [m[1] for m in marks],
                    "o",
                    color=_PLAIN_COLOR,
                    label="compilation",
                    gid="new-signatures",
                )
                for n, (x, y) in enumerate(marks, 1):
                    ax.annotate(str(n), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
            for (end, _), epoch in zip(curve[1:], epochs):
                ax.axvline(end, color="#8c959f", linewidth=0.6, linestyle=":")
                ax.annotate(
                    f"end of epoch {epoch}",
                    (end, 0),
                    xytext=(-3, 3),
                    textcoords="offset points",
                    rotation=90,
                    ha="right",
                    va="bottom",
                    fontsize=7,
                    color="#57606a",
                )
            ax.set_xlabel("training step (over the run)")
            ax.set_ylabel("XLA compilations" if xla else "input signatures")
            ax.set_ylim(0, max(ys) + 1)
            # Steps and compilations are counts: no 0.25 of either.
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            return self._svg(fig, "timeline")

    def projected(self, modes: Sequence[str], seconds: Sequence[float]) -> str:
        with self._rc():
            fig, ax = self._figure(0.8 + 0.4 * len(modes))
            ys = list(range(len(modes)))[::-1]
            best = min(seconds)
            ax.barh(ys, seconds, color=[_XLA_COLOR if s == best else "#8c959f" for s in seconds])
            for y, s in zip(ys, seconds):
                ax.annotate(f"{s:.1f} s", (s, y), xytext=(3, 0), textcoords="offset points", va="center")
            ax.set_yticks(ys, [printable(m) for m in modes])
            ax.set_xlabel("projected run (s)")
            return self._svg(fig, "compare")


def _y_at(xs: Sequence[int], ys: Sequence[int], x: int) -> int:
    """The step curve's value at `x` (the last corner at or before it)."""
    value = 0
    for cx, cy in zip(xs, ys):
        if cx <= x:
            value = cy
    return value
