"""Tests for keras_xla_guard.output.tensorboard: escaping, layout, and real event files."""

from __future__ import annotations

import math
import re
import unicodedata
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard_server import HtmlTables

with warnings.catch_warnings():
    # TensorBoard's vendored bleach imports html5lib's deprecated sanitizer.
    warnings.simplefilter("ignore", DeprecationWarning)
    from tensorboard.plugin_util import markdown_to_safe_html

from keras_xla_guard.output.tensorboard import SummaryWriter
from keras_xla_guard.output.tensorboard_markdown import (
    escape_markdown,
    markdown_table,
    report_markdown,
    signatures_markdown,
)
from keras_xla_guard.output.tensorboard_metadata import (
    DEVICE_TAGS,
    LAYOUT_CATEGORY,
    SCALAR_TAGS,
    layout_proto,
)
from keras_xla_guard.trace.report import CoverageReport, OpStat

LAYOUT_TAG = "custom_scalars__config__"
CHART_TITLES = [
    "XLA coverage (%)",
    "XLA vs non-XLA op time (s)",
    "Compilations vs new signatures",
    "Expected compilations: train vs validation",
    "Compile time (s): wall-clock, and summed over threads",
    "Input pipeline time (s)",
    "Device transfers and collectives (s)",
]
# Names that would break or inject into a Markdown table if not escaped.
HOSTILE_NAMES = [
    "a|b",
    "a\\|b",
    "`code`",
    "```",
    "~~~",
    "a~~strike~~",
    "line\nbreak",
    "cr\r\nlf",
    "sep\u2028par\u2029next\x85",
    "tab\there",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<!-- comment -->",
    "[link](http://example.com)",
    "![img](http://example.com/x.png)",
    "<http://example.com>",
    "[ref]: http://example.com",
    "__bold__ and *em* and **strong**",
    "# heading",
    "1. ordered",
    "- bullet",
    "+ plus",
    "> quote",
    "---",
    "===",
    "    indented code",
    "&amp; &#124; &lt;",
    "trailing backslash\\",
    "\x02wzxhzdk:0\x03",
    "bidi\u202eesrever",
    "{curly} (round) [square]",
    "",
    "StatefulPartitionedCall/sequential/dense__hot__.a-b>c_1/MatMul",
]


def _render(markdown: str) -> HtmlTables:
    """Renders Markdown exactly as TensorBoard's text plugin does and parses it."""
    return HtmlTables(markdown_to_safe_html(markdown))


def _shown(text: str) -> str:
    """What a reader should see of `text`: control/format/separator characters as
    spaces, whitespace collapsed as HTML does."""
    return " ".join("".join(" " if unicodedata.category(c)[0] in "CZ" else c for c in text).split())


def _visible(markdown: str) -> str:
    """The text a reader sees of Markdown rendered by TensorBoard, whitespace collapsed."""
    return HtmlTables(markdown_to_safe_html(markdown)).visible_text


def _assert_literal_cell(name: str) -> None:
    parsed = _render(markdown_table(["#", "name", "ms:"], [[1, name, "2.5"]]))
    assert parsed.tags_in_cells == []
    assert "script" not in parsed.tags and "a" not in parsed.tags and "img" not in parsed.tags
    assert len(parsed.rows) == 2
    assert parsed.rows[0] == ["#", "name", "ms"]
    assert len(parsed.rows[1]) == 3
    assert parsed.rows[1][0] == "1" and parsed.rows[1][2] == "2.5"
    assert " ".join(parsed.rows[1][1].split()) == _shown(name)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_escaped_name_renders_literally_in_one_cell(name: str) -> None:
    """A hostile op name stays one literal table cell in TensorBoard's renderer."""
    _assert_literal_cell(name)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_renders_literally_in_one_cell(name: str) -> None:
    """Any string at all stays one literal table cell in TensorBoard's renderer."""
    _assert_literal_cell(name)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_escaped_text_is_one_line_without_markup_characters(name: str) -> None:
    """Escaped text has no line breaks and no raw Markdown/HTML punctuation."""
    escaped = escape_markdown(name)
    assert len(escaped.splitlines()) <= 1
    assert not re.search(r"[\\`*_{}\[\]()#+\-.!|~<>^=&]", re.sub(r"&#\d+;", "", escaped))


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_escaped_text_at_line_start_stays_a_paragraph(name: str) -> None:
    """Escaped text starting a line cannot open a list, heading, quote or code block."""
    html_out = markdown_to_safe_html(escape_markdown("x" + name) + "\n\n" + escape_markdown(name))
    tags = set(re.findall(r"<(\w+)", html_out))
    assert tags <= {"p"}


