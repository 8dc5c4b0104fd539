"""warm_up and the compile table, on real fits (Keras 3; tf_keras in a subprocess).

One module fixture trains the same bucketed sequence model twice, with and
without `XlaGuardCallback(warm_up=True)`, with epoch 0 profiled from its
first step. Further sections pin that warm_up never changes training (the
data `fit` reads, on every kind of pipeline) and that its restore cannot be
half done (real SIGINTs inside it and at random times).
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
        guard = XlaGuardCallback(
            log_dir=tmp_path_factory.mktemp(f"warm{warm}"),
            profile_epochs=(0,),
            skip_steps=0,
            verbose=0,
            async_analysis=False,
            warm_up=warm,
        )
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
    """With warm_up=True the trace holds 0 compilations and fit's steps bring no new signature: 5 warm_up rows."""
    model, guard = fits[1]
    report = guard.reports[0]
    assert guard.warm_up_report is not None and len(guard.warm_up_report.signatures) == 5
    assert (report.compilations, report.new_signatures, report.cache_hits, report.compile_table) == (
        0,
        0,
        0,
        (),
    )
    rows = guard.compilations[0].rows
    assert [(r.function, r.signature) for r in rows] == [
        ("warm_up", str(s)) for s in guard.warm_up_report.signatures
    ]


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
    warmed = html.unescape(_events(fits[1][1].config.log_dir)["xla_guard/compiles"][0])
    assert warmed.startswith("**0 XLA compilation(s)**, 0 cache hit(s).")
    counted = html.unescape(_events(fits[1][1].config.log_dir)["xla_guard/counted_compilations"][0])
    assert counted.startswith("**Compilations (one per new input signature): warm_up 5.**")


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
    runs = {
        "fit": lambda: model.fit(train, epochs=1, verbose=0),
        "evaluate": lambda: model.evaluate(train, verbose=0),
        "predict": lambda: model.predict(train.map(lambda x, y: x), verbose=0),
    }
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

x = rng.standard_normal((80, 6)).astype("float32")
y = x[:, :2].sum(axis=1, keepdims=True)
def shuffled_fit(warm):
    keras.utils.set_random_seed(1)
    mlp = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    mlp.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=True)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=7).batch(16)
    if warm == "function":
        warm_up(mlp, data)
    callbacks = [XlaGuardCallback(log_dir=tempfile.mkdtemp(), profile_epochs=(), verbose=0,
                                  warm_up=True)] if warm == "callback" else []
    mlp.fit(data, epochs=3, verbose=0, callbacks=callbacks)
    return [v.tobytes() for v in state(mlp)]
shuffled_plain = shuffled_fit(None)
shuffled = {warm: shuffled_fit(warm) == shuffled_plain for warm in ("function", "callback")}
print(json.dumps({"shuffled_identical": shuffled,
                  "callback": [report.compilations, report.cache_hits, report.distinct_signatures],"keras": seam.keras_version(warmed), "signatures": len(result.signatures),
                  "notes": list(result.notes), "legacy_notes": list(legacy.notes),
                  "compilations": analyze_trace(log).compilations,
                  "identical": len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))}))
