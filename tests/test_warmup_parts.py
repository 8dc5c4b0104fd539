"""warm_up's parts: argument checks, the batches and element_spec it builds
from shapes, putting variables and random state back, its report, and whole
warm-ups of a one-layer model (about a second each, real steps on real
TensorFlow). Fast; the warm-ups of real training runs (bit-identical fits,
interrupts, every Keras flavour) are in tests/test_warmup.py."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import numpy as np
import pytest

from keras_xla_guard import warm_up
from keras_xla_guard.signatures import Signature
from keras_xla_guard.warmup import (
    WarmUpReport,
    _batches_from_shapes,
    _batches_from_spec,
    _is_shape,
    _leaves,
    _name,
    _PythonRandomState,
    _rebuild,
    _restore,
)


class _Compiled:
    """Stands for a compiled model in argument checks that fail before the model is used."""

    optimizer = object()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"steps": ()},
            "`steps` must be a non-empty subset of ('train', 'test', 'predict'). Received: steps=()",
        ),
        ({"steps": ("train", "fit")}, "Received: steps=('train', 'fit')"),
        ({"steps": "fit"}, "Received: steps=('fit',)"),
        ({"max_batches": 0}, "`max_batches` must be an integer >= 1. Received: max_batches=0"),
        (
            {"shapes_or_dataset": {"x": (2, 3)}},
            "`shapes_or_dataset` must be a tf.data.Dataset or a list of "
            "signatures. Received: shapes_or_dataset={'x': (2, 3)}",
        ),
    ],
)
def test_bad_arguments_are_refused_naming_the_value(kwargs, message):
    """Bad steps, max_batches or inputs are ValueErrors quoting what was passed."""
    args = {"shapes_or_dataset": [((2, 3), (2, 1))], **kwargs}
    with pytest.raises(ValueError) as raised:
        warm_up(_Compiled(), **args)
    assert message in str(raised.value)


def test_a_model_without_an_optimizer_is_refused_for_the_train_step_only():
    """No optimizer: train is refused naming the model; predict alone gets past that check."""

    class Uncompiled:
        optimizer = None

        def __repr__(self) -> str:
            return "<uncompiled>"

    with pytest.raises(
        ValueError, match=r"compiled with an optimizer before warm_up\. Received: model=<uncompiled>"
    ):
        warm_up(Uncompiled(), [((2, 3), (2, 1))])
    with pytest.raises(ValueError, match="`shapes_or_dataset` must be"):
        warm_up(Uncompiled(), "not shapes", steps=("predict",))


@pytest.mark.parametrize(
    ("value", "shape"),
    [
        ((2, 3), True),
        ([4, None], True),
        ((), True),
        ((2, True), False),
        ((2, 3.0), False),
        ("ab", False),
        ({"a": 1}, False),
    ],
)
def test_a_shape_is_a_tuple_or_list_of_ints_or_none(value, shape):
    """Tuples and lists of ints (or None) are shapes; bools, floats, strings and dicts are not."""
    assert _is_shape(value) is shape


def test_leaves_and_rebuild_walk_dicts_by_sorted_key():
    """Leaves come in tf.nest order (dict keys sorted); rebuild puts replacements back in place."""
    import tensorflow as tf

    spec = tf.TensorSpec([2], tf.int32)
    structure = ({"b": (2, 5), "a": spec}, [(2, 1)])
    assert _leaves(structure) == [spec, (2, 5), (2, 1)]
    assert _rebuild(structure, ["A", "B", "C"]) == ({"a": "A", "b": "B"}, ["C"])
    with pytest.raises(ValueError) as raised:
        _leaves((3, "x"))
    assert str(raised.value) == (
        "Each signature must be a nested structure (tuples, lists, dicts) of shapes "
        "(tuples of ints), tf.TensorSpec or arrays. Received: 3"
    )


def test_batches_from_shapes_are_zeros_with_unknown_batch_and_varying_dims():
    """Zeros of each shape; the spec leaves dim 0 and the dims that vary unknown, the rest fixed."""
    import tensorflow as tf

    batches, spec = _batches_from_shapes([((4, 5), (4, 1)), ((4, 7), (4, 1))], None)
    assert [(b[0].shape, b[1].shape) for b in batches] == [((4, 5), (4, 1)), ((4, 7), (4, 1))]
    assert all(b[0].dtype == np.float32 and not b[0].any() for b in batches)
    assert spec == (tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None, 1], tf.float32))


def test_batches_from_shapes_take_dtypes_from_the_spec_or_the_leaves():
    """element_spec gives the dtypes; else a TensorSpec's or an array's own; else float32."""
    import tensorflow as tf

    given = (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, 1], tf.float16))
    batches, spec = _batches_from_shapes([((2, 3), (2, 1))], given)
    assert (batches[0][0].dtype, batches[0][1].dtype, spec) == (np.int32, np.float16, given)
    batches, spec = _batches_from_shapes(
        [(tf.TensorSpec([2, 3], tf.int64), np.zeros((2, 1), "float16"))], None
    )
    assert (batches[0][0].dtype, batches[0][1].dtype) == (np.int64, np.float16)
    assert spec == (tf.TensorSpec([None, 3], tf.int64), tf.TensorSpec([None, 1], tf.float16))


@pytest.mark.parametrize(
    ("shapes", "element_spec", "message"),
    [
        ([], None, "must hold at least one signature. Received: []"),
        ([((2, 3),), ((2, 3), (2, 1))], None, "All signatures must have the same structure"),
        ([((2, None),)], None, "Signatures need fully known shapes. Received: (2, None)"),
        ([((2, 3),)], ("spec-a", "spec-b"), "`element_spec` has 2 tensors but each signature has 1"),
    ],
)
def test_bad_signatures_are_refused(shapes, element_spec, message):
    """No signature, mixed structures, unknown dims or a spec of another size: ValueErrors."""
    import tensorflow as tf

    if element_spec is not None:
        element_spec = tuple(tf.TensorSpec([2], tf.float32) for _ in element_spec)
    with pytest.raises(ValueError) as raised:
        _batches_from_shapes(shapes, element_spec)
    assert message in str(raised.value)


def test_batches_from_spec_only_when_every_dimension_is_known():
    """A fully known spec gives one zero batch of its dtypes; an unknown dimension gives none."""
    import tensorflow as tf

    (batch,) = _batches_from_spec((tf.TensorSpec([2, 3], tf.int32), tf.TensorSpec([2], tf.float32)))
    assert (batch[0].shape, batch[0].dtype, batch[1].shape) == ((2, 3), np.int32, (2,))
    assert _batches_from_spec((tf.TensorSpec([None, 3], tf.int32),)) == []


def test_random_state_is_put_back():
    """Python's and NumPy's global generators draw again what they drew before restore."""
    state = _PythonRandomState()
    assert state.used is False
    first = (random.random(), np.random.random())
    state.restore()
    assert (random.random(), np.random.random()) == first


def test_restore_writes_back_what_it_can_and_names_the_rest():
    """Each variable gets its saved value; one whose assign fails is named by its path."""
    import tensorflow as tf

    good = tf.Variable([1.0, 2.0], name="good")

    class Broken:
        path = "model/broken"

        def assign(self, value: object) -> None:
            raise RuntimeError("read-only")

    assert _restore([good, Broken()], [np.array([5.0, 6.0]), np.array([0.0])]) == ["model/broken"]
    assert good.numpy().tolist() == [5.0, 6.0]
    assert _name(good) == "good:0"  # a tf.Variable has no Keras path: its name


def test_report_dict_has_every_field():
    """WarmUpReport.to_dict: signatures as text, steps, time, reads, restored, notes, unrestored."""
    sig = Signature.of((np.zeros((2, 3)), np.zeros((2, 1))), root_names=("x", "y", "sample_weight"))
    report = WarmUpReport(
        signatures=(sig,),
        steps=("train",),
        seconds=1.5,
        batches_read=4,
        restored=7,
        notes=("n",),
        unrestored=("v",),
    )
    assert report.to_dict() == {
        "signatures": ["x: float64[2,3], y: float64[2,1]"],
        "steps": ["train"],
        "seconds": 1.5,
        "batches_read": 4,
        "restored": 7,
        "notes": ["n"],
        "unrestored": ["v"],
    }


def _counting_model(steps_per_execution: int = 1, compiled: bool = True):
    """A Dense(1) model on 3 features; `calls` counts the batches its forward pass ran on.

    The counter is a `tf.Variable` outside the model, so the warm-up neither
    sees nor restores it.
    """
    import keras
    import tensorflow as tf

    calls = tf.Variable(0, dtype=tf.int64)

    class Count(keras.layers.Layer):
        def call(self, x):
            calls.assign_add(1)
            return x

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), Count(), keras.layers.Dense(1)])
    if compiled:
        model.compile(optimizer="sgd", loss="mse", jit_compile=False, steps_per_execution=steps_per_execution)
    return model, calls


def _values(model) -> list[np.ndarray]:
    from keras_xla_guard import seam

    return [np.array(v.numpy()) for v in seam.training_state(model)[0]]


def _xy(*rows: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    return [((n, 3), (n, 1)) for n in rows]


def _guard_warnings(record) -> list[str]:
    from keras_xla_guard.errors import XlaGuardWarning

    return [str(w.message) for w in record if issubclass(w.category, XlaGuardWarning)]


def test_warm_up_from_shapes_runs_each_step_on_each_signature_and_puts_everything_back():
    """3 signatures, train/test/predict, 2 steps per call: 9 forward passes, every variable back bit for bit."""
    model, calls = _counting_model(steps_per_execution=2)
    before = _values(model)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report = warm_up(model, _xy(2, 4, 5), steps=("train", "test", "predict"))
    # train: ceil(3 / 2) = 2 calls running 3 batches; test the same; predict 3 batches.
    assert int(calls.numpy()) == 9
    assert [str(s) for s in report.signatures] == [
        "x: float32[2,3], y: float32[2,1]",
        "x: float32[4,3], y: float32[4,1]",
        "x: float32[5,3], y: float32[5,1]",
    ]
    assert (report.steps, report.batches_read, report.restored) == (("train", "test", "predict"), 0, 6)
    assert (report.notes, report.unrestored, _guard_warnings(record)) == ((), (), [])
    assert 0 < report.seconds < 120
    after = _values(model)
    assert len(after) == len(before) == 6
    assert all(a.tobytes() == b.tobytes() for a, b in zip(after, before))


def test_warm_up_with_one_step_per_call_calls_the_train_function_once_per_signature():
    """steps='test' is one step; 2 signatures at 1 step per call: 2 forward passes."""
    model, calls = _counting_model()
    report = warm_up(model, _xy(2, 3), steps="test")
    assert (int(calls.numpy()), report.steps) == (2, ("test",))


def test_warm_up_reads_a_dataset_once_per_signature_up_to_max_batches():
    """5 rows in batches of 2: 3 batches read, 2 signatures run; max_batches=2 reads 2, runs 1."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(
        (np.zeros((5, 3), np.float32), np.zeros((5, 1), np.float32))
    ).batch(2)
    model, calls = _counting_model()
    report = warm_up(model, dataset)
    assert [str(s) for s in report.signatures] == [
        "x: float32[2,3], y: float32[2,1]",
        "x: float32[1,3], y: float32[1,1]",
    ]
    assert (report.batches_read, report.restored, report.notes, int(calls.numpy())) == (3, 6, (), 2)
    report = warm_up(model, dataset, max_batches=2)
    assert (len(report.signatures), report.batches_read, int(calls.numpy())) == (1, 2, 3)
    with pytest.raises(ValueError, match=r"`shapes_or_dataset` is an empty dataset\. Received: <"):
        warm_up(model, dataset.take(0))


