"""The HTML report page: names from traces and users are escaped, the headline is exact."""

from __future__ import annotations

import sys

import pytest
from _html import HOSTILE_NAMES, hostile_page, read_page

from keras_xla_guard.errors import MissingDependencyError
from keras_xla_guard.output.html import escape, render_html
from keras_xla_guard.output.runfile import RunData
from keras_xla_guard.output.table import printable
from keras_xla_guard.trace.report import CoverageReport

# What a page may hold outside its SVG plots: no script, link, image, frame or form.
_FORBIDDEN_TAGS = {"script", "img", "iframe", "object", "embed", "link", "base", "a", "form", "input"}


def test_hostile_names_stay_text_in_every_part_of_the_page() -> None:
    """Op, input, worker names and messages with markup and control characters come out as literal text."""
    page = hostile_page()
    parsed = read_page(page)
    tags = {tag for tag, _ in parsed.tags}
    assert not tags & _FORBIDDEN_TAGS
    for _, attrs in parsed.tags:
        assert not [k for k in attrs if k.startswith("on")], attrs
        assert all("javascript:" not in v for v in attrs.values())
    # No raw control or bidi character anywhere: each was written as a visible escape.
    assert all(c == "\n" or c.isprintable() for c in page)
    assert "<script" not in page.lower()
    text = "".join(parsed.text)
    op_cells = [text for attrs, text in parsed.cells if "name" in attrs.get("class", "").split()]
    for name in HOSTILE_NAMES:
        shown = printable(name)
        assert f"model/{shown}/MatMul" in op_cells  # the op name, whole, in its cell
        assert f"model/{shown}" in op_cells  # its layer
        assert shown in text  # notes, exit reason, compare verdict
    assert [
        attrs["data-worker"] for tag, attrs in parsed.tags if tag == "section" and "data-worker" in attrs
    ] == [printable(n) for n in HOSTILE_NAMES[:2]]


def test_escape_makes_control_characters_visible_and_markup_inert() -> None:
    """`escape` writes control characters as Python escapes, then HTML entities."""
    assert escape('<b a="1">\x1b\u202e') == "&lt;b a=&quot;1&quot;&gt;\\x1b\\u202e"


def test_missing_matplotlib_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without matplotlib, rendering raises MissingDependencyError naming the `html` extra."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingDependencyError, match=r'pip install "keras-xla-guard\[html\]"'):
        render_html([RunData.of("", [CoverageReport(epoch=1)])], exit_reason="done")


@pytest.mark.parametrize(
    ("op_name", "layer"),
    [
        ("StatefulPartitionedCall/dense_1/Relu", "dense_1"),
        ("StatefulPartitionedCall/gradient_tape/dense_1/MatMul/MatMul", "gradient_tape/dense_1/MatMul"),
        ("PartitionedCall/StatefulPartitionedCall/model/conv/Conv2D", "model/conv"),
        ("StatefulPartitionedCall/Add_2", "-"),
        ("GatherV2", "-"),
    ],
)
def test_layer_column_drops_the_steps_call_wrappers(op_name, layer) -> None:
    """Without the Keras layer, an op's layer is its scope path less TensorFlow's call wrappers; `-` if none is left."""
    from keras_xla_guard.output.html.window_sections import _layer

    assert _layer({"op_name": op_name, "layer": None}) == layer
    assert _layer({"op_name": op_name}) == layer
    assert _layer({"op_name": op_name, "layer": "dense_9"}) == "dense_9"