def test_markdown_table_right_aligns_titles_ending_in_colon() -> None:
    """Titles ending in ':' become right-aligned columns without the colon."""
    table = markdown_table(["op", "self time (ms):"], [["MatMul", "1.5"]])
    assert table.splitlines()[1] == "|---|---:|"
    assert _render(table).rows == [["op", "self time (ms)"], ["MatMul", "1.5"]]


def test_markdown_table_rejects_rows_of_the_wrong_width() -> None:
    """A row with a different number of cells than the header raises ValueError."""
    with pytest.raises(ValueError, match=r"Each row needs 2 cells. Received: row=\['a'\]"):
        markdown_table(["a", "b"], [["a"]])


def _report(**kwargs: Any) -> CoverageReport:
    base: dict[str, Any] = dict(
        epoch=1,
        steps_profiled=4,
        xla_time_s=0.003,
        non_xla_op_time_s=0.001,
        xla_time_fraction=0.75,
        xla_executions=4,
        compilations=2,
        compile_time_s=0.5,
        input_pipeline_time_s=0.002,
    )
    base.update(kwargs)
    return CoverageReport(**base)


def test_report_markdown_renders_ops_table_and_notes_literally() -> None:
    """The report text shows every top op as one literal row and notes as list items."""
    ops = tuple(
        OpStat(op_type=t, op_name=n, self_time_s=0.001 * (3 - i), count=i + 1)
        for i, (t, n) in enumerate(
            [("MatMul", "a|b\n<script>x</script>"), ("Add`V2`", "[l](http://e.x)"), ("Relu", "__x__")]
        )
    )
    report = _report(top_non_xla_ops=ops, notes=("note with | pipe", "second *note*"))
    parsed = _render(report_markdown(report))
    assert parsed.rows[0] == ["#", "op type", "op name", "self time (ms)", "count"]
    assert parsed.rows[1:] == [
        ["1", "MatMul", "a|b <script>x</script>", "3.000", "1"],
        ["2", "Add`V2`", "[l](http://e.x)", "2.000", "2"],
        ["3", "Relu", "__x__", "1.000", "3"],
    ]
    assert parsed.tags_in_cells == []
    assert parsed.tags.count("li") == 2
    assert "script" not in parsed.tags
    shown = _visible(report_markdown(report))
    assert shown.startswith("XLA coverage: 75.0% of op time over 4 steps")
    assert shown.endswith("note with | pipe second *note*")


def test_report_markdown_without_plain_ops_says_so() -> None:
    """A fully compiled window says that no plain op ran instead of an empty table."""
    html_out = markdown_to_safe_html(report_markdown(_report(xla_time_fraction=1.0)))
    assert "No plain TF op ran outside XLA in this window." in html_out
    assert "<table>" not in html_out


def test_report_markdown_lists_findings_only_and_the_rest_as_other() -> None:
    """Ops below 1% of the window's op time are no rows: one 'other' row, or one sentence when none is above it."""
    ops = (OpStat("MatMul", "dense/MatMul", 0.0008, 4), OpStat("AssignVariableOp", "adam/Assign", 0.00001, 4))
    parsed = _render(report_markdown(_report(top_non_xla_ops=ops)))
    assert parsed.rows[1:] == [
        ["1", "MatMul", "dense/MatMul", "0.800", "4"],
        ["", "other", "other plain ops (each below 1% of op time, the noise floor)", "0.200", ""],
    ]
    full = _report(
        xla_time_s=0.050,
        non_xla_op_time_s=0.000024,
        xla_time_fraction=0.9995,
        top_non_xla_ops=tuple(OpStat("AssignVariableOp", f"a/Assign_{i}", 0.0000024, 2) for i in range(10)),
    )
    shown = _visible(report_markdown(full))
    assert "<table>" not in markdown_to_safe_html(report_markdown(full))
    assert (
        "No plain TF op outside XLA is a finding in this window: 0.024 ms of plain ops, each below 1% of op "
        "time, the noise floor."
    ) in shown


def test_report_markdown_of_failed_report_escapes_the_reason() -> None:
    """A failed report renders its status and an escaped reason."""
    report = CoverageReport(status="failed", reason="boom | <b>x</b>\n# h", epoch=0)
    parsed = _render(report_markdown(report))
    assert parsed.tags == ["p", "strong"]
    assert _visible(report_markdown(report)) == "XLA coverage: failed - boom | <b>x</b> # h"