def test_a_dataset_that_writes_files_is_not_read_and_only_its_fixed_signature_is_warmed(tmp_path):
    """snapshot(): not read; a fully known element_spec is warmed, an unknown one is not; each warned."""
    import tensorflow as tf

    rows = tf.data.Dataset.from_tensor_slices((np.zeros((4, 3), np.float32), np.zeros((4, 1), np.float32)))
    model, calls = _counting_model()
    because = (
        "keras-xla-guard: warm_up: did not read the dataset, because it writes files (SnapshotDatasetV2): "
    )
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fixed = warm_up(model, rows.batch(2, drop_remainder=True).snapshot(str(tmp_path / "a")))
        unknown = warm_up(model, rows.batch(2).snapshot(str(tmp_path / "b")))
    assert [str(s) for s in fixed.signatures] == ["x: float32[2,3], y: float32[2,1]"]
    assert (fixed.batches_read, fixed.restored, int(calls.numpy())) == (0, 6, 1)
    assert (unknown.signatures, unknown.restored) == ((), 0)
    assert _guard_warnings(record) == [
        because + "warmed the one signature its element_spec fixes",
        because + "its element_spec leaves dimensions unknown, so nothing was warmed; pass the "
        "signatures: warm_up(model, [...], element_spec=dataset.element_spec)",
    ]
    assert not (tmp_path / "a").exists()


