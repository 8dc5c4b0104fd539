"""warm_up and the compile table, on real fits of a bucketed sequence model (Keras 3).

One session fixture trains the same model twice, with and without
`XlaGuardCallback(warm_up=True)`, with epoch 0 profiled from its first step.
"""

from __future__ import annotations

import html

import numpy as np
import pytest

from _fit_helpers import LENGTHS, _seq_dataset, _seq_model

pytestmark = pytest.mark.slow
# Distinct lengths in LENGTHS, and the step each is first seen at.
NEW_STEPS = (0, 1, 2, 4, 6)


def _state(model):
    from keras_xla_guard import seam

    variables, _ = seam.training_state(model)
    return [np.array(v.numpy()) for v in variables]


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    """(callback without warm-up, callback with warm-up), one epoch each."""
    import keras

    from keras_xla_guard import XlaGuardCallback

    out = []
    for warm in (False, True):
        keras.utils.set_random_seed(0)
        model = _seq_model(True)
        guard = XlaGuardCallback(log_dir=tmp_path_factory.mktemp(f"warm{warm}"), profile_epochs=(0,),
                                 skip_steps=0, verbose=0, async_analysis=False, warm_up=warm)
        model.fit(_seq_dataset(LENGTHS), epochs=1, verbose=0, callbacks=[guard])
        out.append((model, guard))
    return out


def test_compile_table_has_one_row_per_new_shape_with_step_and_signature(fits):
    """Without warm-up: 5 compilations, each at the step its new length first came, with its signature."""
    report = fits[0][1].reports[0]
    assert report.compilations == 5
    assert report.cache_hits == 0
    assert [row.step for row in report.compile_table] == list(NEW_STEPS)
    assert [row.signature for row in report.compile_table] == [
        f"x['tokens']: int32[8,{n}], y: float32[8,1]" for n in (5, 7, 9, 11, 13)
    ]
    assert {row.program for row in report.compile_table} == {"one_step_on_data"}
    assert not any(row.cache_hit for row in report.compile_table)
    assert all(row.compile_s > 0 for row in report.compile_table)


def test_compile_table_wall_times_add_up_to_the_trace_compile_wall(fits):
    """The rows' wall-clock compile times sum to compile_wall_s of the same trace."""
    from keras_xla_guard.trace.compile_wall import compile_wall_s

    report = fits[0][1].reports[0]
    assert sum(r.compile_s for r in report.compile_table) == pytest.approx(compile_wall_s(report.trace_path))


def test_warm_up_callback_leaves_no_compilation_in_the_training_window(fits):
    """With warm_up=True every new signature is a cache hit and the trace holds 0 compilations."""
    model, guard = fits[1]
    report = guard.reports[0]
    assert guard.warm_up_report is not None and len(guard.warm_up_report.signatures) == 5
    assert report.compilations == 0
    assert report.cache_hits == 5
    assert [(r.step, r.cache_hit) for r in report.compile_table] == [(s, True) for s in NEW_STEPS]


def test_compile_table_reaches_tensorboard_console_and_cli(fits, capsys):
    """The same 5 rows show in the xla_guard/compiles text, the console summary and `report`."""
    from _fit_helpers import _events
    from keras_xla_guard import format_report
    from keras_xla_guard.cli import main

    guard = fits[0][1]
    report = guard.reports[0]
    text = html.unescape(_events(guard.config.log_dir)["xla_guard/compiles"][0])
    assert text.startswith("**5 XLA compilation(s)**, 0 cache hit(s).")
    assert text.count("one_step_on_data") == 5 and "int32[8,13]" in text
    console = format_report(report)
    assert "compile table:     5 compiled, 0 cache hit(s)" in console
    assert console.count(" one_step_on_data ") == 5
    assert main(["report", report.trace_path, "--compiles"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "one_step_on_data" in ln]
    # A standalone trace knows the steps (the guard's step markers) but not the signatures.
    assert [ln.split()[2] for ln in lines] == [str(s) for s in NEW_STEPS]
    hits = html.unescape(_events(fits[1][1].config.log_dir)["xla_guard/compiles"][0])
    assert hits.startswith("**0 XLA compilation(s)**, 5 cache hit(s).") and hits.count("| yes |") == 5


def test_warm_up_trains_bit_identically(fits):
    """A fit after warm_up ends with the same weights and optimizer state as one without."""
    plain, warmed = fits[0][0], fits[1][0]
    for a, b in zip(_state(plain), _state(warmed)):
        np.testing.assert_array_equal(a, b)


def _bn_dropout_model():
    """Embedding, BatchNormalization, Dropout, Dense; Adam; jit_compile; fixed seeds."""
    import keras

    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(50, 8)(tokens)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Dropout(0.3)(keras.layers.GlobalAveragePooling1D()(h))
    model = keras.Model({"tokens": tokens}, keras.layers.Dense(1)(h))
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=True)
    return model


def _weights(model):
    return [np.array(v.numpy()) for v in [*model.variables, *model.optimizer.variables]]


