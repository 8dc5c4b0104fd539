"""`compare` on real tiny Keras models: batches taken once, clones trained, the model untouched.

One comparison (a sequence model whose batches have three distinct lengths,
so XLA compiles three programs by construction) is run once per module and
read by every slow test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _fit_helpers import _events, _seq_batches, _seq_dataset, _seq_model

LENGTHS = (5, 7, 5, 9, 7, 5)


@dataclass
class Compared:
    """A finished `compare` and what the model looked like before it."""

    model: Any
    weights_before: list[Any]
    report: Any
    log_dir: Path


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Compared:
    """plain vs jit_compile on a jit_compile=True model, 6 batches of 3 lengths, 4 planned epochs."""
    import keras

    from keras_xla_guard import compare

    keras.utils.set_random_seed(0)
    model = _seq_model(True)
    before = [w.copy() for w in model.get_weights()]
    log_dir = tmp_path_factory.mktemp("compare") / "logs"
    report = compare(model, _seq_dataset(LENGTHS), steps=len(LENGTHS), planned_epochs=4,
                     log_dir=log_dir)
    return Compared(model, before, report, log_dir)


@pytest.mark.slow
def test_each_mode_compiles_once_per_signature_in_a_real_trace(compared):
    """jit_compile compiles the 3 distinct lengths (trace-counted); plain compiles nothing."""
    plain, jit = compared.report.modes["plain"], compared.report.modes["jit_compile"]
    assert list(compared.report.modes) == ["plain", "jit_compile"]
    assert (plain.compilations, jit.compilations) == (0, 3)
    assert plain.distinct_signatures == jit.distinct_signatures == 3
    assert plain.compile_time_s == 0.0
    assert 0 < jit.compile_time_s <= jit.compile_thread_time_s
    for mode, figures in compared.report.modes.items():
        assert figures.trace_paths
        assert all(Path(p).is_file() and f"compare/{mode}/plugins/profile" in p
                   for p in figures.trace_paths)


@pytest.mark.slow
def test_every_mode_times_and_loses_on_every_compared_batch(compared):
    """Each mode has one step time and one loss per compared batch, the median as its step time."""
    for figures in compared.report.modes.values():
        assert figures.steps == len(figures.step_times_s) == len(figures.losses) == len(LENGTHS)
        assert min(figures.step_times_s) > 0 and figures.startup_s >= 0
        assert figures.step_time_s == float(np.median(figures.step_times_s))
        assert figures.final_loss == figures.losses[-1]
        assert figures.memory_kind == "host_rss" and figures.peak_memory_bytes >= 0


@pytest.mark.slow
def test_clones_start_from_the_models_weights_on_the_same_batches(compared):
    """Step 0's loss in every mode is the untouched model's loss on batch 0; modes agree closely."""
    x, y = _seq_batches(LENGTHS)[0]
    expected = float(np.mean((np.asarray(compared.model(x)) - y) ** 2))
    for figures in compared.report.modes.values():
        assert figures.losses[0] == pytest.approx(expected, rel=1e-5)
    assert compared.report.max_loss_divergence < 1e-4


@pytest.mark.slow
def test_the_users_model_is_untouched(compared):
    """After compare the model's weights are bit-identical, its jit_compile and optimizer unchanged."""
    import tensorflow as tf

    after = compared.model.get_weights()
    assert len(after) == len(compared.weights_before)
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(after, compared.weights_before))
    assert compared.model.jit_compile is True
    assert int(compared.model.optimizer.iterations) == 0
    # Auto-clustering is process-wide: compare restores what it found.
    assert tf.config.optimizer.get_jit() == ""


@pytest.mark.slow
def test_planned_run_counts_the_datas_signatures(compared):
    """A finite generator is read to its end: 4 epochs of 6 steps, 3 signatures, counted from the data."""
    report = compared.report
    assert (report.planned_steps, report.planned_signatures, report.signatures_counted_from) == (
        24, 3, "data")
    for mode, figures in report.modes.items():
        assert report.projected_run_s[mode] == pytest.approx(
            figures.startup_s + 24 * figures.step_time_s + 3 * figures.signature_cost_s)
    assert report.best_mode == min(report.projected_run_s, key=report.projected_run_s.get)
    assert report.wall_s > 0 and report.verdict in str(report)


@pytest.mark.slow
def test_tensorboard_holds_per_mode_scalars_and_the_verdict(compared):
    """<log_dir>/compare/<mode> holds the mode's scalars and per-step losses; <log_dir>/compare the verdict."""
    from keras_xla_guard.output.tensorboard import escape_markdown

    for mode, figures in compared.report.modes.items():
        events = _events(compared.log_dir / "compare" / mode)
        assert events["xla_guard/compare/compilations"] == {0: figures.compilations}
        assert events["xla_guard/compare/distinct_signatures"] == {0: 3}
        assert events["xla_guard/compare/projected_run_s"][0] == pytest.approx(
            compared.report.projected_run_s[mode])
        assert sorted(events["xla_guard/compare/loss"]) == list(range(len(LENGTHS)))
        assert events["xla_guard/compare/loss"][5] == pytest.approx(figures.losses[5])
    text = _events(compared.log_dir / "compare")["xla_guard/compare/verdict"][0]
    assert escape_markdown(compared.report.verdict) in text
    assert "jit&#95;compile" in text and "projected run s" in text


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"steps": 0}, r"`steps` must be an integer >= 1. Received: steps=0"),
    ({"modes": ("plain",)}, r"at least two different modes"),
    ({"modes": ("plain", "xla")}, r"Unknown mode 'xla'"),
    ({"batch_size": -4}, r"Received: batch_size=-4"),
    ({"planned_epochs": 0}, r"Received: planned_epochs=0"),
    ({"planned_steps_per_epoch": 2.5}, r"Received: planned_steps_per_epoch=2.5"),
])
def test_bad_arguments_raise_before_training(kwargs, message):
    """Bad arguments raise ValueError naming the value and what is allowed."""
    from keras_xla_guard import compare

    with pytest.raises(ValueError, match=message):
        compare(object(), np.zeros((4, 2)), np.zeros((4, 1)), **kwargs)


def test_autoclustering_in_process_without_the_cpu_flag_is_refused(monkeypatch):
    """On CPU without TF_XLA_FLAGS=--tf_xla_cpu_global_jit, autoclustering is refused and says how."""
    from keras_xla_guard import compare

    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    with pytest.raises(ValueError, match=r"TF_XLA_FLAGS=--tf_xla_cpu_global_jit") as info:
        compare(_seq_model(False), _seq_dataset(LENGTHS), modes=("plain", "autoclustering"))
    assert "keras-xla-guard compare module:function" in str(info.value)


@pytest.mark.slow
def test_result_is_saved_for_the_html_report(compared):
    """<log_dir>/compare/compare_report.json holds the whole report, as the HTML report reads it."""
    import json

    from keras_xla_guard.output.runfile import find_compare

    assert find_compare(compared.log_dir) == json.loads(json.dumps(compared.report.to_dict()))
    assert compared.report.wall_s > 0