def test_a_generator_dataset_leaves_python_and_numpy_random_state_as_it_found_them():
    """The pipeline draws from random and np.random; after the warm-up both draw what they would have."""
    import tensorflow as tf

    def rows():
        for n in (2, 3, 2):
            random.random()
            np.random.random()
            yield np.zeros((n, 3), np.float32), np.zeros((n, 1), np.float32)

    dataset = tf.data.Dataset.from_generator(
        rows, output_signature=(tf.TensorSpec([None, 3]), tf.TensorSpec([None, 1]))
    )
    model, _ = _counting_model()
    random.seed(7)
    np.random.seed(7)
    expected = (random.random(), np.random.random())
    random.seed(7)
    np.random.seed(7)
    report = warm_up(model, dataset)
    assert (report.batches_read, len(report.signatures)) == (3, 2)
    assert (random.random(), np.random.random()) == expected


def test_predict_alone_warms_an_uncompiled_model_with_nothing_to_build_ahead():
    """No compile(), steps=('predict',): one forward pass, weights back, no note (a predict step creates
    no variables of its own, so nothing is built ahead)."""
    model, calls = _counting_model(compiled=False)
    before = _values(model)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report = warm_up(model, [((2, 3),)], steps=("predict",))
    assert (int(calls.numpy()), report.restored, report.notes) == (1, 2, ())
    assert _guard_warnings(record) == []
    assert all(a.tobytes() == b.tobytes() for a, b in zip(_values(model), before))


