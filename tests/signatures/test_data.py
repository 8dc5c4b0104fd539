"""`pad_to_buckets`: a thin tf.data helper that bounds the set of batch shapes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

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
