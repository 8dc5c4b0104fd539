"""End to end: a real fit beside Keras' TensorBoard callback, served by a real
`tensorboard` process, checked through TensorBoard's HTTP data API."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    # TensorBoard's vendored bleach imports html5lib's deprecated sanitizer.
    warnings.simplefilter("ignore", DeprecationWarning)
    from tensorboard.plugin_util import markdown_to_safe_html

from _oracle import count_xla_runs, xla_run_seconds
from tensorboard_server import (
    GUARD_RUN,
    HOSTILE_LAYER,
    PROFILED_EPOCHS,
    STEPS_PER_WINDOW,
    HtmlTables,
    TensorBoardServer,
    fit_beside_keras_tensorboard,
    guard_data_loaded,
)

from keras_xla_guard.output.tensorboard_markdown import report_markdown
from keras_xla_guard.output.tensorboard_metadata import SCALAR_TAGS, layout_proto
from keras_xla_guard.trace.findings import split_findings

# compat: the Profile tab's tests run with the oldest xprof declared too.
pytestmark = [pytest.mark.slow, pytest.mark.compat]


@pytest.fixture(scope="module")
def fit(tmp_path_factory):
    """One real fit writing the guard run and Keras' train/validation runs."""
    return fit_beside_keras_tensorboard(tmp_path_factory.mktemp("tb_e2e"))


@pytest.fixture(scope="module")
def server(fit, tmp_path_factory):
    """A real `tensorboard --logdir` over the fit's log root, killed at teardown."""
    tb = TensorBoardServer(fit.log_root, tmp_path_factory.mktemp("tb_e2e_server") / "tensorboard.log")
    try:
        tb.start(guard_data_loaded)
        yield tb
    finally:
        tb.stop()


def _close(a: float, b: float) -> bool:
    # TensorBoard serves the float32 values tf.summary stored.
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def test_fit_profiled_the_expected_epochs(fit) -> None:
    """The fit produced an ok report per profiled epoch: one XLA run per step, plain ops to list."""
    assert sorted(fit.reports) == list(PROFILED_EPOCHS)
    assert all(r.ok and r.top_non_xla_ops for r in fit.reports.values())
    for r in fit.reports.values():
        # max_steps steps per window, each one call of the jit_compile head;
        # the one batch shape of the window was compiled in epoch 0.
        assert (r.steps_profiled, r.xla_executions, r.compilations) == (STEPS_PER_WINDOW,) * 2 + (0,)
        assert 0 < r.xla_time_fraction < 1


def _served(server, tag: str) -> dict[int, float]:
    return {
        step: value for _, step, value in server.json("/data/plugin/scalars/scalars", run=GUARD_RUN, tag=tag)
    }


def _xprof_table(server, trace: Path) -> list[dict]:
    """framework_op_stats rows of `trace`, as TensorBoard's Profile plugin serves them."""
    run = f"{GUARD_RUN}/{trace.parent.name}"
    host = trace.name[: -len(".xplane.pb")]
    (table, *_) = json.loads(
        server.get("/data/plugin/profile/data", run=run, tag="framework_op_stats", host=host)
    )
    cols = [c["id"] for c in table["cols"]]
    return [dict(zip(cols, [c["v"] for c in row["c"]])) for row in table["rows"]]


def test_served_xla_figures_match_the_raw_trace(server, fit) -> None:
    """The served XLA runs equal the executable spans counted in the raw proto; XLA time covers their time."""
    executions = _served(server, "xla_guard/xla_executions")
    xla_time = _served(server, "xla_guard/xla_time_s")
    for epoch, report in fit.reports.items():
        (trace,) = (Path(p) for p in report.trace_paths)
        assert executions[epoch] == count_xla_runs(trace) == STEPS_PER_WINDOW
        # The guard times the kernel that launches each executable, which
        # contains the executable's own span: never less, and not zero.
        # rel 1e-6: the served value went through float32.
        assert xla_time[epoch] >= xla_run_seconds(trace) * (1 - 1e-6) > 0


# oneDNN's kernel names for the plain ops they replace (TF rewrites them where the CPU allows).
_ONEDNN_KERNELS = {
    "_MklNativeFusedMatMul": "_FusedMatMul",
    "_MklFusedMatMul": "_FusedMatMul",
    "_MklMatMul": "MatMul",
}