def test_a_keras_without_symbolic_build_warms_up_with_its_optimizer_built_and_a_note(monkeypatch):
    """Keras 3 without `Trainer._symbolic_build` (the seam's probe fails), a train warm-up: the optimizer is
    built through its public `build` instead and put back with the weights, and the could-not-build note
    names this Keras and what it lacks, warned at the caller."""
    import keras

    from keras_xla_guard import seam

    model, calls = _counting_model()
    weights = [w.tobytes() for w in model.get_weights()]
    monkeypatch.setattr(model, "_symbolic_build", None, raising=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report = warm_up(model, _xy(2, 4))
    note = (
        f"keras {keras.__version__}: could not build the model ahead (this Keras has no "
        "Trainer._symbolic_build); variables the first step creates cannot be put back"
    )
    assert (report.notes, int(calls.numpy()), model.optimizer.built) == ((note,), 2, True)
    assert _guard_warnings(record) == [f"keras-xla-guard: warm_up: {note}"]
    # The weights, the optimizer's variables and the metrics' state, each put back.
    assert report.restored == len(seam.training_state(model)[0])
    assert [w.tobytes() for w in model.get_weights()] == weights


def test_the_train_function_is_asked_for_with_the_element_spec_it_will_be_fed():
    """train_function_for gets the spec built from the shapes; None falls back to the model's own."""
    import tensorflow as tf

    from keras_xla_guard.warmup import _warm_up

    asked = []
    model, calls = _counting_model()
    report = _warm_up(model, _xy(2, 4), train_function_for=lambda spec: asked.append(spec))
    assert asked == [(tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32))]
    assert (len(report.signatures), int(calls.numpy())) == (2, 2)


