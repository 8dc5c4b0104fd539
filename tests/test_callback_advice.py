"""The callback's advice on XLA's switches uses the run's evidence: blockers, auto-clustering, a saved compare.

Real tiny Keras models, real profiled windows. Auto-clustering on a CPU
needs `TF_XLA_FLAGS=--tf_xla_cpu_global_jit` before TensorFlow starts,
hence its fresh interpreter.
"""

from __future__ import annotations

import json
import warnings

import pytest
from _helpers import make_data, make_model, run_python

from keras_xla_guard import XlaGuardCallback
from keras_xla_guard.diagnose.advice import CPU_EVIDENCE, measure_first

pytestmark = pytest.mark.slow

_WHAT = (
    "XLA is not requested for this model: model.jit_compile is False (Keras resolves jit_compile='auto' to "
    "False on CPU-only machines and under a distribution strategy)."
)


def _plain_fit_notes(log_dir) -> list[str]:
    """The notes of the first profiled window of a plain (jit_compile='auto', so off on CPU) fit."""
    model = make_model("auto")
    x, y = make_data(256)
    guard = XlaGuardCallback(log_dir=log_dir, profile_epochs=(1,), verbose=0, async_analysis=False)
    model.fit(x, y, epochs=2, batch_size=32, callbacks=[guard], verbose=0)
    report = guard.reports[1]
    assert report.ok and report.xla_time_fraction == 0.0
    return list(report.notes)


def test_without_evidence_the_note_measures_first_with_the_cpu_figures(tmp_path):
    """No blocker, no compare in log_dir: JIT_COMPILE_OFF says measure with compare first, citing the CPU slowdowns."""
    notes = _plain_fit_notes(tmp_path)
    (off,) = [n for n in notes if n.startswith("JIT_COMPILE_OFF")]
    assert off.startswith(f"JIT_COMPILE_OFF: {_WHAT} {measure_first()}. Fix: ")
    assert CPU_EVIDENCE in off
    assert off.index("keras_xla_guard.compare(model, x, y)") < off.index(
        "jit_compile=True)  # only if compare"
    )
    assert not any(n.startswith("JIT_COMPILE_AUTO_RESOLVES_FALSE") for n in notes)


def test_a_compare_saved_in_the_log_dir_decides(tmp_path):
    """compare found plain faster: the note quotes its verdict and says keep XLA off, with no fix."""
    # A real compare result (bench_compare's sequence model, where plain won), saved where compare saves.
    from _helpers import REPO

    saved = REPO / "benchmarks" / "results" / "bench_compare-20261203T162056Z.json"
    compare = next(
        c["compare"]
        for c in json.loads(saved.read_text())["result"]["cases"]
        if c["case"] == "xla_does_not_pay"
    )
    assert compare["best_mode"] == "plain"
    (tmp_path / "compare").mkdir()
    (tmp_path / "compare" / "compare_report.json").write_text(json.dumps(compare))
    notes = _plain_fit_notes(tmp_path)
    (off,) = [n for n in notes if n.startswith("JIT_COMPILE_OFF")]
    assert off == (
        f"JIT_COMPILE_OFF: {_WHAT} compare measured in this log dir that jit_compile does not pay "
        f"here: {compare['verdict'].rstrip('.')}. Keep it off."
    )


@pytest.mark.parametrize("same", [True, False])
def test_a_compare_of_another_model_is_not_taken_as_evidence(tmp_path, same):
    """A saved compare that says XLA pays: used for the model it measured; for another, a warning and the hedge."""
    from _helpers import REPO

    from keras_xla_guard import XlaGuardWarning
    from keras_xla_guard.comparison.report import describe_model

    saved = REPO / "benchmarks" / "results" / "bench_compare-20261203T162056Z.json"
    compare = next(
        c["compare"] for c in json.loads(saved.read_text())["result"]["cases"] if c["case"] == "xla_pays"
    )
    assert compare["best_mode"] == "jit_compile"
    ours = describe_model(make_model("auto"))
    compare["model"] = ours if same else {**ours, "name": "deep_mlp", "params": ours["params"] + 1000}
    (tmp_path / "compare").mkdir()
    (tmp_path / "compare" / "compare_report.json").write_text(json.dumps(compare))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        notes = _plain_fit_notes(tmp_path)
    (off,) = [n for n in notes if n.startswith("JIT_COMPILE_OFF")]
    mismatch = [str(w.message) for w in caught if "measured another model" in str(w.message)]
    if same:
        assert off.startswith(
            f"JIT_COMPILE_OFF: {_WHAT} compare measured Sequential {ours['name']!r} ({ours['params']:,} "
            "parameters) in this log dir that XLA pays: "
        )
        assert mismatch == []
    else:
        assert off.startswith(f"JIT_COMPILE_OFF: {_WHAT} {measure_first()}. Fix: ")
        (message,) = mismatch
        assert (
            f"measured another model (Sequential 'deep_mlp' ({ours['params'] + 1000:,} parameters)" in message
        )
        assert all(
            issubclass(w.category, XlaGuardWarning) for w in caught if "another model" in str(w.message)
        )


_AUTOCLUSTERING = """
import os, json, tempfile
os.environ["TF_XLA_FLAGS"] = "--tf_xla_cpu_global_jit"
import numpy as np
import tensorflow as tf
import keras
from keras_xla_guard import XlaGuardCallback
tf.config.optimizer.set_jit(True)

class PyFunctionLayer(keras.layers.Layer):
    def call(self, x):
        y = tf.py_function(lambda t: t * 2.0, [x], x.dtype)
        y.set_shape(x.shape)
        return y

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(32, activation="relu"),
                          PyFunctionLayer(name="py_layer"), keras.layers.Dense(32, activation="tanh"),
                          keras.layers.Dense(1)])
model.compile("adam", "mse")
rng = np.random.default_rng(0)
x, y = rng.random((256, 6), dtype="float32"), rng.random((256, 1), dtype="float32")
guard = XlaGuardCallback(log_dir=tempfile.mkdtemp(), profile_epochs=(1,), verbose=0, async_analysis=False)
model.fit(x, y, epochs=2, batch_size=32, callbacks=[guard], verbose=0)
report = guard.reports[1]
print(json.dumps({"mode": guard.engine.xla_mode, "jit_compile": model.jit_compile,
                  "xla_time_s": report.xla_time_s, "notes": list(report.notes)}))
"""


def test_under_auto_clustering_a_py_function_is_named_as_the_blocker_and_no_switch_is_advised():
    """Auto-clustering on, a py_function in the model: one note says so and that jit_compile=True would fail."""
    out = run_python(_AUTOCLUSTERING)
    assert (out["mode"], out["jit_compile"]) == ("autoclustering", False)
    assert out["xla_time_s"] > 0  # the clusters around the py_function ran under XLA
    # The fix (move the op out) is comments only, so the note is the message.
    assert out["notes"][0] == (
        "JIT_COMPILE_BLOCKED: model.jit_compile is False: XLA compiles only what auto-clustering "
        "(tf.config.optimizer.get_jit()) clusters. The train step runs ops without an XLA kernel on XLA_CPU_JIT: "
        "EagerPyFunc in layer 'py_layer'. model.compile(jit_compile=True) would fail in Keras because of them. "
        "Auto-clustering is on (tf.config.optimizer.get_jit()): XLA compiles the ops around them, and these run "
        "as plain TF ops."
    )
    assert not any("jit_compile=True" in n and "would fail" not in n for n in out["notes"])