def test_served_non_xla_time_covers_xprofs_plain_ops(server, fit) -> None:
    """The served non-XLA op time is at least xprof's self time of the plain-run hostile layer's ops."""
    non_xla = _served(server, "xla_guard/non_xla_op_time_s")
    fraction = _served(server, "xla_guard/xla_time_fraction")
    xla_time = _served(server, "xla_guard/xla_time_s")
    for epoch, report in fit.reports.items():
        (trace,) = (Path(p) for p in report.trace_paths)
        rows = [r for r in _xprof_table(server, trace) if HOSTILE_LAYER in r["operation"]]
        # Forward (_FusedMatMul) and backward (MatMul, BiasAddGrad, ReluGrad)
        # of the first layer run outside the jit_compile head by construction.
        # Where the CPU lets oneDNN rewrite them they run as _MklNativeFusedMatMul
        # and _MklMatMul: the same ops under another kernel name.
        kernels = {_ONEDNN_KERNELS.get(r["type"], r["type"]) for r in rows}
        assert {"_FusedMatMul", "MatMul", "BiasAddGrad", "ReluGrad"} <= kernels
        assert all(r["occurrences"] == STEPS_PER_WINDOW for r in rows)
        hostile_s = sum(r["total_self_time"] for r in rows) * 1e-6
        # Per-op self times agree with xprof within 5% (test_analysis), the
        # slack allowed here; the other plain ops (optimizer, metrics) add to it.
        assert non_xla[epoch] >= hostile_s * 0.95 > 0
        xla, non = xla_time[epoch], non_xla[epoch]
        # Three float32 values went into this check: 1e-5 relative covers their rounding.
        assert math.isclose(fraction[epoch], xla / (xla + non), rel_tol=1e-5)


def test_runs_are_ours_and_keras(server) -> None:
    """TensorBoard lists exactly our run and Keras' train and validation runs."""
    assert sorted(server.json("/data/runs")) == sorted([GUARD_RUN, "train", "validation"])


def test_dashboards_are_active(server) -> None:
    """The Scalars, Custom Scalars, Text and Profile dashboards are enabled."""
    plugins = server.json("/data/plugins_listing")
    for name in ("scalars", "custom_scalars", "text", "profile"):
        assert plugins[name]["enabled"], name


def test_scalar_values_per_epoch_match_the_reports(server, fit) -> None:
    """Every guard scalar is served with one point per profiled epoch, equal to the report."""
    tags = server.json("/data/plugin/scalars/tags")[GUARD_RUN]
    assert set(SCALAR_TAGS) <= set(tags)
    assert all(t.startswith("xla_guard/") for t in tags)
    for tag, read in SCALAR_TAGS.items():
        points = server.json("/data/plugin/scalars/scalars", run=GUARD_RUN, tag=tag)
        assert [step for _, step, _ in points] == list(PROFILED_EPOCHS), tag
        for _, step, value in points:
            assert _close(value, float(read(fit.reports[step]))), (tag, step, value)
    coverage = server.json("/data/plugin/scalars/scalars", run=GUARD_RUN, tag="xla_guard/non_xla_op_time_s")
    assert all(value > 0 for _, _, value in coverage)


def test_keras_runs_are_intact(server, fit) -> None:
    """Keras' epoch losses are served unchanged and its runs hold none of our tags."""
    tags = server.json("/data/plugin/scalars/tags")
    for run, key in (("train", "loss"), ("validation", "val_loss")):
        assert not [t for t in tags[run] if t.startswith("xla_guard/")], run
        points = server.json("/data/plugin/scalars/scalars", run=run, tag="epoch_loss")
        assert [step for _, step, _ in points] == [0, 1, 2]
        assert all(_close(v, h) for (_, _, v), h in zip(points, fit.history[key], strict=True)), run
    assert "keras" in server.json("/data/plugin/graphs/info")["train"]["tags"]


def test_custom_scalars_layout_is_served(server) -> None:
    """The Custom Scalars plugin serves the "XLA Guard" category with our charts."""
    served = server.json("/data/plugin/custom_scalars/layout")
    expected = layout_proto()
    assert [c["title"] for c in served["category"]] == ["XLA Guard"]
    charts = served["category"][0]["chart"]
    assert [(c["title"], c["multiline"]["tag"]) for c in charts] == [
        (c.title, list(c.multiline.tag)) for c in expected.category[0].chart
    ]