def test_bare_inputs_warm_predict_once_per_signature_quietly(capsys):
    """x alone, predict only, compiled model: one pass each, no progress bar, no note, and the optimizer
    left unbuilt (training would need a `y` to build it ahead; predict needs nothing built)."""
    model, calls = _counting_model()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report = warm_up(model, [(2, 3), (4, 3)], steps=("predict",), max_batches=1)
    assert [str(s) for s in report.signatures] == ["x: float32[2,3]", "x: float32[4,3]"]
    assert int(calls.numpy()) == 2
    assert capsys.readouterr().out == ""
    assert (report.notes, _guard_warnings(record)) == ((), [])
    assert model.optimizer.built is False


def test_the_given_element_spec_sets_the_dtypes_fed():
    """element_spec float64: the zeros warmed are float64, as the signatures say."""
    import tensorflow as tf

    model, calls = _counting_model()
    spec = (tf.TensorSpec([None, 3], tf.float64), tf.TensorSpec([None, 1], tf.float64))
    report = warm_up(model, _xy(2), element_spec=spec)
    assert [str(s) for s in report.signatures] == ["x: float64[2,3], y: float64[2,1]"]
    assert int(calls.numpy()) == 1


def test_a_predict_warm_up_leaves_no_keras_warning_of_data_running_out():
    """steps=('predict',): the batches fed are as many as Keras expects, so it does not warn they ran out."""
    model, calls = _counting_model()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warm_up(model, _xy(2, 4), steps=("predict",))
    assert int(calls.numpy()) == 2
    assert [str(w.message) for w in record if "ran out of data" in str(w.message)] == []


