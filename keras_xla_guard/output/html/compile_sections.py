"""The HTML report's sections of compilations and input signatures, per run and per function.

Each section is one function of a worker's `RunData`, returning its HTML
(`""` when the run has nothing for it); `compilation_parts` gives them in
page order. Pure.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from keras_xla_guard.output.html.markup import (
    count_cell,
    escape,
    format_signature,
    label,
    ms_cell,
    num_cell,
    table,
)
from keras_xla_guard.output.html.plots import Plots
from keras_xla_guard.output.run_summary import run_compilations
from keras_xla_guard.output.runfile import RunData
from keras_xla_guard.output.table import format_ms, printable

__all__ = ["compilation_parts"]

_NEW_KINDS = ("first_signature", "new_signature")
# An epoch's or a call's signature counts, in their columns' order.
_SIGNATURE_FIELDS = (
    "steps",
    "distinct_signatures",
    "new_signatures",
    "expected_compilations",
    "compilations_so_far",
)


def _run_compilations(section: RunData) -> str:
    """Every compilation of the run, per epoch and function, with its phases where they were timed."""
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
                + count_cell("step", step)
                + "".join(ms_cell(k, c.get(k), 1) for k in ("trace_s", "lower_s", "compile_s"))
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
        + table(
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
                ("train", entry.get("step"), format_signature(entry.get("signature") or {}))
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


def _compilations(section: RunData, plots: Plots) -> str:
    """The run's compilations over its training steps: the timeline, each one's row, the findings."""
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
        + count_cell("global_step", e["global_step"])
        + count_cell("epoch", e["epoch"])
        + f"<td>{escape(e['function'])}</td>"
        + count_cell("step", e["step"])
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
        + table(["step (run)", "epoch", "function", "step", "what compiled"], rows, "events")
        + _findings(section)
    )


def _call_label(call: Mapping[str, Any]) -> str:
    """A test or predict call's name: its validation's epoch, or its kind and number."""
    kind = call.get("kind") or call.get("function")
    if kind == "validation":
        return f"validation, epoch {call.get('epoch')}"
    return f"{kind} call {call.get('call')}"


def _functions(section: RunData) -> str:
    """The expected compilations of each function (train, test, predict), and each test or predict call."""
    if not section.calls:
        return ""
    figures = [c.get("signatures") or {} for c in section.calls]
    per_function = {"train": ("epoch", list(section.signatures))} | {
        f: ("call", [s for c, s in zip(section.calls, figures) if c.get("function") == f])
        for f in ("test", "predict")
    }
    totals = []
    for function, (unit, entries) in per_function.items():
        if not entries:
            continue
        each = [s.get("expected_compilations") for s in entries]
        total = None if None in each else sum(e or 0 for e in each)
        steps = sum(int(s.get("steps") or 0) for s in entries)
        totals.append(
            f'<tr class="function" data-function="{escape(function)}"><td>{escape(function)}</td>'
            + num_cell("calls", len(entries), f"{len(entries)} {unit}{'s' if len(entries) != 1 else ''}")
            + count_cell("steps", steps)
            + count_cell("expected_compilations", total)
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
        rows.append(head + _signature_cells(stats) + "</tr>")
    return (
        "<h3>Compilations per function</h3>"
        '<p class="muted">Keras compiles its train, test (evaluate and validation) and predict functions '
        "each on its own: a batch shape the train function compiled is new to the test function. Each new "
        "input signature of a function is one XLA compilation of it.</p>"
        + table(["function", "calls", "steps", "expected compilations"], totals, "functions")
        + table(
            ["call", "steps", "distinct", "new", "expected compilations", "function's so far"], rows, "calls"
        )
    )


def _compile_table(section: RunData) -> str:
    """Each profiled window's compile table, and the test and predict calls' new signatures."""
    rows = []
    for i, r in enumerate(section.reports):
        for n, c in enumerate(r.get("compile_table") or ()):
            seconds = c.get("compile_s")
            took = "cache hit" if c.get("cache_hit") else "-" if seconds is None else format_ms(seconds, 2)
            rows.append(
                f'<tr class="compile" data-report="{i}" data-index="{n}" data-function="train">'
                f"<td>{escape(label(r, i))}</td><td>train</td>"
                + count_cell("step", c.get("step"))
                + f'<td class="name">{escape(c.get("program"))}</td>'
                + num_cell("compile_s", seconds, took)
                + f'<td class="name">{escape(c.get("signature") or "-")}</td></tr>'
            )
    for i, call in enumerate(section.calls):
        stats = call.get("signatures") or {}
        if stats.get("expected_compilations") is None:
            continue
        for n, entry in enumerate(stats.get("new") or ()):
            rows.append(
                f'<tr class="compile" data-call="{i}" data-index="{n}" data-function="{escape(call.get("function"))}">'
                f"<td>{escape(_call_label(call))}</td><td>{escape(call.get('function'))}</td>"
                + count_cell("step", entry.get("step"))
                + '<td class="name">-</td>'
                + num_cell("compile_s", None, "not profiled")
                + f'<td class="name">{escape(format_signature(entry.get("signature") or {}))}</td></tr>'
            )
    if not rows:
        return ""
    return (
        "<h3>Compile table</h3>"
        '<p class="muted">Every XLA compilation of the profiled windows (wall-clock time), new '
        "input signatures that found their program already compiled (cache hits), and the compilations "
        "the test and predict functions' new signatures cause (not profiled: no compile time).</p>"
        + table(
            ["window or call", "function", "step", "program", "compile time", "input signature"],
            rows,
            "compiles",
        )
    )


def _visible_code(code: str) -> str:
    """Code keeps its line breaks; every other unprintable character is escaped."""
    return "\n".join(printable(line) for line in code.split("\n"))


def _signature_cells(stats: Mapping[str, Any]) -> str:
    """An epoch's or a call's signature counts, one cell each."""
    return "".join(
        count_cell(field, stats.get(field) if field == "expected_compilations" else stats[field])
        for field in _SIGNATURE_FIELDS
    )


def _signatures(section: RunData) -> str:
    """Each epoch's signature counts and its signatures, first seen first."""
    if not section.signatures:
        return ""
    rows = []
    for s in section.signatures:
        sigs = "<br>".join(escape(format_signature(sig)) for sig in s.get("signatures") or ())
        rows.append(
            f'<tr class="epoch-signatures" data-epoch="{int(s["epoch"])}"><td>{escape(s["epoch"])}</td>'
            + _signature_cells(s)
            + f"<td>{'yes' if s.get('short_last_batch') else 'no'}</td>"
            + f'<td class="name">{sigs}</td></tr>'
        )
    return "<h3>Input signatures per epoch</h3>" + table(
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


def compilation_parts(section: RunData, plots: Plots) -> list[str]:
    """The sections of a worker's compilations and input signatures, in page order.

    Args:
        section: The worker's (or the run's) data.
        plots: The page's plots.

    Returns:
        Each section's HTML, `""` for one the run has nothing for.
    """
    return [
        _run_compilations(section),
        _compilations(section, plots),
        _functions(section),
        # The run's compilations hold the windows' (their times joined); a page of bare traces has only these.
        "" if section.compilations else _compile_table(section),
        _signatures(section),
    ]
