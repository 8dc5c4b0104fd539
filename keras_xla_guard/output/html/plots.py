"""The HTML report's plots: matplotlib figures inlined as SVG.

No script, no font to fetch: each figure is SVG text whose ids are made
unique on the page, with text kept as text. matplotlib is imported when a
page is rendered, and a missing matplotlib is one clear error.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

from keras_xla_guard.errors import MissingDependencyError
from keras_xla_guard.output.table import printable

__all__ = ["Plots"]

_XLA_COLOR, _PLAIN_COLOR, _LINE_COLOR = "#2e7d32", "#c62828", "#1565c0"


class Plots:
    """matplotlib figures as inline SVG, each with its own id prefix.

    Raises:
        MissingDependencyError: If matplotlib is not installed.
    """

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
        """Each window's XLA share as a bar, the rest of its op time stacked above."""
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
        """Each op's self time as a horizontal bar, the largest first."""
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
        """The run's cumulative compilations over its steps, each one marked and numbered."""
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
        """Each `compare` mode's projected run as a bar, the shortest in XLA's color."""
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