def _tf_keras_model(dropout: bool):
    """A compiled tf_keras MLP on 3 features with a compiled metric (tf_keras builds it in the first step)."""
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    layers = [tf_keras.Input((3,)), tf_keras.layers.Dense(4)]
    if dropout:
        layers.append(tf_keras.layers.Dropout(0.5, seed=1, name="dropout"))
    model = tf_keras.Sequential([*layers, tf_keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse", metrics=["mae"], jit_compile=False)
    return model


@pytest.mark.parametrize("dropout", [False, True])
def test_tf_keras_in_process_warm_up_resets_the_metrics_it_built_and_names_legacy_dropout(dropout):
    """tf_keras (imported beside Keras 3): weights back bit for bit, the metric variables the first step
    created reset to zero without a note, every other variable restored, legacy Dropout named as not restored."""
    from keras_xla_guard import seam

    model = _tf_keras_model(dropout)
    weights = [w.tobytes() for w in model.get_weights()]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report = warm_up(model, _xy(2, 4), steps=("train", "test"))
    metric_vars = [v for m in model.metrics for v in m.variables]
    assert seam.keras_version(model).startswith("tf_keras ")
    assert [w.tobytes() for w in model.get_weights()] == weights
    assert len(metric_vars) == 4 and all(float(v.numpy()) == 0.0 for v in metric_vars)
    assert report.restored == len(seam.training_state(model)[0]) - len(metric_vars)
    assert report.unrestored == ()
    note = "not restored: the random state of dropout (legacy stateful RNG ops)"
    assert report.notes == ((note,) if dropout else ())
    assert _guard_warnings(record) == ([f"keras-xla-guard: warm_up: {note}"] if dropout else [])


def test_tf_keras_variables_only_the_train_step_creates_are_named_and_metrics_still_reset():
    """A tf_keras layer adding a (non-trainable) variable in its first training call: one note names
    it, the compiled metrics the same step built are reset, the rest is restored."""
    import tf_keras

    class TrainingOnly(tf_keras.layers.Layer):
        def call(self, x, training=None):
            if training and not hasattr(self, "scale"):
                self.scale = self.add_weight(name="lazy_scale", shape=(), initializer="ones", trainable=False)
            return x * self.scale if hasattr(self, "scale") else x

    tf_keras.utils.set_random_seed(0)
    # Named, so that models built before in the process do not change the variable's name.
    model = tf_keras.Sequential(
        [tf_keras.Input((3,)), TrainingOnly(name="lazy"), tf_keras.layers.Dense(1)], name="warm"
    )
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"], jit_compile=False)
    weights = [w.tobytes() for w in model.layers[1].get_weights()]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report = warm_up(model, _xy(2))
    note = (
        "1 variable(s) were created by the warm-up itself (warm/lazy/lazy_scale:0) "
        "and keep their post-warm-up values"
    )
    assert report.notes == (note,)
    assert _guard_warnings(record) == [f"keras-xla-guard: warm_up: {note}"]
    assert [float(v.numpy()) for m in model.metrics for v in m.variables] == [0.0] * 4
    assert float(model.layers[0].scale.numpy()) == 1.0
    assert [w.tobytes() for w in model.layers[1].get_weights()] == weights


def test_warm_up_warnings_point_outside_the_package():
    """A warm_up note is warned from the first frame outside keras_xla_guard: this test's line of the
    call. Under mutmut, whose trampoline (outside the package) wraps every call, from the trampoline."""
    import os
    import sys

    from keras_xla_guard import warmup
    from keras_xla_guard.errors import XlaGuardWarning

    model = _tf_keras_model(dropout=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        warm_up(model, _xy(2))
    [warning] = [w for w in record if issubclass(w.category, XlaGuardWarning)]
    assert not warning.filename.startswith(str(Path(warmup.__file__).parent))
    if "MUTANT_UNDER_TEST" not in os.environ:
        assert (warning.filename, warning.lineno) == (__file__, line)


def test_sample_weights_get_their_own_root_in_the_signatures():
    """(x, y, sample_weight) shapes: the weighted step runs once per signature, named x, y, sample_weight."""
    model, calls = _counting_model()
    report = warm_up(model, [((2, 3), (2, 1), (2,)), ((4, 3), (4, 1), (4,))])
    assert [str(s) for s in report.signatures] == [
        "x: float32[2,3], y: float32[2,1], sample_weight: float32[2]",
        "x: float32[4,3], y: float32[4,1], sample_weight: float32[4]",
    ]
    assert (int(calls.numpy()), report.notes) == (2, ())


def _fail_on_write_back(variables) -> None:
    """Makes warm_up's write-back of each of `variables` raise, as a lost device would.

    Only the call from `_restore` fails (its frame's name holds `_restore`,
    also under mutmut's renamed copies); the train step's own writes pass.
    """
    import sys

    for variable in variables:

        def assign(value, original=variable.assign):
            if "_restore" in sys._getframe(1).f_code.co_name:
                raise RuntimeError("device lost")
            return original(value)

        variable.assign = assign


def test_variables_that_cannot_be_written_back_are_counted_and_named_in_one_note():
    """Two write-backs fail: one note with the count and both names, both in `unrestored`, the others back
    (the step moved the bias and the optimizer's count; only the bias keeps its new value)."""
    from keras_xla_guard import seam

    model, _ = _counting_model()
    kernel, bias = model.layers[-1].kernel, model.layers[-1].bias
    # On zero inputs and targets only a non-zero output moves a weight: the bias.
    bias.assign(np.ones(1, np.float32))
    _fail_on_write_back([kernel, bias])
    variables = seam.training_state(model)[0]
    before = _values(model)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report = warm_up(model, _xy(2))
    note = (
        f"2 variable(s) could not be put back and keep their post-warm-up values: {kernel.path}, {bias.path}"
    )
    assert (report.unrestored, report.notes) == ((kernel.path, bias.path), (note,))
    assert report.restored == len(variables) - 2 == 4
    assert _guard_warnings(record) == [f"keras-xla-guard: warm_up: {note}"]
    changed = [_name(v) for v, a, b in zip(variables, before, _values(model)) if a.tobytes() != b.tobytes()]
    assert changed == [bias.path]


def test_a_train_function_given_for_the_spec_is_the_one_the_warm_up_calls():
    """train_function_for returning a function: the warm-up calls it, once per signature, not the model's."""
    from keras_xla_guard.warmup import _warm_up

    model, calls = _counting_model()
    used = []

    def train_function(iterator):
        used.append(1)
        return model.train_function(iterator)

    _warm_up(model, _xy(2, 4, 5), train_function_for=lambda spec: train_function)
    assert (len(used), int(calls.numpy())) == (3, 3)


def test_tf_keras_predict_alone_on_an_uncompiled_model_needs_no_optimizer_and_warns_nothing():
    """An uncompiled tf_keras model (no optimizer), predict only: warmed with no note, every variable back."""
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1)])
    weights = [w.tobytes() for w in model.get_weights()]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report = warm_up(model, [((2, 3),)], steps=("predict",))
    # The kernel, the bias and tf_keras' train, test and predict step counters.
    assert (report.notes, report.restored) == ((), 5)
    assert _guard_warnings(record) == []
    assert [w.tobytes() for w in model.get_weights()] == weights


