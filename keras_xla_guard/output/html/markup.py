"""The markup every section of the HTML report writes: escaping, cells, tables, labels.

Every string that comes from a trace or a user (op names, input paths,
messages, worker and file names) is escaped twice over: characters a
terminal or a page would not show as themselves (control and bidi
characters) become visible Python escapes, then HTML's specials become
entities. The numbers sit in `data-value` attributes (exact JSON values),
so a test or a script can read them back from the page. Pure.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from keras_xla_guard.output.table import format_ms, printable

__all__ = [
    "count_cell",
    "escape",
    "format_signature",
    "label",
    "ms_cell",
    "notes_list",
    "num_cell",
    "percent_cell",
    "table",
    "window_label",
]


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


def label(report: Mapping[str, Any], index: int) -> str:
    """A window's name: its epoch, or its place among the analyzed traces."""
    epoch = report.get("epoch")
    return f"epoch {epoch}" if epoch is not None else f"trace {index + 1}"


def window_label(report: Mapping[str, Any], index: int) -> str:
    """A window's label in its coverage row, with what its totals add up when several devices or hosts."""
    totals = report.get("totals")
    return f"{label(report, index)} ({totals})" if totals else label(report, index)


def num_cell(field: str, value: Any, text: str) -> str:
    """A table cell showing `text` whose exact value is `data-value` (JSON)."""
    return (
        f'<td class="num" data-field="{escape(field)}" data-value="{escape(json.dumps(value))}">'
        f"{escape(text)}</td>"
    )


def table(header: Sequence[str], rows: Sequence[str], cls: str = "") -> str:
    """A table of `rows` (each a `<tr>`) under `header`, with class `cls` when given."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    attr = f' class="{cls}"' if cls else ""
    # A narrow screen scrolls a wide table sideways instead of crushing its columns.
    inner = f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f'<div class="table-wrap">{inner}</div>'


def ms_cell(field: str, value: float | None, digits: int = 2) -> str:
    """A duration cell (`digits` decimals of ms); `-` for a figure the window has not got (`null`)."""
    return num_cell(field, value, "-" if value is None else format_ms(value, digits))


def count_cell(field: str, value: int | None) -> str:
    """A count cell; `-` for a count that is not known (`null`)."""
    return num_cell(field, value, "-" if value is None else str(value))


def percent_cell(field: str, fraction: float) -> str:
    """A share cell: the fraction shown as a percentage with one decimal."""
    return num_cell(field, fraction, f"{100 * fraction:.1f}%")


def notes_list(reports: Sequence[Mapping[str, Any]]) -> str:
    """The windows' notes, each once, as a list; `""` for none."""
    notes = sorted({n for r in reports for n in r.get("notes") or ()})
    return '<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>" if notes else ""


def format_signature(sig: Mapping[str, Any]) -> str:
    """A signature dict of the run file as every output writes signatures (`Signature.__str__`)."""
    from keras_xla_guard.signatures.signature import Signature

    shapes = tuple(None if shape is None else tuple(shape) for shape in sig.get("shapes") or ())
    return str(Signature(tuple(sig.get("paths") or ()), shapes, tuple(sig.get("dtypes") or ())))