def test_compile_table_rows_carry_each_compilation_and_cache_hit() -> None:
    """Each compile-table row shows its window, step, program, time (or `cache hit`) and signature, escaped."""
    from keras_xla_guard.trace.compiles import CompileRecord

    rows = (
        CompileRecord("one_step_on_data", "m.1", 0.5, 0.25, step=0, signature="x: float32[8,5]"),
        CompileRecord("<b>cluster_0</b>", cache_hit=True, step=3, signature="x: float32[8,7]"),
    )
    page = read_page(
        render_html([RunData.of("", [CoverageReport(epoch=2, compile_table=rows)])], exit_reason="")
    )
    compiles = [
        (attrs, text) for attrs, text in page.cells if attrs.get("data-field") in ("step", "compile_s")
    ]
    assert [text for _, text in compiles] == ["0", "250.00 ms", "3", "cache hit"]
    assert page.value("compile_s", **{"class": "compile", "data-index": 0}) == 0.25
    assert page.value("compile_s", **{"class": "compile", "data-index": 1}) is None
    names = [text for attrs, text in page.cells if attrs.get("class") == "name"]
    # The compile table is the window's last table with name cells.
    assert names[-4:] == ["one_step_on_data", "x: float32[8,5]", "<b>cluster_0</b>", "x: float32[8,7]"]


def test_no_compile_table_without_compilations() -> None:
    """A window that compiled nothing adds no compile table to the page."""
    page = render_html([RunData.of("", [CoverageReport(epoch=1, xla_time_fraction=1.0)])], exit_reason="")
    assert "Compile table" not in page


@pytest.mark.slow
def test_timeline_puts_each_compilation_at_the_step_the_compile_table_names(tmp_path) -> None:
    """A real jit fit over 5 lengths (new at steps 0, 1, 2, 4, 6; 3 explained): every event at its compilation's step."""
    from _fit_helpers import LENGTHS, _guard, _seq_dataset, _seq_model
    from _html import read_page

    guard = _guard(tmp_path / "logs", profile_epochs=(0,), skip_steps=0, max_steps=None)
    _seq_model(True).fit(_seq_dataset(LENGTHS), epochs=1, callbacks=[guard], verbose=0)
    compiled = [c.step for c in guard.reports[0].compile_table if not c.cache_hit]
    assert compiled == [step for _, step in guard.signatures[0].new] == [0, 1, 2, 4, 6]
    page = read_page(guard.write_html(tmp_path / "page.html").read_text(encoding="utf-8"))
    events = [page.value("step", **{"class": "event", "data-index": n}) for n in range(1, 6)]
    assert events == compiled
    # The run's compilation rows, each with the compile time the profiled window measured for it.
    rows = [page.value("step", **{"class": "counted", "data-epoch": 0, "data-index": n}) for n in range(5)]
    assert rows == compiled
    timed = [
        page.value("compile_s", **{"class": "counted", "data-epoch": 0, "data-index": n}) for n in range(5)
    ]
    assert timed == [c.compile_s for c in guard.reports[0].compile_table if not c.cache_hit]
    assert all(t > 0 for t in timed)
    # Beyond the three explained ones, an event names its signature, as every output writes one.
    cells = [text for cell, text in page.cells if cell.get("class") == "name" and "train compiled at" in text]
    assert cells == [
        f"train compiled at step {s}: x['tokens']: int32[8,{n}], y: float32[8,1]"
        for s, n in ((4, 11), (6, 13))
    ]