"""


def test_warm_up_on_tf_keras_compiles_ahead_and_trains_identically():
    """tf_keras: 0 compilations after warm_up (also the callback's), identical training (also on a
    shuffled pipeline, standalone and through the callback); legacy Dropout RNG state is named as not restored."""
    from _helpers import run_python

    out = run_python(_TF_KERAS, env={"TF_USE_LEGACY_KERAS": "1"})
    assert out["keras"].startswith("tf_keras")
    assert out["signatures"] == 3
    assert out["notes"] == []
    assert out["compilations"] == 0
    assert out["identical"] is True
    assert out["legacy_notes"] == ["not restored: the random state of dropout (legacy stateful RNG ops)"]
    # The callback warms the function its signature tap runs (a retraced copy in tf_keras).
    # Its warmed signatures are no new ones in the window: no compilation, no cache hit.
    assert out["callback"] == [0, 0, 3]
    assert out["shuffled_identical"] == {"function": True, "callback": True}


# warm_up never changes training: the pipeline fit reads ---------------------------------------

_ROWS = 80  # 5 full batches of 16
PIPELINES = ("shuffled", "repeated", "cached", "file_cached", "prefetched", "generator")


def _rows():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((_ROWS, 6)).astype("float32")
    return x, (x @ rng.standard_normal((6, 1))).astype("float32")


def _pipeline(kind, directory):
    """A `kind` of pipeline over the same 80 rows in batches of 16, whose epochs differ in order."""
    import tensorflow as tf

    x, y = _rows()
    if kind == "generator":

        def rows():
            for i in np.random.permutation(_ROWS):  # NumPy's global generator
                yield x[i], y[i]

        spec = (tf.TensorSpec((6,), tf.float32), tf.TensorSpec((1,), tf.float32))
        return tf.data.Dataset.from_generator(rows, output_signature=spec).batch(16)
    base = tf.data.Dataset.from_tensor_slices((x, y))
    if kind == "cached":
        return base.cache().shuffle(64, seed=7).batch(16)
    if kind == "file_cached":
        return base.cache(str(directory / "cache")).shuffle(64, seed=7).batch(16)
    if kind == "snapshot":
        return base.shuffle(64, seed=7).batch(16, drop_remainder=True).snapshot(str(directory / "snapshot"))
    shuffled = base.shuffle(64, seed=7)
    if kind == "repeated":
        return shuffled.repeat().batch(16)
    if kind == "prefetched":
        return shuffled.batch(16).prefetch(tf.data.AUTOTUNE)
    return shuffled.batch(16)


def _deterministic_fit(kind, directory, warm=None):
    """Seeds everything, builds an MLP and the pipeline, warms up (`"function"`, `"callback"` or not)
    and fits 3 epochs; returns (every training variable's bytes, the WarmUpReport or None)."""
    import keras

    from keras_xla_guard import XlaGuardCallback, seam, warm_up

    directory.mkdir()
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=True)
    dataset = _pipeline(kind, directory)
    report, callbacks = None, []
    if warm == "function":
        report = warm_up(model, dataset, max_batches=10)
    elif warm == "callback":
        callbacks = [XlaGuardCallback(log_dir=directory / "logs", profile_epochs=(), verbose=0, warm_up=True)]
    model.fit(
        dataset, epochs=3, steps_per_epoch=5 if kind == "repeated" else None, verbose=0, callbacks=callbacks
    )
    if callbacks:
        report = callbacks[0].warm_up_report
    return [np.asarray(v.numpy()).tobytes() for v in seam.training_state(model)[0]], report


@pytest.mark.parametrize("kind", PIPELINES)
def test_a_plain_read_of_each_pipeline_changes_what_fit_reads_next(kind, tmp_path):
    """Pins the hazard: one read of the pipeline (what warm_up used to do) changes the next epoch's batches."""
    import keras

    def next_epoch(read_first, directory):
        directory.mkdir()
        keras.utils.set_random_seed(1)
        dataset = _pipeline(kind, directory)
        if read_first:
            for _ in dataset.take(2):
                pass
        return [x.numpy().tobytes() for x, _ in dataset.take(5)]

    assert next_epoch(True, tmp_path / "read") != next_epoch(False, tmp_path / "unread")


@pytest.mark.parametrize("kind", PIPELINES)
def test_warm_up_leaves_a_deterministic_fit_bit_identical(kind, tmp_path):
    """warm_up before fit and XlaGuardCallback(warm_up=True) leave every variable byte-identical to the
    same seeded fit without them, on shuffled, repeated, cached, prefetched and generator pipelines."""
    plain, _ = _deterministic_fit(kind, tmp_path / "plain")
    for warm, endless_read in (("function", 10), ("callback", 1000)):
        state, report = _deterministic_fit(kind, tmp_path / warm, warm)
        assert report.notes == ()
        assert report.batches_read == (endless_read if kind == "repeated" else 5)
        assert [str(s) for s in report.signatures] == ["x: float32[16,6], y: float32[16,1]"]
        assert len(state) == len(plain) and all(a == b for a, b in zip(state, plain)), warm
    if kind == "file_cached":
        # Only the fits wrote cache files: one set per fit, none by a warm-up's read.
        assert sorted(
            p.name for p in (tmp_path / "function").iterdir() if p.name.startswith("cache")
        ) == sorted(p.name for p in (tmp_path / "plain").iterdir() if p.name.startswith("cache"))


