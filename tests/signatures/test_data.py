"""`pad_to_buckets`: a thin tf.data helper, and NumPy padding of any other examples, that bound the batch shapes.

The examples in other forms come from tests/_padding.py, shared with tests/on_jax/test_pad_to_buckets.py,
which runs the same forms on JAX without TensorFlow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import _padding as padding
import keras
import numpy as np
import pytest
import tensorflow as tf
from _helpers import REPO
from _padding import BATCH, BOUNDS, KINDS, PADDED_SHAPES

from keras_xla_guard.signatures.buckets import bucketing_code
from keras_xla_guard.signatures.data import pad_to_buckets

LENGTHS = [5, 7, 9, 11, 13] * 8


def _examples(lengths=LENGTHS, as_dict=False):
    def gen():
        for n in lengths:
            tokens = np.arange(1, n + 1, dtype="int32")
            yield ({"tokens": tokens} if as_dict else tokens), np.float32(n)

    spec = tf.TensorSpec([None], tf.int32)
    return tf.data.Dataset.from_generator(
        gen, output_signature=({"tokens": spec} if as_dict else spec, tf.TensorSpec([], tf.float32))
    )


def _shapes(dataset, key=None):
    return sorted({tuple((x[key] if key else x).shape) for x, _ in dataset})


def test_pads_to_exactly_the_given_lengths():
    """Every batch is full and padded to one of the boundaries."""
    assert _shapes(pad_to_buckets(_examples(), (7, 11, 13), batch_size=8)) == [(8, 7), (8, 11), (8, 13)]


def test_padding_keeps_values_and_pads_with_zeros():
    """Each example keeps its tokens, followed by zeros up to the bucket length."""
    for x, y in pad_to_buckets(_examples(), (7, 13), batch_size=8):
        for row, n in zip(x.numpy(), y.numpy().astype(int)):
            np.testing.assert_array_equal(row[:n], np.arange(1, n + 1))
            assert not row[n:].any()


def test_default_length_comes_from_dict_component():
    """With a dict element the first variable-length component sets the length."""
    batched = pad_to_buckets(_examples(as_dict=True), (9, 13), batch_size=4)
    assert _shapes(batched, key="tokens") == [(4, 9), (4, 13)]


def test_explicit_length_fn_and_short_batches():
    """length_fn is used as given; drop_remainder=False keeps short batches."""
    batched = pad_to_buckets(
        _examples([5, 5, 5]),
        (5,),
        batch_size=2,
        length_fn=lambda x, y: tf.shape(x)[0],
        drop_remainder=False,
    )
    assert [tuple(x.shape) for x, _ in batched] == [(2, 5), (1, 5)]


def test_longer_example_than_largest_boundary_fails_loudly():
    """An example longer than the largest boundary stops iteration with TF's message."""
    with pytest.raises(tf.errors.OpError, match="elements must have length < max"):
        list(pad_to_buckets(_examples([5, 20]), (7,), batch_size=1))


@pytest.mark.parametrize(
    "boundaries, batch_size, match",
    [
        ((), 8, r"boundaries=\(\)"),
        ((7, 5), 8, r"boundaries=\(7, 5\)"),
        ((0, 5), 8, "boundaries=0"),
        ("7", 8, "boundaries='7'"),
        ((7,), 0, "batch_size=0"),
    ],
)
def test_rejects_bad_arguments(boundaries, batch_size, match):
    """Bad boundaries or batch sizes are ValueErrors quoting the value."""
    with pytest.raises(ValueError, match=match):
        pad_to_buckets(_examples(), boundaries, batch_size)


def test_needs_length_fn_without_variable_component():
    """A dataset with no variable first dimension needs an explicit length_fn."""
    fixed = tf.data.Dataset.from_tensor_slices(np.zeros((4, 3), "float32"))
    with pytest.raises(ValueError, match="`length_fn` is required"):
        pad_to_buckets(fixed, (3,), batch_size=2)


# ------------------------------------------- examples not in tf.data (tests/_padding.py)


@pytest.mark.parametrize("kind", KINDS)
def test_every_form_of_examples_is_padded_to_exactly_the_given_lengths(kind):
    """Arrays, a dict, a list, a generator, a PyDataset: a keras.utils.PyDataset of full batches of the bucket shapes."""
    padded = pad_to_buckets(padding.examples(kind), BOUNDS, batch_size=BATCH)
    assert isinstance(padded, keras.utils.PyDataset)
    assert len(padded) == 5  # 16 examples of length <= 7, 24 of 9..13: 2 + 3 full batches of 8
    assert padding.check_padding(padded) == PADDED_SHAPES


def test_examples_keep_their_order_within_a_bucket_and_short_batches_on_request():
    """Batches come as their buckets fill; drop_remainder=False keeps each bucket's short last batch."""
    lengths = [3, 9, 4, 8, 5]
    padded = pad_to_buckets(padding.examples("arrays", lengths), (5, 9), batch_size=2, drop_remainder=False)
    labels = [padded[i][1].tolist() for i in range(len(padded))]
    assert labels == [[3.0, 4.0], [9.0, 8.0], [5.0]]
    assert [padded[i][0].shape for i in range(3)] == [(2, 5), (2, 9), (1, 5)]
    by_fn = pad_to_buckets(
        padding.examples("arrays", lengths), (9,), batch_size=5, length_fn=lambda tokens, label: 9
    )
    assert by_fn[0][0].shape == (5, 9)


