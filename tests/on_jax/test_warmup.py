"""warm_up on Keras' JAX backend: programs compiled before fit, the model's state untouched."""

from __future__ import annotations

import numpy as np
import pytest
from _identity import seeded_fit
from _jax_helpers import BATCH, EPOCHS, TRAIN_SHAPES, fit_on_jax, make_model

from keras_xla_guard import warm_up

pytestmark = pytest.mark.slow
SIGNATURES = [((b, f), (b, 1)) for b, f in TRAIN_SHAPES]


def _state(model):
    variables = [*model.variables, *model.optimizer.variables, *model.metrics_variables]
    return [np.array(v.value, copy=True) for v in variables]


def test_warm_up_leaves_every_variable_bit_identical():
    """Weights, optimizer slots and counter, metrics: the same bits before and after warming train and test."""
    model = make_model()
    model.optimizer.build(model.trainable_variables)
    before = _state(model)
    report = warm_up(model, SIGNATURES, steps=("train", "test", "predict"))
    after = _state(model)
    assert len(before) == len(after)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    assert [str(s) for s in report.signatures] == [
        f"x: float32[{b},{f}], y: float32[{b},1]" for b, f in TRAIN_SHAPES
    ]
    assert (report.steps, report.batches_read, report.restored, report.notes) == (
        ("train", "test", "predict"),
        0,
        0,
        (),
    )


def test_a_warmed_fit_compiles_no_program_for_the_warmed_signatures(tmp_path, unguarded):
    """warm_up=<signatures> in the callback: no train compilation a new signature causes; weights as without it."""
    run = fit_on_jax(tmp_path, warm_up=SIGNATURES, profile_epochs=())
    assert [str(s) for s in run.guard.warm_up_report.signatures] == [
        f"x: float32[{b},{f}], y: float32[{b},1]" for b, f in TRAIN_SHAPES
    ]
    train = [r for c in run.guard.compilations.values() for r in c.rows if r.function == "train"]
    assert [r for r in train if r.signature is not None] == []
    # The warmed signatures are no new ones in fit (their programs are compiled): warm_up's own rows.
    assert run.guard.signatures[0].new_signatures == 0
    warmed = [r for c in run.guard.compilations.values() for r in c.rows if r.function == "warm_up"]
    assert len(warmed) >= 2 and {(r.epoch, r.step, r.program) for r in warmed} == {(None, None, "train_step")}
    # With fit's own, the listener's count: Keras 3.10 on JAX 0.6 compiles each warmed shape twice.
    assert len(train) + len(warmed) == run.oracle_compiles.count("jit(train_step)")
    for a, b in zip(run.weights, unguarded.weights):
        np.testing.assert_array_equal(a, b)
    assert len(run.history["loss"]) == EPOCHS


def test_warm_up_under_jax_refuses_a_dataset_and_element_spec():
    """A non-list input or an element_spec is a ValueError naming the value and the form to pass."""
    model = make_model()
    with pytest.raises(ValueError, match=r"non-empty list of signatures.*Received: shapes_or_dataset='x'"):
        warm_up(model, "x")
    with pytest.raises(ValueError, match="element_spec"):
        warm_up(model, SIGNATURES, element_spec=((BATCH, 16),))


def test_warm_up_notes_under_jax_are_warned_as_under_tensorflow(monkeypatch):
    """A Keras without `Trainer._get_jax_state` (the seam's probe fails): the step is not warmed, and the
    note naming what is missing is in the report and warned; one without `Trainer._symbolic_build`: the
    train step warmed, its optimizer built by its public `build`, a note naming this Keras; a predict-only
    warm-up of an uncompiled model has nothing to build ahead and notes nothing."""
    import warnings

    import keras

    from keras_xla_guard.errors import XlaGuardWarning

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert warm_up(model, [((2, 3),)], steps=("predict",)).notes == ()
        monkeypatch.setattr(model, "_get_jax_state", None, raising=False)
        report = warm_up(model, [((2, 3),)], steps=("predict",))
    assert report.notes == ("predict not warmed: this Keras has no Trainer._get_jax_state",)
    compiled = make_model()
    monkeypatch.setattr(compiled, "_symbolic_build", None, raising=False)
    with warnings.catch_warnings(record=True) as more:
        warnings.simplefilter("always")
        trained = warm_up(compiled, SIGNATURES[:1])
    note = f"keras {keras.__version__}: could not build the model ahead (this Keras has no Trainer._symbolic_build)"
    assert (trained.notes, compiled.optimizer.built) == ((note,), True)
    warned = [str(w.message) for w in [*record, *more] if issubclass(w.category, XlaGuardWarning)]
    assert warned == [
        "keras-xla-guard: warm_up: predict not warmed: this Keras has no Trainer._get_jax_state",
        f"keras-xla-guard: warm_up: {note}",
    ]


@pytest.mark.parametrize("data", ["arrays", "py_dataset"])
def test_a_fit_after_warm_up_is_bit_identical_to_one_without(data):
    """warm_up before fit on JAX: every weight, optimizer slot, metric, loss and random state as without it.

    Keras' fit builds the compiled loss and metrics from its first batch, and making the epoch
    iterator to take it draws a shuffle (`np.random.permutation` for arrays; the PyDataset draws
    Python's and NumPy's generators): once warm_up had built them, fit skipped that draw and every
    epoch's batch order changed (14 of the 19 arrays differed here before the fix, on both inputs).
    """
    without, history, states = seeded_fit(False, data)
    warmed, warmed_history, warmed_states = seeded_fit(True, data)
    assert len(warmed) == len(without) == 19
    for a, b in zip(warmed, without):
        np.testing.assert_array_equal(a, b)
    assert warmed_history == history
    assert warmed_states == states


def test_the_build_draw_is_kept_once_and_not_when_keras_draws_itself():
    """The one-shot stand-in over `_symbolic_build` takes its batch once, then leaves the model as Keras'."""
    from _jax_helpers import make_data

    model = make_model()
    warm_up(model, SIGNATURES)
    assert "_symbolic_build" in vars(model)
    x, y = make_data()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    assert "_symbolic_build" not in vars(model)
    # A model built already before warm_up: fit would not have drawn, nothing is installed.
    warm_up(model, SIGNATURES)
    assert "_symbolic_build" not in vars(model)