def test_signatures_markdown_shows_fix_code_as_a_code_block() -> None:
    """The recompilation panel shows explanations literally and the fix as one code block."""
    from keras_xla_guard.signatures import EpochSignatures, Explanation, bucketing_code

    code = bucketing_code("x['a|b<script>']", 1, [8, 16], 32)
    stats = EpochSignatures(
        epoch=0,
        steps=7,
        distinct_signatures=5,
        new_signatures=5,
        expected_compilations=5,
        compilations_so_far=5,
        short_last_batch=False,
        explanations=(
            Explanation(
                "dim_varied", "input x['a|b<script>'] dim 1 varied across 5 values (5, 7, 9, 11, 13)"
            ),
            Explanation(
                "bucketing_fix",
                "fix: pad x['a|b<script>'] dim 1 to 2 bucket length(s) [8, 16]",
                fix_code=code,
            ),
            Explanation("more_new_signatures", "last line *after* the code"),
        ),
        signatures=(),
    )
    rendered = markdown_to_safe_html(signatures_markdown(stats))
    parsed = _render(signatures_markdown(stats))
    assert set(parsed.tags) == {"p", "strong", "ul", "li", "pre", "code"}
    assert parsed.tags.count("pre") == 1 and parsed.tags.count("li") == 3
    block = HtmlTables(rendered[rendered.index("<pre>") : rendered.index("</pre>")])
    assert block.raw_text == code + "\n"
    shown = _visible(signatures_markdown(stats))
    assert shown.startswith(
        "Input signatures: 5 distinct, 5 new over 7 steps, 5 expected XLA compilation(s)."
    )
    assert "input x['a|b<script>'] dim 1 varied across 5 values (5, 7, 9, 11, 13)" in shown
    assert shown.endswith("last line *after* the code")


def test_layout_has_the_xla_guard_category_and_charts() -> None:
    """The layout is one open "XLA Guard" category with the six charts in order."""
    layout = layout_proto()
    assert [c.title for c in layout.category] == [LAYOUT_CATEGORY] == ["XLA Guard"]
    category = layout.category[0]
    assert not category.closed
    assert [c.title for c in category.chart] == CHART_TITLES
    assert all(c.WhichOneof("content") == "multiline" for c in category.chart)


def test_layout_regexes_each_match_exactly_their_tag() -> None:
    """Each chart line matches exactly one guard tag, never a longer look-alike."""
    known = [
        *SCALAR_TAGS,
        *DEVICE_TAGS,
        "xla_guard/new_signatures",
        "xla_guard/distinct_signatures",
        "xla_guard/expected_compilations",
        *(
            f"xla_guard/{kind}/{figure}"
            for kind in ("validation", "evaluate", "predict")
            for figure in ("new_signatures", "distinct_signatures", "expected_compilations")
        ),
    ]
    expected = [
        ["xla_guard/coverage_percent"],
        ["xla_guard/xla_time_s", "xla_guard/non_xla_op_time_s"],
        ["xla_guard/compilations", "xla_guard/expected_compilations", "xla_guard/new_signatures"],
        ["xla_guard/expected_compilations", "xla_guard/validation/expected_compilations"],
        ["xla_guard/compile_time_s", "xla_guard/compile_thread_time_s"],
        ["xla_guard/input_pipeline_time_s"],
        ["xla_guard/transfer_time_s", "xla_guard/collective_time_s"],
    ]
    for chart, tags in zip(layout_proto().category[0].chart, expected):
        matched = [[t for t in known if re.search(rx, t)] for rx in chart.multiline.tag]
        assert matched == [[t] for t in tags]


