"""SignatureTracker's edges read whole: its error messages, an explanation
joining two inputs' differences, the function its records name, counts of
steps observed in runs, an epoch opened by the first observation, and the
megamorphic bound itself."""

from __future__ import annotations

import numpy as np
import pytest

from keras_xla_guard.signatures import Signature, SignatureTracker
from keras_xla_guard.signatures.signature import input_name

pytestmark = pytest.mark.compat


def _tokens(length: int, batch: int = 8, dtype: str = "int32") -> Signature:
    return Signature.of(
        ({"tokens": np.zeros((batch, length), dtype)}, np.zeros((batch, 1), "float32")), root_names=("x", "y")
    )


def test_an_unknown_function_is_refused_naming_the_choices_and_the_value():
    """function='fit' is a ValueError quoting FUNCTIONS and the value given."""
    with pytest.raises(ValueError) as raised:
        SignatureTracker(function="fit")
    assert (
        str(raised.value)
        == "`function` must be one of ('train', 'test', 'predict'). Received: function='fit'"
    )


def test_explaining_a_signature_never_observed_is_refused_naming_it():
    """explain_signature of an unseen signature: a ValueError printing that signature."""
    with pytest.raises(ValueError) as raised:
        SignatureTracker().explain_signature(_tokens(5))
    assert str(raised.value) == (
        "The tracker never observed this signature. Received: signature=x['tokens']: int32[8,5], y: float32[8,1]"
    )


def test_a_new_signature_differing_in_two_inputs_names_both_joined_by_a_semicolon():
    """Batch and length changed: the x and y differences, in input order, joined by '; '."""
    tracker = SignatureTracker(function="predict")
    first, second = _tokens(5), _tokens(7, batch=4)
    tracker.observe(first)
    tracker.observe(second)
    assert tracker.explain_signature(second, step=2).message == (
        "new signature at step 2: x['tokens']: int32[4,7] vs int32[8,5] (dim 0: 8 -> 4, dim 1: 5 -> 7); "
        "y: float32[4,1] vs float32[8,1] (dim 0: 8 -> 4) "
        "(closest earlier signature: x['tokens']: int32[8,5], y: float32[8,1])"
    )


def test_observing_before_begin_epoch_opens_epoch_0_and_counts_every_step_of_each_call():
    """Two calls of count=3 and one of 2: 8 steps and executions, epoch 0, the record of a predict tracker."""
    tracker = SignatureTracker(function="predict")
    a, b = _tokens(5), _tokens(7)
    assert tracker.observe(a, count=3) is True
    assert tracker.observe(a, count=3) is False
    assert tracker.observe(b, count=2) is True
    record = tracker.end_epoch()
    assert (record.epoch, record.steps, record.function, tracker.executions) == (0, 8, "predict", 8)
    assert (record.distinct_signatures, record.new_signatures, record.signatures) == (2, 2, (a, b))
    tracker.begin_epoch(1)
    tracker.observe(b, count=4)
    record = tracker.end_epoch()
    assert (record.epoch, record.steps, record.new_signatures, tracker.executions) == (1, 4, 0, 12)


def test_megamorphic_risk_needs_fewer_than_50_executions_per_compile():
    """8 signatures: 399 executions are a risk, exactly 400 (50 per compile) are not."""
    tracker = SignatureTracker()
    for length in range(1, 9):
        tracker.observe(_tokens(length), count=49)
    tracker.observe(_tokens(1), count=7)
    assert (tracker.executions, tracker.megamorphic_risk()) == (399, True)
    tracker.observe(_tokens(1))
    assert (tracker.executions, tracker.megamorphic_risk()) == (400, False)


def test_input_name_says_the_input_only_for_the_bare_root():
    """A bare array's path 'input' is 'the input'; a root named x is 'input x'."""
    bare = Signature.of(np.zeros((8, 5), "float32"))
    pair = Signature.of((np.zeros((8, 5), "float32"), np.zeros((8, 1), "float32")), root_names=("x", "y"))
    assert (bare.paths, input_name(bare, 0)) == (("input",), "the input")
    assert (pair.paths, input_name(pair, 0), input_name(pair, 1)) == (("x", "y"), "input x", "input y")