def test_the_test_step_of_an_uncompiled_model_is_refused_naming_the_model():
    """steps=('test',) on an uncompiled Keras 3 or tf_keras model: a ValueError naming the model, not the
    step's failure deep inside Keras; a Keras 3 model compiled with a loss and no optimizer warms its test
    step."""
    import keras
    import tf_keras

    for model in (
        keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)]),
        tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1)]),
    ):
        with pytest.raises(ValueError) as raised:
            warm_up(model, _xy(2), steps=("test",))
        assert str(raised.value) == (
            "`model` must be compiled (with a loss) before warm_up of its test step. "
            f"Received: model={model!r}"
        )
    model, calls = _counting_model(compiled=False)
    model.compile(optimizer=None, loss="mse", jit_compile=False)
    report = warm_up(model, _xy(2), steps=("test",))
    assert (report.steps, report.notes, int(calls.numpy())) == (("test",), (), 1)


def test_tf_keras_six_variables_created_by_the_train_step_are_counted_and_the_first_five_named():
    """A tf_keras layer adding six variables in its first training call: the note counts 6, names the
    first five in sorted order, and the compiled metrics are still reset."""
    import tf_keras

    class TrainingOnly(tf_keras.layers.Layer):
        def call(self, x, training=None):
            if training and not hasattr(self, "scales"):
                self.scales = [
                    self.add_weight(name=f"s{i}", shape=(), initializer="ones", trainable=False)
                    for i in (5, 3, 0, 4, 1, 2)
                ]
            return x

    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential(
        [tf_keras.Input((3,)), TrainingOnly(name="lazy"), tf_keras.layers.Dense(1)], name="six"
    )
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"], jit_compile=False)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        report = warm_up(model, _xy(2))
    names = ", ".join(f"six/lazy/s{i}:0" for i in range(5))
    note = f"6 variable(s) were created by the warm-up itself ({names}) and keep their post-warm-up values"
    assert report.notes == (note,)
    assert _guard_warnings(record) == [f"keras-xla-guard: warm_up: {note}"]
    assert [float(v.numpy()) for m in model.metrics for v in m.variables] == [0.0] * 4