@pytest.mark.parametrize("data", ["arrays", "py_dataset"])
def test_a_fit_after_warm_up_on_shuffled_arrays_or_a_py_dataset_is_bit_identical(data):
    """warm_up(model, signatures) before a seeded fit on shuffled NumPy arrays or a reshuffling
    PyDataset: every array, the losses and NumPy's, Python's and Keras' generators as without it
    (the same test as on JAX, tests/on_jax/test_warmup.py)."""
    from _identity import seeded_fit

    without, history, states = seeded_fit(False, data)
    warmed, warmed_history, warmed_states = seeded_fit(True, data)
    assert len(warmed) == len(without) == 19
    for a, b in zip(warmed, without):
        np.testing.assert_array_equal(a, b)
    assert warmed_history == history
    assert warmed_states == states


def test_warm_up_does_not_read_a_pipeline_that_writes_files(tmp_path):
    """A snapshot pipeline is not read: one warning says why, the signature its element_spec fixes is
    warmed, nothing is written, and the fit stays bit-identical; with an unknown batch size nothing is warmed."""
    import tensorflow as tf

    from keras_xla_guard import warm_up
    from keras_xla_guard.errors import XlaGuardWarning

    plain, _ = _deterministic_fit("snapshot", tmp_path / "plain")
    with pytest.warns(XlaGuardWarning) as caught:
        state, report = _deterministic_fit("snapshot", tmp_path / "function", "function")
    messages = [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)]
    assert messages == [
        (
            "keras-xla-guard: warm_up: did not read the dataset, because it writes files "
            "(SnapshotDatasetV2): warmed the one signature its element_spec fixes"
        )
    ]
    assert report.batches_read == 0
    assert [str(s) for s in report.signatures] == ["x: float32[16,6], y: float32[16,1]"]
    assert all(a == b for a, b in zip(state, plain))
    unknown = tf.data.Dataset.from_tensor_slices(_rows()).batch(16).snapshot(str(tmp_path / "unknown"))
    with pytest.warns(XlaGuardWarning, match="nothing was warmed; pass the signatures"):
        report = warm_up(_seq_model(True), unknown)
    assert report.signatures == () and report.batches_read == 0
    assert not (tmp_path / "unknown").exists()


def test_warm_up_does_not_read_when_the_tf_data_probe_fails(tmp_path, monkeypatch):
    """When this TensorFlow's copies cannot be trusted, the warning names the version and the dataset is not read."""
    from keras_xla_guard.errors import XlaGuardWarning
    from keras_xla_guard.seam import tf_data

    plain, _ = _deterministic_fit("shuffled", tmp_path / "plain")
    monkeypatch.setattr(tf_data, "_probe", lambda: "TensorFlow 0.0: copies share state")
    with pytest.warns(
        XlaGuardWarning,
        match="because TensorFlow 0.0: copies share state: its element_spec "
        "leaves dimensions unknown, so nothing was warmed",
    ):
        state, report = _deterministic_fit("shuffled", tmp_path / "function", "function")
    assert report.batches_read == 0 and report.signatures == ()
    assert all(a == b for a, b in zip(state, plain))


# warm_up's restore cannot be half-done ----------------------------------------------------------


def _built_bn_model():
    """`_bn_dropout_model` after one step (every variable exists), with its shapes and element_spec."""
    import tensorflow as tf

    model = _bn_dropout_model()
    rng = np.random.default_rng(0)
    model.fit(
        {"tokens": rng.integers(1, 50, (8, 5)).astype("int32")},
        rng.standard_normal((8, 1)).astype("float32"),
        epochs=1,
        verbose=0,
    )
    spec = ({"tokens": tf.TensorSpec((None, None), tf.int32)}, tf.TensorSpec((None, 1), tf.float32))
    return model, [({"tokens": (8, n)}, (8, 1)) for n in (5, 7)], spec


