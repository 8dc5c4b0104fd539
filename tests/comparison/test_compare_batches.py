"""`comparison.batches`: the compared batches taken once from anything `fit` takes.

Real arrays, a real `tf.data.Dataset`, a real `keras.utils.PyDataset` and
generators; a batch's signature is the guard's own `Signature`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _fit_helpers import _seq_dataset

from keras_xla_guard.comparison.batches import Batches, planned_run, take_batches


def test_take_batches_from_arrays_cycles_and_counts_the_short_last_batch():
    """10 samples in batches of 4: 3 per epoch, 2 signatures (4 and 2 rows), cycled to `steps`."""
    x = np.arange(30, dtype="float32").reshape(10, 3)
    taken = take_batches(x, x[:, :1], batch_size=4, steps=5)
    assert [b[0].shape[0] for b in taken.batches] == [4, 4, 2, 4, 4]
    assert (taken.steps_per_epoch, taken.epoch_signatures) == (3, 2)
    assert np.array_equal(taken.batches[3][0], x[:4]) and taken.batches[0][2] is None


def test_take_batches_reads_finite_data_to_its_end_and_stops_on_endless_data():
    """A finite dataset's signatures are all counted past `steps`; an endless generator leaves them unknown."""
    import tensorflow as tf

    finite = take_batches(
        _seq_dataset((5, 7, 9, 11)).apply(tf.data.experimental.assert_cardinality(4)), steps=2
    )
    assert len(finite.batches) == 2 and (finite.steps_per_epoch, finite.epoch_signatures) == (4, 4)

    def endless():
        while True:
            yield np.zeros((2, 3), "float32"), np.zeros((2, 1), "float32")

    taken = take_batches(endless(), steps=3)
    assert len(taken.batches) == 3 and (taken.steps_per_epoch, taken.epoch_signatures) == (None, None)


def test_take_batches_from_a_pydataset():
    """A keras.utils.PyDataset is indexed batch by batch; its length is the epoch."""
    import keras

    class Rows(keras.utils.PyDataset):
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            return np.full((i + 1, 2), i, "float32"), np.zeros((i + 1, 1), "float32")

    taken = take_batches(Rows(), steps=4)
    assert [b[0].shape[0] for b in taken.batches] == [1, 2, 3, 1]
    assert (taken.steps_per_epoch, taken.epoch_signatures) == (3, 3)


def test_bad_data_is_refused():
    """y or batch_size with a generator, empty data and non-data are ValueErrors."""
    with pytest.raises(ValueError, match="only for array inputs"):
        take_batches(iter([]), np.zeros(3))
    with pytest.raises(ValueError, match="Received: data of 0 batches"):
        take_batches(iter([]))
    with pytest.raises(ValueError, match="Received: x=str"):
        take_batches("data.csv")


def test_planned_run_with_unknown_length_counts_the_compared_batches():
    """Data of unknown length: planned steps per epoch default to `steps`, signatures to those seen."""
    batches = [(np.zeros((2, n), "float32"), None, None) for n in (3, 4, 3)]
    assert planned_run(Batches(batches, None, None), 3, 2, None) == (6, 2, "compared batches")
    assert planned_run(Batches(batches, 10, 5), 3, None, 7) == (7, 5, "data")
    assert planned_run(Batches(batches, 10, 5), 3, 3, None) == (30, 5, "data")


def test_signatures_are_counted_as_the_guard_counts_them() -> None:
    """Dict inputs: a new length or a new dtype is a new signature, a key order is not; None weights are skipped."""
    import keras

    from keras_xla_guard.signatures import Signature

    def batch(n: int, dtype: str, reverse: bool = False) -> tuple[Any, Any]:
        x = {"tokens": np.zeros((2, n), dtype), "mask": np.ones((2, n), "float32")}
        if reverse:
            x = dict(reversed(list(x.items())))
        return x, np.zeros((2, 1), "float32")

    class Rows(keras.utils.PyDataset):
        items = [batch(3, "int32"), batch(3, "int32", reverse=True), batch(5, "int32"), batch(3, "int64")]

        def __len__(self) -> int:
            return len(self.items)

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            return self.items[i]

    taken = take_batches(Rows(), steps=2)
    assert (taken.steps_per_epoch, taken.epoch_signatures) == (4, 3)
    assert str(Signature.of(taken.batches[0])) == (
        "[0]['mask']: float32[2,3], [0]['tokens']: int32[2,3], [1]: float32[2,1]"
    )
    assert planned_run(Batches(taken.batches, None, None), 2, None, None) == (2, 1, "compared batches")