def test_each_function_has_its_expected_compilations_and_each_call_its_row() -> None:
    """Compilations per function: train, test and predict totals, one row per call; the compile table names them."""
    import numpy as np

    from keras_xla_guard.runtime.sink import CallRecord
    from keras_xla_guard.signatures import Signature, SignatureTracker

    def figures(function, epoch, lengths, tracker=None):
        tracker = tracker or SignatureTracker(xla=True, function=function)
        tracker.begin_epoch(epoch)
        for step, n in enumerate(lengths):
            tracker.observe(Signature.of(np.zeros((2, n))), step=step)
        return tracker.end_epoch()

    test = SignatureTracker(xla=True, function="test")
    calls = [
        CallRecord("test", 0, 0, figures("test", 0, [3, 5], test)),
        CallRecord("test", 1, None, figures("test", None, [3, 5, 6], test)),
        CallRecord("predict", 0, None, figures("predict", None, [3, 3])),
        CallRecord("test", 2, None, signatures_unavailable="<b>keras 9</b>"),
    ]
    train = [figures("train", 0, [3, 4, 5])]
    page = read_page(render_html([RunData.of("", [], train, calls)], exit_reason=""))
    totals = {
        f: page.value("expected_compilations", **{"class": "function", "data-function": f})
        for f in ("train", "test", "predict")
    }
    # The unavailable evaluate call leaves the test function's total unknown, not 3.
    assert totals == {"train": 3, "test": None, "predict": 1}
    assert page.value("steps", **{"class": "function", "data-function": "test"}) == 5
    assert [page.value("expected_compilations", **{"class": "call", "data-index": n}) for n in range(3)] == [
        2,
        1,
        1,
    ]
    assert page.value("compilations_so_far", **{"class": "call", "data-index": 1}) == 3
    text = "".join(page.text)
    assert "input signatures unavailable: <b>keras 9</b>" in text
    rows = [attrs for tag, attrs in page.tags if tag == "tr" and attrs.get("class") == "compile"]
    assert [(r["data-function"], r["data-call"]) for r in rows] == [
        ("test", "0"),
        ("test", "0"),
        ("test", "1"),
        ("predict", "2"),
    ]
    assert [
        page.value("step", **{"class": "compile", "data-call": c, "data-index": i})
        for c, i in ((0, 0), (0, 1), (1, 0), (2, 0))
    ] == [0, 1, 2, 0]


def test_no_function_table_without_calls() -> None:
    """A run without validation, evaluate or predict calls shows its train figures only, as before."""
    page = render_html([RunData.of("", [CoverageReport(epoch=1, xla_time_fraction=1.0)])], exit_reason="")
    assert "Compilations per function" not in page


def test_a_window_whose_plain_ops_are_all_noise_draws_no_chart() -> None:
    """100% coverage, ten 2.4 us ops: no top-ops chart or table, one sentence with their exact total."""
    from keras_xla_guard.trace.report import OpStat

    ops = tuple(OpStat("AssignVariableOp", f"a/AssignVariableOp_{i}", 0.0000024, 2) for i in range(10))
    report = CoverageReport(
        epoch=1, xla_time_s=0.050, non_xla_op_time_s=0.000024, xla_time_fraction=0.9995, top_non_xla_ops=ops
    )
    page = render_html([RunData.of("", [report])], exit_reason="")
    parsed = read_page(page)
    assert 'data-plot="top_ops"' not in page
    assert not [attrs for tag, attrs in parsed.tags if tag == "tr" and attrs.get("class") == "op"]
    (floor,) = [attrs for tag, attrs in parsed.tags if attrs.get("id") == "noise-floor"]
    assert float(floor["data-value"]) == 0.000024
    assert (
        "No plain TF op outside XLA is a finding in this window: 0.024 ms of plain ops, each below 1% of the "
        "window's op time, the noise floor (docs/coverage.md)."
    ) in "".join(parsed.text)


def test_ops_below_the_floor_are_one_other_row_not_bars() -> None:
    """One op above 1%, one below: one bar, one op row and an 'other' row with the rest of the plain time."""
    from keras_xla_guard.trace.report import OpStat

    ops = (
        OpStat("MatMul", "model/dense/MatMul", 0.0008, 4),
        OpStat("AssignVariableOp", "adam/Assign", 0.00001, 4),
    )
    report = CoverageReport(
        epoch=1, xla_time_s=0.003, non_xla_op_time_s=0.001, xla_time_fraction=0.75, top_non_xla_ops=ops
    )
    page = render_html([RunData.of("", [report])], exit_reason="")
    parsed = read_page(page)
    assert [
        attrs.get("data-rank") for tag, attrs in parsed.tags if tag == "tr" and "op" in attrs.get("class", "")
    ] == ["1", None]
    assert parsed.value("self_time_s", **{"class": "op other"}) == 0.001 - 0.0008
    assert 'data-plot="top_ops"' in page and "AssignVariableOp" not in page