def test_warm_up_restores_adam_batchnorm_dropout_state_and_serves_bucket_shapes(tmp_path):
    """warm_up on pad_to_buckets shapes restores every variable bit for bit; fit (identical to one
    without warm-up), evaluate and predict then compile nothing."""
    import tensorflow as tf

    from keras_xla_guard import analyze_trace, pad_to_buckets, warm_up

    rng = np.random.default_rng(0)
    rows = [rng.integers(1, 50, n).astype("int32") for n in rng.integers(3, 12, 48)]
    ds = tf.data.Dataset.from_generator(lambda: iter(rows), output_signature=tf.TensorSpec((None,), tf.int32))
    ds = ds.map(lambda t: ({"tokens": t}, tf.cast(tf.size(t), tf.float32)[None]))
    train = pad_to_buckets(ds, boundaries=(6, 12), batch_size=8, drop_remainder=True)
    shapes = [({"tokens": (8, b)}, (8, 1)) for b in (6, 12)]
    model, plain = _bn_dropout_model(), _bn_dropout_model()
    for m in (model, plain):
        m.fit(train.take(1), epochs=1, verbose=0)  # builds every variable
    before = _state(model)
    result = warm_up(model, shapes, element_spec=train.element_spec, steps=("train", "test", "predict"))
    assert result.restored == len(before)
    for a, b in zip(before, _state(model)):
        np.testing.assert_array_equal(a, b)
    runs = {"fit": lambda: model.fit(train, epochs=1, verbose=0),
            "evaluate": lambda: model.evaluate(train, verbose=0),
            "predict": lambda: model.predict(train.map(lambda x, y: x), verbose=0)}
    for name, run in runs.items():
        tf.profiler.experimental.start(str(tmp_path / name))
        run()
        tf.profiler.experimental.stop()
        assert analyze_trace(tmp_path / name).compilations == 0, name
        if name == "fit":
            warmed = _weights(model)
    plain.fit(train, epochs=1, verbose=0)
    for a, b in zip(warmed, _weights(plain)):
        np.testing.assert_array_equal(a, b)


def test_warm_up_rejects_bad_arguments():
    """Bad steps and empty signature lists are ValueErrors naming the value."""
    from keras_xla_guard import warm_up

    model = _seq_model(True)
    with pytest.raises(ValueError, match="steps=\\('fit',\\)"):
        warm_up(model, [((8, 5), (8, 1))], steps=("fit",))
    with pytest.raises(ValueError, match="at least one signature"):
        warm_up(model, [])


_TF_KERAS = """
import json, os, sys, tempfile
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np, tensorflow as tf, tf_keras as keras
from keras_xla_guard import analyze_trace, seam, warm_up

def build(seq=True):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    h = keras.layers.BatchNormalization()(keras.layers.Embedding(50, 8)(tokens))
    h = keras.layers.Dropout(0.3, seed=1)(keras.layers.GlobalAveragePooling1D()(h))
    model = keras.Model({"tokens": tokens}, keras.layers.Dense(1)(h))
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=True)
    return model

rng = np.random.default_rng(0)
batches = [({"tokens": rng.integers(1, 50, (8, n)).astype("int32")}, rng.standard_normal((8, 1)).astype("float32"))
           for n in (5, 7, 9, 5, 7)]
spec = ({"tokens": tf.TensorSpec((None, None), tf.int32)}, tf.TensorSpec((None, 1), tf.float32))
ds = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
state = lambda m: [np.array(v.numpy()) for v in seam.training_state(m)[0]]
legacy = warm_up(build(), [({"tokens": (8, 5)}, (8, 1))], element_spec=spec)
keras.backend.experimental.enable_tf_random_generator()
warmed, plain = build(), build()
result = warm_up(warmed, ds)
log = tempfile.mkdtemp()
tf.profiler.experimental.start(log)
warmed.fit(ds, epochs=1, verbose=0)
tf.profiler.experimental.stop()
plain.fit(ds, epochs=1, verbose=0)
a, b = state(warmed), state(plain)
from keras_xla_guard import XlaGuardCallback
guard = XlaGuardCallback(log_dir=tempfile.mkdtemp(), profile_epochs=(0,), skip_steps=0, verbose=0,
                         async_analysis=False, warm_up=True)
build().fit(ds, epochs=1, verbose=0, callbacks=[guard])
report = guard.reports[0]
print(json.dumps({"callback": [report.compilations, report.cache_hits, report.distinct_signatures],"keras": seam.keras_version(warmed), "signatures": len(result.signatures),
                  "notes": list(result.notes), "legacy_notes": list(legacy.notes),
                  "compilations": analyze_trace(log).compilations,
                  "identical": len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))}))
"""


def test_warm_up_on_tf_keras_compiles_ahead_and_trains_identically():
    """tf_keras: 0 compilations after warm_up (also the callback's), identical training; legacy Dropout
    RNG state is named as not restored."""
    from _helpers import run_python

    out = run_python(_TF_KERAS, env={"TF_USE_LEGACY_KERAS": "1"})
    assert out["keras"].startswith("tf_keras")
    assert out["signatures"] == 3
    assert out["notes"] == []
    assert out["compilations"] == 0
    assert out["identical"] is True
    assert out["legacy_notes"] == ["not restored: the random state of dropout (legacy stateful RNG ops)"]
    # The callback warms the function its signature tap runs (a retraced copy in tf_keras).
    assert out["callback"] == [0, 3, 3]
