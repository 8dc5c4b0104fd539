"""TensorBoard under JAX without TensorFlow: the guard's event file read back, and served by a real server."""

from __future__ import annotations

import pytest
from _jax_helpers import EPOCHS, PROFILED
from tensorboard_server import HtmlTables, TensorBoardServer

from keras_xla_guard.output.tensorboard_markdown import compilations_markdown, report_markdown
from keras_xla_guard.output.tensorboard_metadata import JAX_SKIPPED_TAGS, SCALAR_TAGS, layout_proto

pytestmark = pytest.mark.slow
_FUNCTIONS = ("train", "test", "predict", "other")


def _read(run_dir):
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(run_dir), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["tensors"]:
        out[tag] = [(e.step, tensor_util.make_ndarray(e.tensor_proto).item()) for e in acc.Tensors(tag)]
        out[tag + "#plugin"] = acc.SummaryMetadata(tag).plugin_data.plugin_name
    return out


def test_event_file_holds_the_jax_tags_text_and_layout(guarded):
    """Per-function compilation scalars every epoch; the window's figures but no coverage; the JAX layout."""
    from tensorboard.plugins.custom_scalar import layout_pb2

    data = _read(guarded.log_dir)
    counted = guarded.guard.engine.compilations
    for function in _FUNCTIONS:
        assert data[f"xla_guard/{function}/compilations"] == [
            (epoch, float(counted[epoch].count(function))) for epoch in range(EPOCHS)
        ]
        assert data[f"xla_guard/{function}/compilations#plugin"] == "scalars"
    report = guarded.guard.reports[PROFILED]
    for tag in SCALAR_TAGS:
        assert (tag in data) == (tag not in JAX_SKIPPED_TAGS), tag
    assert data["xla_guard/xla_executions"] == [(PROFILED, float(report.xla_executions))]
    assert data["xla_guard/report"] == [(PROFILED, report_markdown(report).encode())]
    assert data["xla_guard/compilations"] == [(PROFILED, float(report.compilations))]
    assert [step for step, _ in data["xla_guard/counted_compilations"]] == list(range(EPOCHS))
    assert data["xla_guard/counted_compilations#plugin"] == "text"
    ((step, raw),) = data["custom_scalars__config__"]
    assert step == 0 and layout_pb2.Layout.FromString(raw) == layout_proto(counted_compilations=True)


def _served(server):
    return (
        server.json("/data/plugin/text/tags").get("xla_guard", []),
        server.json("/data/plugin/scalars/tags").get("xla_guard", {}),
    )


def test_a_real_tensorboard_serves_the_runs_scalars_text_and_layout(guarded, tmp_path):
    """A `tensorboard` process over the log dir serves every epoch's train compilations, the texts and the layout."""

    def ready(server):
        text, scalars = _served(server)
        if "xla_guard/counted_compilations" not in text or "xla_guard/train/compilations" not in scalars:
            return False
        served = server.json("/data/plugin/text/text", run="xla_guard", tag="xla_guard/counted_compilations")
        return len(served) == EPOCHS

    server = TensorBoardServer(guarded.log_dir.parent, tmp_path / "tensorboard.log")
    try:
        server.start(ready)
        points = server.json(
            "/data/plugin/scalars/scalars", run="xla_guard", tag="xla_guard/train/compilations"
        )
        counted = guarded.guard.engine.compilations
        assert [(step, value) for _, step, value in points] == [
            (epoch, float(counted[epoch].count("train"))) for epoch in range(EPOCHS)
        ]
        texts = server.json("/data/plugin/text/text", run="xla_guard", tag="xla_guard/counted_compilations")
        assert [t["step"] for t in texts] == list(range(EPOCHS))
        first = HtmlTables(texts[0]["text"])
        assert (
            f"Compilations (counted as they happened): train {counted[0].count('train')}"
            in first.visible_text
        )
        assert [row[1:3] for row in first.rows[1:3]] == [["train", "train_step"]] * 2
        assert compilations_markdown(counted[0]).startswith("**Compilations")
        layout = server.json("/data/plugin/custom_scalars/layout")
        titles = [c["title"] for c in layout["category"][0]["chart"]]
        assert titles[0] == "Compilations per function"
    finally:
        server.stop()
