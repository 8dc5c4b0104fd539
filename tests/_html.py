"""Reading the HTML report back: tags, text and the `data-value` numbers.

`html.parser` from the standard library, so tests without a browser read
the page the way a browser's parser does (entities decoded).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import numpy as np

from keras_xla_guard.output.html import render_html
from keras_xla_guard.output.runfile import RunData
from keras_xla_guard.signatures import Signature, SignatureTracker
from keras_xla_guard.trace.report import CoverageReport, OpStat

# Names from a trace or a user that try every way out of their cell.
HOSTILE_NAMES = (
    '<script>alert("op")</script>',
    "</svg><img src=x onerror=alert(1)>",
    "title\x1b]0;owned\x07end",
    "rtl\u202eevil",
    "two\nlines\r\ttab",
    "$\\frac{1}{0}$ mathtext",
    "&amp;&#60;entity",
    '"quoted\' onmouseover=alert(1) x="',
    "nul\x00byte",
)


@dataclass
class Value:
    """One number cell: its field, exact value, shown text and enclosing row and section."""

    field: str
    value: Any
    text: str
    row: dict[str, str]
    worker: str | None


@dataclass
class Page:
    """What the parser saw."""

    tags: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    cells: list[tuple[dict[str, str], str]] = field(default_factory=list)

    def value(self, field: str, worker: str | None = "", **row: str) -> Any:
        """The one value of `field` in a row whose attributes include `row`."""
        found = [
            v.value
            for v in self.values
            if v.field == field
            and (worker is None or v.worker == worker)
            and all(v.row.get(k) == str(x) for k, x in row.items())
        ]
        assert len(found) == 1, (field, worker, row, found)
        return found[0]


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._row: dict[str, str] = {}
        self._worker: str | None = None
        self._cell: dict[str, str] | None = None
        self._cell_text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.page.tags.append((tag, a))
        if tag == "section":
            self._worker = a.get("data-worker")
        elif tag == "tr":
            self._row = a
        elif tag == "td":
            self._cell, self._cell_text = a, []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            text = "".join(self._cell_text)
            self.page.cells.append((self._cell, text))
            if "data-field" in self._cell:
                self.page.values.append(
                    Value(
                        self._cell["data-field"],
                        json.loads(self._cell["data-value"]),
                        text,
                        dict(self._row),
                        self._worker,
                    )
                )
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.page.text.append(data)
        if self._cell is not None:
            self._cell_text.append(data)


def read_page(page: str) -> Page:
    """Parses a report page."""
    reader = _Reader()
    reader.feed(page)
    reader.close()
    return reader.page


def hostile_page() -> str:
    """A page whose every name and message is hostile (synthetic, for escaping only)."""
    ops = tuple(
        OpStat(name[:12], f"model/{name}/MatMul", 0.001 * (i + 1), i + 1)
        for i, name in enumerate(HOSTILE_NAMES)
    )
    report = CoverageReport(
        epoch=1,
        xla_time_s=0.03,
        non_xla_op_time_s=0.01,
        xla_time_fraction=0.75,
        top_non_xla_ops=ops,
        notes=HOSTILE_NAMES,
        hosts=HOSTILE_NAMES[:2],
    )
    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(0)
    for step, length in enumerate((5, 7, 9)):
        tracker.observe(Signature.of({name: np.zeros((8, length)) for name in HOSTILE_NAMES}), step=step)
    stats = tracker.end_epoch()
    compare = {
        "verdict": " ".join(HOSTILE_NAMES),
        "planned_steps": 10,
        "projected_run_s": {"plain": 1.0},
        "modes": {
            "plain": {
                "step_time_s": 0.1,
                "startup_s": 0.5,
                "compilations": 0,
                "compile_time_s": 0.0,
                "peak_memory_bytes": None,
            }
        },
    }
    return render_html(
        [RunData.of(name, [report], [stats]) for name in HOSTILE_NAMES[:2]],
        exit_reason=" ".join(HOSTILE_NAMES),
        compare=compare,
        source=HOSTILE_NAMES[1],
    )
