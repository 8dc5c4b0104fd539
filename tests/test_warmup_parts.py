"""warm_up's parts that run without training: argument checks, the batches and
element_spec it builds from shapes, putting variables and random state back,
and its report. Fast (TensorFlow imported, no step run); the real warm-ups
are in tests/test_warmup.py."""

from __future__ import annotations

import random

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
        ({"max_batches": 0}, "max_batches"),
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
    with pytest.raises(ValueError, match="Received: 3"):
        _leaves((3, "x"))


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