def test_every_varying_dimension_is_padded_and_parts_varying_together_with_it():
    """A mask varying with its tokens is padded with them; a dimension other than 0 is found and padded."""
    lengths = [2, 3, 5]
    data = ({"tokens": [padding.tokens(n) for n in lengths], "mask": [np.ones(n, bool) for n in lengths]},)
    (x,) = pad_to_buckets(data, (5,), batch_size=3)[0]
    assert x["tokens"].shape == x["mask"].shape == (3, 5)
    assert x["mask"].sum(axis=1).tolist() == lengths
    frames = [np.ones((2, n), "float32") for n in lengths]  # (channels, time): time varies
    padded = pad_to_buckets(frames, (3, 5), batch_size=1)
    assert [padded[i].shape for i in range(len(padded))] == [(1, 2, 3), (1, 2, 5), (1, 2, 3)]
    assert [int(padded[i].sum()) for i in range(len(padded))] == [4, 10, 6]  # padded with zeros


def test_the_first_two_batches_come_from_two_buckets():
    """Keras on TensorFlow fixes a PyDataset's spec from its first two batches: they must differ in length.

    Sorted examples fill bucket 7 twice before bucket 13 once; fit would then reject every batch of 13
    (pinned by the XLA-dump test below, which fits on such a PyDataset).
    """
    padded = pad_to_buckets(padding.examples("list", sorted(padding.LENGTHS)), BOUNDS, batch_size=BATCH)
    assert [padded[i][0].shape[1] for i in range(len(padded))] == [7, 13, 7, 13, 13]


@pytest.mark.parametrize(
    ("data", "kwargs", "match"),
    [
        (42, {}, "Received: data of type int$"),
        ("tokens", {}, "Received: data of type str$"),
        (None, {}, "Received: data of type NoneType$"),
        ([np.ones(20)], {}, r"An example has length 20, longer than the largest boundary 13 \(1 of 1"),
        (([np.ones(3)] * 2, np.ones(3)), {}, r"hold different numbers of examples: \[2, 3\]"),
        (
            [np.ones(3), (np.ones(3), 1.0)],
            {},
            "Every example must have the structure of the first: example 1",
        ),
        ([np.ones(3)] * 2, {"padding_values": {"x": 0}}, r"Received: padding_values=\{'x': 0\}"),
        ([np.ones(3)] * 2, {"length_fn": lambda x: "3"}, "Received: '3'"),
        ([np.ones(3)] * 2, {"batch_size": 4}, "No bucket fills one batch of batch_size=4 from 2 examples"),
        ([], {}, "holds no examples"),
        ([1.0, 2.0], {}, "`length_fn` is required"),
    ],
)
def test_anything_else_is_a_value_error_naming_the_value(data, kwargs, match):
    """Not examples, or examples it cannot pad: a ValueError naming what was received."""
    kwargs = {"batch_size": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        pad_to_buckets(data, BOUNDS, **kwargs)


def test_the_examples_fix_runs_as_printed_and_does_what_it_says():
    """The fix written for examples (JAX's), run as printed on each form: the bucket shapes; its drop and its error."""
    fix_code = bucketing_code("x", 1, BOUNDS, BATCH, pipeline="examples")
    assert "up to 14 examples an epoch" in fix_code and "longer than 13 raises ValueError" in fix_code
    assert "tf." not in fix_code and "tensorflow" not in fix_code
    for kind in KINDS:
        scope = {"data": padding.examples(kind)}
        exec(fix_code, scope)  # running the printed recommendation is the point
        assert padding.check_padding(scope["data"]) == PADDED_SHAPES
    # 15 examples of bucket 7, 15 of bucket 13: each bucket's short batch of 7 goes.
    scope = {"data": padding.examples("list", [5] * 15 + [10] * 15)}
    exec(fix_code, scope)
    assert 30 - sum(len(batch[1]) for batch in scope["data"]) == 14
    scope = {"data": padding.examples("list", [5] * 8 + [14])}
    with pytest.raises(ValueError, match="longer than the largest boundary 13"):
        exec(fix_code, scope)


_XLA_DUMP_FIT = """
import json, os, sys
sys.path.insert(0, {tests!r})
import keras
import _padding
from keras_xla_guard import pad_to_buckets

def modules():
    return len({{f.split(".")[0] for f in os.listdir({dump!r}) if f.endswith(".before_optimizations.txt")}})

counted = {{}}
for kind in _padding.KINDS:
    padded = pad_to_buckets(_padding.examples(kind), _padding.BOUNDS, batch_size=_padding.BATCH)
    model = _padding.sequence_model(kind)
    before = modules() if os.path.isdir({dump!r}) else 0
    model.fit(padded, epochs=2, verbose=0)
    counted[kind] = modules() - before
print(json.dumps(counted))
"""


@pytest.mark.slow
def test_fit_on_each_form_compiles_one_program_per_bucket_by_xlas_own_dumps(tmp_path):
    """TensorFlow, jit_compile=True, 2 epochs on each padded form: XLA dumps 2 modules (one per bucket) for each."""
    dump = tmp_path / "xla_dump"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "XLA_FLAGS": f"--xla_dump_to={dump}"}
    proc = subprocess.run(
        [sys.executable, "-c", _XLA_DUMP_FIT.format(tests=str(REPO / "tests"), dump=str(dump))],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {kind: len(BOUNDS) for kind in KINDS}