def test_custom_scalars_charts_get_the_report_values(server, fit) -> None:
    """Each chart's tag regex fetches our values the way the dashboard does."""
    for chart in layout_proto().category[0].chart:
        for regex in chart.multiline.tag:
            served = server.json("/data/plugin/custom_scalars/scalars", run=GUARD_RUN, tag=regex)
            assert served["regex_valid"]
            tag = regex.strip("^$").replace("\\", "")
            if tag not in SCALAR_TAGS:
                continue
            points = served["tag_to_events"][tag]
            assert [s for _, s, _ in points] == list(PROFILED_EPOCHS)
            for _, step, value in points:
                assert _close(value, float(SCALAR_TAGS[tag](fit.reports[step]))), (tag, step)


def test_text_panel_renders_the_escaped_op_table(server, fit) -> None:
    """The Text plugin serves one report per epoch whose table shows each op name literally."""
    text_tags = server.json("/data/plugin/text/tags")
    assert list(text_tags) == [GUARD_RUN]
    assert "xla_guard/report" in text_tags[GUARD_RUN]
    assert all(t.startswith("xla_guard/") for t in text_tags[GUARD_RUN])
    entries = server.json("/data/plugin/text/text", run=GUARD_RUN, tag="xla_guard/report")
    assert [e["step"] for e in entries] == list(PROFILED_EPOCHS)
    for entry in entries:
        report = fit.reports[entry["step"]]
        parsed = HtmlTables(entry["text"])
        assert parsed.tags_in_cells == []
        # The ops above the noise floor, each with the Keras layer the guard named; then the rest.
        split = split_findings(
            report.top_non_xla_ops, lambda op: op.self_time_s, report.xla_time_s, report.non_xla_op_time_s
        )
        assert parsed.rows[0] == ["#", "op type", "layer", "op name", "self time (ms)", "count"]
        assert parsed.rows[1 : len(split.findings) + 1] == [
            [str(i), op.op_type, op.layer or "-", op.op_name, f"{op.self_time_s * 1e3:.3f}", str(op.count)]
            for i, op in enumerate(split.findings, 1)
        ]
        assert [row[1] for row in parsed.rows[len(split.findings) + 1 :]] == (
            ["other"] if split.other_s else []
        )
        assert any(row[2] == HOSTILE_LAYER and HOSTILE_LAYER in row[3] for row in parsed.rows[1:])
        assert all(" ".join(n.split()) in parsed.visible_text for n in report.notes)
        assert entry["text"] == markdown_to_safe_html(report_markdown(report))


def test_profile_tab_lists_and_opens_our_traces(server, fit) -> None:
    """The Profile plugin lists one run per profiled epoch and reads its trace."""
    trace_files = [Path(p) for r in fit.reports.values() for p in r.trace_paths]
    assert len(trace_files) == len(PROFILED_EPOCHS)
    runs = server.json("/data/plugin/profile/runs")
    assert sorted(runs) == sorted(f"{GUARD_RUN}/{p.parent.name}" for p in trace_files)
    for run, trace in zip(sorted(runs), sorted(trace_files, key=lambda p: p.parent.name)):
        tools = server.json("/data/plugin/profile/run_tools", run=run)
        assert "framework_op_stats" in tools and any(t.startswith("trace_viewer") for t in tools)
        host = trace.name[: -len(".xplane.pb")]
        assert server.json("/data/plugin/profile/hosts", run=run, tag="framework_op_stats") == [
            {"hostname": host}
        ]
        table = json.loads(
            server.get("/data/plugin/profile/data", run=run, tag="framework_op_stats", host=host)
        )
        op_names = {row["c"][3]["v"] for t in table for row in t.get("rows", [])}
        assert any(HOSTILE_LAYER in name for name in op_names)


def test_every_guard_text_panel_is_served_as_safe_html(server) -> None:
    """Every text panel of our run is served with no markup in cells and no stray headings."""
    for tag in server.json("/data/plugin/text/tags")[GUARD_RUN]:
        entries = server.json("/data/plugin/text/text", run=GUARD_RUN, tag=tag)
        assert entries, tag
        for entry in entries:
            parsed = HtmlTables(entry["text"])
            assert parsed.visible_text, (tag, entry["step"])
            assert parsed.tags_in_cells == [] and "script" not in parsed.tags, (tag, entry["step"])
            # The guard writes no headings: one would be a name or code line
            # that Markdown took for syntax.
            assert not {"h1", "h2", "h3", "h4", "h5", "h6"} & set(parsed.tags), (tag, entry["step"])