def _on_write_back(variables, action):
    """Makes warm_up's write-back of each of `variables` run `action()` first."""
    import sys

    for variable in variables:

        def assign(value, original=variable.assign):
            if sys._getframe(1).f_code.co_name == "_restore":
                action()
            return original(value)

        variable.assign = assign


def _bn_variables(model, which):
    """The Dense kernel (`"kernel"`), BatchNormalization moving mean (`"moving_mean"`) or `"iterations"`."""
    import keras

    if which == "iterations":
        return model.optimizer.iterations
    layer_type = keras.layers.Dense if which == "kernel" else keras.layers.BatchNormalization
    return getattr(next(layer for layer in model.layers if isinstance(layer, layer_type)), which)


def _sigint():
    import os
    import signal

    os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.usefixtures("python_sigint")
@pytest.mark.parametrize("which", [("kernel",), ("moving_mean", "iterations")])
def test_sigints_inside_the_restore_are_raised_once_after_every_variable_is_back(which):
    """Real SIGINTs sent while warm_up writes variables back: the restore finishes, then one
    KeyboardInterrupt is raised; every variable, `iterations` included, is bit-identical to before."""
    import traceback

    model, shapes, spec = _built_bn_model()
    before = _state(model)
    iterations = int(model.optimizer.iterations.numpy())
    _on_write_back([_bn_variables(model, w) for w in which], _sigint)
    from keras_xla_guard import warm_up

    with pytest.raises(KeyboardInterrupt) as raised:
        warm_up(model, shapes, element_spec=spec)
    frames = traceback.extract_tb(raised.value.__traceback__)
    assert [f.name for f in frames if f.filename.endswith("_interrupts.py")][:1] == ["__exit__"]
    assert raised.value.__context__ is None
    assert int(model.optimizer.iterations.numpy()) == iterations
    for a, b in zip(before, _state(model)):
        np.testing.assert_array_equal(a, b)


def test_a_variable_that_cannot_be_written_back_is_named_and_the_rest_are_restored():
    """An error writing one variable back: warm_up warns with its name, reports it, restores the others."""
    from keras_xla_guard import seam, warm_up
    from keras_xla_guard.errors import XlaGuardWarning

    model, shapes, spec = _built_bn_model()
    before = _state(model)

    def fail():
        raise RuntimeError("device lost")

    kernel = _bn_variables(model, "kernel")
    _on_write_back([kernel], fail)
    with pytest.warns(
        XlaGuardWarning,
        match=r"1 variable\(s\) could not be put back and keep their "
        rf"post-warm-up values: {kernel.path}$",
    ):
        report = warm_up(model, shapes, element_spec=spec)
    assert report.unrestored == (kernel.path,)
    assert report.restored == len(before) - 1
    names = [v.path for v in seam.training_state(model)[0]]
    changed = [n for n, a, b in zip(names, before, _state(model)) if not np.array_equal(a, b)]
    assert changed == [kernel.path]


def test_real_sigints_at_random_times_never_leave_the_model_changed():
    """30 warm-ups hit by real SIGINTs at random times (every 2nd by two): no trial changes a variable,
    and no interrupt is raised in the middle of the write-back."""
    import json
    import os
    import subprocess
    import sys

    from _helpers import REPO

    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "stress_warmup_interrupt.py"),
            "--trials",
            "30",
            "--double-every",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    outcomes = result["outcomes"]
    assert result["trials"] == 30 and result["double_signal_trials"] == 15
    assert outcomes["restore"] == 0, result
    assert outcomes["checkpoint"] + outcomes["forced"] + outcomes["held"] > 0, result
    assert result["trials_with_changed_variables"] == 0, result
    assert result["iterations_seen"] == [1], result