def test_the_layer_column_names_the_keras_layer_and_the_chart_keeps_it() -> None:
    """An op with its Keras layer shows it (scope path kept in 'op name'); a long scope path keeps its end."""
    import re

    from keras_xla_guard.trace.report import OpStat

    deep = (
        "StatefulPartitionedCall/gradient_tape/"
        + "/".join(f"scope_{i}" for i in range(12))
        + "/block_14_depthwise_1"
    )
    ops = (
        OpStat(
            "DepthwiseConv2dNativeBackpropInput",
            f"{deep}/depthwise/Backprop",
            0.0006,
            4,
            layer="block_14_depthwise",
        ),
        OpStat("RealDiv", f"{deep}/truediv", 0.0004, 4),
    )
    report = CoverageReport(epoch=1, xla_time_s=0.0, non_xla_op_time_s=0.001, top_non_xla_ops=ops)
    page = render_html([RunData.of("", [report])], exit_reason="")
    parsed = read_page(page)
    layers = [text for attrs, text in parsed.cells if attrs.get("class") == "name layer"]
    assert layers == ["block_14_depthwise", deep.removeprefix("StatefulPartitionedCall/") + ""]
    chart = page[page.index('data-plot="top_ops"') :]
    chart = chart[: chart.index("</figure>")]
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", chart)
    assert "DepthwiseConv2dNativeBackpropInput  block_14_depthwise" in labels
    assert "RealDiv  ..." + deep[-45:] in labels


def test_the_timeline_counts_in_whole_numbers() -> None:
    """Two compilations over three steps: every tick of the timeline is an integer, none a 0.25."""
    import re

    import numpy as np

    from keras_xla_guard.signatures import Signature, SignatureTracker

    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(0)
    for step, n in enumerate((3, 5, 5)):
        tracker.observe(Signature.of(np.zeros((2, n))), step=step)
    page = render_html([RunData.of("", [], [tracker.end_epoch()])], exit_reason="")
    chart = page[page.index('data-plot="timeline"') :]
    chart = chart[: chart.index("</figure>")]
    ticks = [t for t in re.findall(r"<text[^>]*>([^<]*)</text>", chart) if re.fullmatch(r"[-\d.\u2212]+", t)]
    assert ticks and all(re.fullmatch(r"\u2212?\d+", t) for t in ticks), ticks


def test_findings_that_repeat_across_epochs_show_once_with_their_epochs() -> None:
    """The same finding in three epochs is one bullet naming epochs 0, 1, 2; signatures in one notation."""
    from _html import read_page

    from keras_xla_guard.runtime.compile_log import predicted_compilations
    from keras_xla_guard.signatures import Signature, SignatureTracker

    tracker = SignatureTracker(xla=True)
    figures = []
    for epoch in range(3):
        tracker.begin_epoch(epoch)
        for step, n in enumerate((4, 6, 8)):
            tracker.observe(Signature(("x", "y"), ((8, n), (8, 1)), ("int32", "float32")), step=step)
        figures.append(tracker.end_epoch())
    compiled = [predicted_compilations(e, [f]) for e, f in enumerate(figures)]
    text = render_html([RunData.of("", [], figures, (), compiled)], exit_reason="done")
    varied = "input x dim 1 varied across 3 values (4, 6, 8)"
    findings = text.split('<ul class="findings">', 1)[1].split("</ul>", 1)[0]
    assert findings.count(varied) == 1
    assert f"<strong>epochs 0, 1, 2</strong>: {varied}" in findings
    page = read_page(text)
    names = [t for cell, t in page.cells if cell.get("class") == "name" and "int32[" in t]
    assert names and all("; " not in t and "[8, " not in t for t in names)
    # Every compilation is on the timeline: one event row each.
    assert text.count('<tr class="event"') == 3 == text.count('<tr class="counted"')