def _read_run(run_dir: str) -> dict[str, list[tuple[int, object]]]:
    """Reads every tensor summary of a run: tag -> [(step, value)], plus plugin names."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(run_dir, size_guidance={ea.TENSORS: 0})
    acc.Reload()
    out: dict[str, list[tuple[int, object]]] = {}
    for tag in acc.Tags()["tensors"]:
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        values = []
        for event in acc.Tensors(tag):
            array = tensor_util.make_ndarray(event.tensor_proto)
            values.append((event.step, array.item() if array.ndim == 0 else array.tolist()))
        out[tag] = values
        out[f"{tag}#plugin"] = [(0, plugin)]
    return out


def _layout_from(data: dict[str, list[tuple[int, object]]]) -> object:
    from tensorboard.plugins.custom_scalar import layout_pb2

    ((step, raw),) = data[LAYOUT_TAG]
    assert step == 0
    return layout_pb2.Layout.FromString(raw)


def _assert_scalars_match(
    data: dict[str, list[tuple[int, object]]], reports: dict[int, CoverageReport]
) -> None:
    for tag, read in SCALAR_TAGS.items():
        assert data[f"{tag}#plugin"] == [(0, "scalars")]
        steps = [s for s, _ in data[tag]]
        assert steps == sorted(reports)
        for step, value in data[tag]:
            # Scalars are stored as float32.
            assert math.isclose(value, float(read(reports[step])), rel_tol=1e-6, abs_tol=1e-9), tag


def test_writer_round_trip_through_event_files(tmp_path) -> None:
    """Reports written by SummaryWriter read back with the right steps, values, layout and text."""
    ops = (OpStat("MatMul", "dense|1/MatMul", 0.002, 3),)
    reports = {0: _report(epoch=0, compilations=3), 2: _report(epoch=2, top_non_xla_ops=ops)}
    failed = CoverageReport(status="failed", reason="no trace", epoch=3)
    writer = SummaryWriter(tmp_path)
    for epoch, report in reports.items():
        writer.write_report(report, step=epoch)
    writer.write_report(failed, step=3)
    writer.write_scalars({"new_signatures": 5}, step=0)
    writer.write_text("recompilation", escape_markdown("input 'x' dim 1 varied"), step=0)
    writer.close()

    data = _read_run(str(tmp_path))
    _assert_scalars_match(data, reports)
    assert layout_proto() == _layout_from(data)
    assert data[f"{LAYOUT_TAG}#plugin"] == [(0, "custom_scalars")]
    assert data["xla_guard/report#plugin"] == [(0, "text")]
    assert data["xla_guard/report"] == [
        (0, report_markdown(reports[0]).encode()),
        (2, report_markdown(reports[2]).encode()),
        (3, report_markdown(failed).encode()),
    ]
    assert data["xla_guard/new_signatures"] == [(0, 5.0)]
    assert data["xla_guard/recompilation"] == [(0, escape_markdown("input 'x' dim 1 varied").encode())]


def test_layout_is_written_with_the_first_summary_of_any_kind(tmp_path) -> None:
    """A run that only gets extra scalars still carries the layout, exactly once."""
    writer = SummaryWriter(tmp_path)
    writer.write_scalars({"new_signatures": 1}, step=0)
    writer.write_scalars({"new_signatures": 2}, step=1)
    writer.close()
    data = _read_run(str(tmp_path))
    assert len(data[LAYOUT_TAG]) == 1
    assert data["xla_guard/new_signatures"] == [(0, 1.0), (1, 2.0)]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """One real jit-compiled fit profiling epochs 0 (with compilation) and 1."""
    import keras
    import numpy as np

    from keras_xla_guard import XlaGuardCallback

    log_dir = tmp_path_factory.mktemp("summary_fit") / "xla_guard"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 16)).astype("float32")
    y = x[:, :1] * 0.5
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse", jit_compile=True)
    cb = XlaGuardCallback(log_dir=log_dir, profile_epochs=(0, 1), skip_steps=0, max_steps=6, verbose=0)
    model.fit(x, y, batch_size=32, epochs=2, callbacks=[cb], verbose=0)
    return log_dir, cb.reports


@pytest.mark.slow
def test_fit_writes_each_scalar_per_profiled_epoch(fitted) -> None:
    """After a real fit every guard scalar holds the report's value at step = epoch."""
    log_dir, reports = fitted
    assert sorted(reports) == [0, 1] and all(r.ok for r in reports.values())
    # 256 rows in batches of 32: one batch shape, so epoch 0 compiles the
    # step exactly once and epoch 1 not at all (per-epoch values differ).
    assert (reports[0].compilations, reports[1].compilations) == (1, 0)
    # skip_steps=0, max_steps=6 of 8 batches: 6 profiled steps, one run each.
    assert [(r.steps_profiled, r.xla_executions) for r in reports.values()] == [(6, 6), (6, 6)]
    _assert_scalars_match(_read_run(str(log_dir)), reports)


@pytest.mark.slow
def test_fit_writes_the_layout_once(fitted) -> None:
    """After a real fit the run holds the "XLA Guard" layout exactly once."""
    log_dir, _ = fitted
    data = _read_run(str(log_dir))
    assert len(data[LAYOUT_TAG]) == 1
    layout = _layout_from(data)
    assert layout == layout_proto()
    assert [c.title for c in layout.category[0].chart] == CHART_TITLES


@pytest.mark.slow
def test_fit_writes_the_report_text_per_epoch(fitted) -> None:
    """After a real fit the text panel holds each epoch's rendered report."""
    log_dir, reports = fitted
    data = _read_run(str(log_dir))
    assert data["xla_guard/report"] == [(e, report_markdown(r).encode()) for e, r in reports.items()]
    shown = _visible(report_markdown(reports[0]))
    assert shown.startswith(f"XLA coverage: {100 * reports[0].xla_time_fraction:.1f}%")