_ON_JAX = """
import json, warnings
import keras
from keras_xla_guard import warm_up

def run(model, signatures, **kwargs):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            report = warm_up(model, signatures, **kwargs)
        except ValueError as e:
            return {"error": str(e)}
    out = {k: v for k, v in report.to_dict().items() if k != "seconds"}
    return {**out, "warnings": [str(w.message) for w in record], "timed": report.seconds > 0}

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
bare = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
# A Keras without Trainer._symbolic_build (the seam's probe fails): a note, warned.
unbuilt = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
unbuilt.compile(optimizer="sgd", loss="mse")
unbuilt._symbolic_build = None
# tf_keras runs on TensorFlow whatever Keras 3's backend: its warm-up is TensorFlow's.
import tf_keras
legacy = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1)])
legacy.compile(optimizer="sgd", loss="mse")
print(json.dumps([
    run(model, [((2, 3), (2, 1)), ((4, 3), (4, 1))], steps=("train", "predict")),
    run(model, [((2, 3), (2, 1))], element_spec=((2, 3),)),
    run(bare, [((2, 3),)], steps=("predict",)),
    run(unbuilt, [((2, 3), (2, 1))]),
    run(legacy, [((2, 3), (2, 1))]),
]))
"""


def test_keras_on_jax_gets_the_jax_warm_up_and_its_report():
    """Keras on JAX (a subprocess, KERAS_BACKEND=jax): warm_up hands the model, signatures, element_spec and
    steps to the JAX warm-up and reports what it did - the signatures and steps the same warm-up reports on
    TensorFlow (run here too), nothing read or restored, its time, no note for an uncompiled model warmed for
    predict alone (nothing to build ahead), the could-not-build note of a Keras without `_symbolic_build`
    in the report and warned. A tf_keras model in that process still gets TensorFlow's warm-up, restoring
    what it does here."""
    import json
    import os
    import subprocess
    import sys

    import keras

    import keras_xla_guard

    # The package this test imported (under mutmut, its mutated copy), and the mutant it runs, if any.
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(Path(keras_xla_guard.__file__).parents[1])}
    proc = subprocess.run(
        [sys.executable, "-c", _ON_JAX], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trained, refused, bare, unbuilt, legacy = json.loads(proc.stdout.splitlines()[-1])
    model, _ = _counting_model()
    on_tf = warm_up(model, _xy(2, 4), steps=("train", "predict"))
    assert trained["signatures"] == [str(s) for s in on_tf.signatures]
    assert trained["steps"] == list(on_tf.steps)
    assert trained == {
        "signatures": ["x: float32[2,3], y: float32[2,1]", "x: float32[4,3], y: float32[4,1]"],
        "steps": ["train", "predict"],
        "batches_read": 0,
        "restored": 0,
        "notes": [],
        "unrestored": [],
        "warnings": [],
        "timed": True,
    }
    assert refused == {
        "error": "`element_spec` is a tf.data notion; under JAX give the signatures' arrays or shapes. "
        "Received: element_spec=((2, 3),)"
    }
    assert bare == {
        "signatures": ["x: float32[2,3]"],
        "steps": ["predict"],
        "batches_read": 0,
        "restored": 0,
        "notes": [],
        "unrestored": [],
        "warnings": [],
        "timed": True,
    }
    note = (
        f"keras {keras.__version__}: could not build the model ahead (this Keras has no "
        "Trainer._symbolic_build)"
    )
    assert unbuilt == {
        "signatures": ["x: float32[2,3], y: float32[2,1]"],
        "steps": ["train"],
        "batches_read": 0,
        "restored": 0,
        "notes": [note],
        "unrestored": [],
        "warnings": [f"keras-xla-guard: warm_up: {note}"],
        "timed": True,
    }
    import tf_keras

    from keras_xla_guard import seam

    here = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1)])
    here.compile(optimizer="sgd", loss="mse")
    seam.build_for_training(here, (np.zeros((2, 3), np.float32), np.zeros((2, 1), np.float32)))
    assert legacy == {
        "signatures": ["x: float32[2,3], y: float32[2,1]"],
        "steps": ["train"],
        "batches_read": 0,
        "restored": len(seam.training_state(here)[0]),
        "notes": [],
        "unrestored": [],
        "warnings": [],
        "timed": True,
    }
