"""`pad_to_buckets` and the guard's padding fix on Keras with JAX, in a venv without TensorFlow.

Every form of examples is padded to the bucket lengths, and `fit` on the result compiles one train
program per bucket, counted by the test's own `jax.monitoring` listener. The fix the guard prints for a
fit over five sequence lengths is run as printed (`exec`) on the data that fit took.
"""

from __future__ import annotations

import importlib.util

import keras
import pytest
from _jax_helpers import monitoring_oracle
from _padding import (
    BATCH,
    BOUNDS,
    KINDS,
    LENGTHS,
    PADDED_SHAPES,
    batches_of_one_length,
    check_padding,
    examples,
    sequence_model,
)

from keras_xla_guard import XlaGuardCallback, pad_to_buckets


def test_this_venv_has_no_tensorflow():
    """The premise of this file: nothing below can lean on TensorFlow."""
    assert importlib.util.find_spec("tensorflow") is None


def _caused(guard: XlaGuardCallback, epoch: int | None = None) -> int:
    """The train compilations a new batch shape caused (they carry its signature), in `epoch` or all.

    Keras 3.10 on JAX 0.6 also compiles the train step at a fit's second step and each later epoch's
    first with no new shape (the model state placed differently): the guard lists those without one.
    """
    return sum(
        1
        for e, c in guard.compilations.items()
        for r in c.rows
        if r.function == "train" and r.signature is not None and epoch in (None, e)
    )


def _train_compilations(model, data, epochs: int = 2) -> tuple[list[str], XlaGuardCallback]:
    """`fit` under the guard; the train programs JAX compiled in it, by the test's own listener.

    The guard counts each of them: every call checks that first.
    """
    guard = XlaGuardCallback(profile_epochs=(), verbose=0, write_summaries=False)
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        model.fit(data, epochs=epochs, verbose=0, callbacks=[guard])
        compiled = [name for name in oracle.compiles[start:] if "train" in name]
    assert len(compiled) == sum(c.count("train") for c in guard.compilations.values())
    return compiled, guard


@pytest.mark.parametrize("kind", KINDS)
def test_every_form_of_examples_is_padded_to_the_buckets_and_fit_compiles_one_program_each(kind):
    """Arrays, a dict, a list, a generator, a PyDataset: a PyDataset of 2 shapes, and 2 train compilations."""
    padded = pad_to_buckets(examples(kind), BOUNDS, batch_size=BATCH)
    assert isinstance(padded, keras.utils.PyDataset)
    assert len(padded) == 5  # 16 examples of length <= 7, 24 of 9..13: 2 + 3 full batches
    assert check_padding(padded) == PADDED_SHAPES
    compiled, guard = _train_compilations(sequence_model(kind), padded)
    assert set(compiled) == {"jit(train_step)"}
    assert (_caused(guard, 0), _caused(guard, 1)) == (len(BOUNDS), 0)


@pytest.mark.parametrize("data", [42, "tokens", None, 3.5, object()])
def test_anything_else_is_a_value_error_naming_its_type(data):
    """Not examples: one ValueError saying what is accepted and naming the type received."""
    with pytest.raises(ValueError, match=rf"Received: data of type {type(data).__name__}$") as raised:
        pad_to_buckets(data, BOUNDS, batch_size=BATCH)
    assert "keras.utils.PyDataset" in str(raised.value)


def test_the_guards_fix_on_jax_needs_no_tensorflow_and_runs_as_printed():
    """A fit over batches of 5 lengths: 5 train compilations; the printed fix, run as is, makes it 3.

    The fix is a `pad_to_buckets` call on the data fit took (here the user's PyDataset of dynamically
    padded batches, and the same examples as lists): no tf.data, no TensorFlow.
    """
    lengths = sorted(LENGTHS)
    user_data = batches_of_one_length(lengths)
    _, guard = _train_compilations(sequence_model(), user_data, epochs=1)
    assert _caused(guard) == 5
    (fix,) = [e for e in guard.signatures[0].explanations if e.kind == "bucketing_fix"]
    assert fix.values == (5, 9, 13)  # 8 examples of each length: padding within 15% needs 3 buckets
    assert "tf." not in fix.fix_code and "tensorflow" not in fix.fix_code
    assert "from keras_xla_guard import pad_to_buckets" in fix.fix_code.splitlines()
    assert f"data = pad_to_buckets(data, {fix.values}, batch_size={BATCH})" in fix.fix_code.splitlines()
    for data in (user_data, examples("arrays", lengths)):
        scope = {"data": data}
        exec(fix.fix_code, scope)  # the printed fix, run as a user pastes it
        assert check_padding(scope["data"]) == [(BATCH, b) for b in fix.values]
        _, padded_guard = _train_compilations(sequence_model(), scope["data"])
        assert _caused(padded_guard) == len(fix.values)


def test_a_short_last_batch_on_jax_is_dropped_by_slicing_not_by_tf_data():
    """The short-last-batch advice names NumPy slicing with the batch size, not drop_remainder."""
    import numpy as np

    x, y = np.ones((20, 3), "float32"), np.ones((20, 1), "float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    guard = XlaGuardCallback(profile_epochs=(), verbose=0, write_summaries=False)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[guard], shuffle=False)
    (short,) = [e for e in guard.signatures[0].explanations if e.kind == "short_last_batch"]
    assert short.message == (
        "short last batch: input x dim 0 was 4 in the last batch only (other batches: 8); it costs one extra "
        "compilation per run - fit on the first len(x) // 8 * 8 examples (which leaves those 4 examples out "
        "of every epoch) or make the number of examples a multiple of the batch size"
    )
