"""The HTML report's document: its skeleton, its stylesheet, and `render_html`.

Run data (`output.runfile.RunData`) in, one page out: the verdict, then each
worker's sections (`window_sections`, `compile_sections`), then a
`compare` result. Pure; matplotlib is imported when rendering
(`plots.Plots`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from keras_xla_guard.output.html.compile_sections import compilation_parts
from keras_xla_guard.output.html.markup import count_cell, escape, ms_cell, num_cell, percent_cell, table
from keras_xla_guard.output.html.plots import Plots
from keras_xla_guard.output.html.window_sections import window_parts
from keras_xla_guard.output.run_summary import run_headline
from keras_xla_guard.output.runfile import RunData

__all__ = ["render_html"]


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
    plots = Plots()
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


def _workers_overview(sections: Sequence[RunData]) -> str:
    """A multi-worker run's table: each worker's lowest XLA share and its profiled windows."""
    rows = []
    for s in sections:
        ok = [r for r in s.reports if r.get("status") == "ok"]
        lowest = min(ok, key=lambda r: r["xla_time_fraction"]) if ok else None
        rows.append(
            f'<tr data-worker="{escape(s.name)}"><td class="name">{escape(s.name)}</td>'
            + (
                percent_cell("lowest_xla_time_fraction", lowest["xla_time_fraction"])
                if lowest
                else "<td>-</td>"
            )
            + count_cell("profiled_windows", len(s.reports))
            + "</tr>"
        )
    return (
        '<section id="workers"><h2>Workers</h2>'
        + table(["worker", "lowest XLA share", "profiled windows"], rows)
        + "</section>"
    )


def _section(section: RunData, index: int, plots: Plots) -> str:
    """One worker's (or the run's) sections: its profiled windows, then its compilations."""
    name = section.name
    anchor = f"worker-{index}" if name else "run"
    parts = [f'<section class="worker" id="{anchor}" data-worker="{escape(name)}">']
    if name:
        parts.append(f"<h2>Worker {escape(name)}</h2>")
    parts += [*window_parts(section, plots), *compilation_parts(section, plots), "</section>"]
    return "\n".join(parts)


def _compare(compare: Mapping[str, Any], plots: Plots) -> str:
    """A `compare` run's section: its verdict, each mode's figures and projected run."""
    modes = compare.get("modes") or {}
    projected = compare.get("projected_run_s") or {}
    rows = []
    for name, m in modes.items():
        memory = m.get("peak_memory_bytes")
        rows.append(
            f'<tr class="mode" data-mode="{escape(name)}"><td>{escape(name)}</td>'
            + ms_cell("step_time_s", m["step_time_s"])
            + num_cell("startup_s", m["startup_s"], f"{m['startup_s']:.2f} s")
            + count_cell("compilations", m["compilations"])
            + num_cell("compile_time_s", m["compile_time_s"], f"{m['compile_time_s']:.2f} s")
            + num_cell("projected_run_s", projected.get(name), f"{projected.get(name, math.nan):.1f} s")
            + num_cell("peak_memory_bytes", memory, "-" if memory is None else f"{memory / 2**20:.1f} MiB")
            + "</tr>"
        )
    names = [n for n in modes if n in projected]
    figure = plots.projected(names, [projected[n] for n in names]) if names else ""
    return (
        '<section id="compare"><h2>Is XLA worth it? compare</h2>'
        f'<p class="headline" id="compare-verdict">{escape(compare.get("verdict", ""))}</p>'
        + figure
        + table(
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
