"""What the signature room prints and stores, read back whole: every field of
an epoch's record, every line of the bucketing code for each dataset shape,
the edges of the bucket rule, the signature helpers' exact answers.

These pin outputs users read or paste (explanations, `fix_code`, run-file
dicts), so that a changed word, field name or bound fails a test; `make
mutation` measures how many such changes the fast tests catch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from keras_xla_guard.signatures import (
    Explanation,
    Signature,
    SignatureTracker,
    bucketing_code,
    closest,
    recommend_buckets,
)
from keras_xla_guard.signatures.signature import differences, input_name, only_batch_shrunk

pytestmark = pytest.mark.compat


def _tokens(length: int, batch: int = 8, dtype: str = "int32") -> Signature:
    return Signature.of(
        ({"tokens": np.zeros((batch, length), dtype)}, np.zeros((batch, 1), "float32")), root_names=("x", "y")
    )


def _unknown_batch(sig: Signature) -> Signature:
    """`sig` with dimension 0 of its first input unknown, as read from a spec."""
    first, *rest = sig.shapes
    return dataclasses.replace(sig, shapes=((None, *first[1:]), *rest))


def _epoch(tracker: SignatureTracker, epoch: int, sigs: list[Signature], steps: bool = True):
    tracker.begin_epoch(epoch)
    for step, sig in enumerate(sigs):
        tracker.observe(sig, step=step if steps else None)
    return tracker.end_epoch()


def _sig_dict(length: int, batch: int = 8) -> dict:
    return {
        "paths": ["x['tokens']", "y"],
        "shapes": [[batch, length], [batch, 1]],
        "dtypes": ["int32", "float32"],
    }


def _info(kind: str, message: str, step: int | None = None) -> dict:
    return {
        "kind": kind,
        "message": message,
        "severity": "info",
        "input": None,
        "dim": None,
        "values": [],
        "step": step,
        "fix_code": "",
    }


FIX_CODE = """# Pad x['tokens'] dim 1 to 2 bucket length(s) (7, 13); full batches only.
# Replaces .batch()/.padded_batch() on the unbatched dataset:
dataset = dataset.bucket_by_sequence_length(
    element_length_func=lambda x, y: tf.shape(x["tokens"])[0],
    bucket_boundaries=[8, 14],  # exclusive upper bounds
    bucket_batch_sizes=[8, 8, 8],
    pad_to_bucket_boundary=True,  # pads to boundary - 1
    drop_remainder=True,
)
# Drops each bucket's short last batch: up to 14 examples an epoch
#   (drop_remainder=False keeps them, at one more shape per bucket).
# An element longer than 13 fails the pipeline: make 13 the longest your data has.
# Padding changes an unmasked model's outputs: mask it (Embedding(mask_zero=True), Masking).
# or, with keras-xla-guard:
# from keras_xla_guard import pad_to_buckets
# dataset = pad_to_buckets(dataset, (7, 13), batch_size=8)"""


def test_an_epoch_of_five_lengths_is_recorded_field_by_field():
    """Epoch 3's record of 7 steps over 5 lengths: every count, explanation and signature, as stored."""
    tracker = SignatureTracker(xla=True)
    stats = _epoch(tracker, 3, [_tokens(n) for n in (5, 7, 9, 11, 13, 5, 7)])
    new = lambda n, old, step: _info(  # noqa: E731 - one line per expected explanation
        "new_signature",
        f"new signature at step {step}: x['tokens']: int32[8,{n}] vs int32[8,{old}] "
        f"(dim 1: {old} -> {n}) (closest earlier signature: x['tokens']: int32[8,{old}], y: float32[8,1])",
        step,
    )
    assert stats.to_dict() == {
        "epoch": 3,
        "function": "train",
        "steps": 7,
        "distinct_signatures": 5,
        "new_signatures": 5,
        "expected_compilations": 5,
        "compilations_so_far": 5,
        "short_last_batch": False,
        "explanations": [
            {
                "kind": "dim_varied",
                "message": "input 'tokens' dim 1 varied across 5 values (5, 7, 9, 11, 13)",
                "severity": "warning",
                "input": "x['tokens']",
                "dim": 1,
                "values": [5, 7, 9, 11, 13],
                "step": None,
                "fix_code": "",
            },
            _info(
                "first_signature", "first signature at step 0: x['tokens']: int32[8,5], y: float32[8,1]", 0
            ),
            new(7, 5, 1),
            new(9, 7, 2),
            _info("more_new_signatures", "... and 2 more new signature(s) in this epoch"),
            {
                "kind": "bucketing_fix",
                "message": "fix: pad input 'tokens' dim 1 to 2 bucket length(s) (7, 13) -> at most 2 compilation(s) "
                "instead of 5",
                "severity": "info",
                "input": "x['tokens']",
                "dim": 1,
                "values": [7, 13],
                "step": None,
                "fix_code": FIX_CODE,
            },
        ],
        "signatures": [_sig_dict(n) for n in (5, 7, 9, 11, 13)],
        "new": [{"signature": _sig_dict(n), "step": step} for step, n in enumerate((5, 7, 9, 11, 13))],
    }
    again = _epoch(tracker, 4, [_tokens(5)])
    assert (again.epoch, again.new_signatures, again.expected_compilations, again.compilations_so_far) == (
        4,
        0,
        0,
        5,
    )


def test_three_new_signatures_are_explained_and_the_fourth_only_counted():
    """With exactly 3 new signatures no 'more' line appears; steps unknown leave 'at step' out."""
    stats = _epoch(SignatureTracker(xla=True, max_buckets=1), 0, [_tokens(n) for n in (5, 6, 7)], steps=False)
    kinds = [e.kind for e in stats.explanations]
    assert kinds == ["dim_varied", "first_signature", "new_signature", "new_signature", "bucketing_fix"]
    assert stats.explanations[1].message == "first signature: x['tokens']: int32[8,5], y: float32[8,1]"
    assert stats.explanations[2].message.startswith("new signature: x['tokens']: int32[8,6] vs int32[8,5]")
    assert stats.explanations[2].step is None
    # max_buckets=1 and padding within 15%: one bucket of the longest length.
    assert stats.explanations[-1].values == (7,)


def test_more_than_ten_values_are_listed_ten_then_an_ellipsis():
    """A dimension with 11 values lists the first 10 and '...'; with 10 it lists all."""
    eleven = _epoch(SignatureTracker(xla=True), 0, [_tokens(n) for n in range(1, 12)]).explanations[0]
    assert (
        eleven.message == "input 'tokens' dim 1 varied across 11 values (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...)"
    )
    assert eleven.values == tuple(range(1, 12))
    ten = _epoch(SignatureTracker(xla=True), 0, [_tokens(n) for n in range(1, 11)]).explanations[0]
    assert ten.message == "input 'tokens' dim 1 varied across 10 values (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)"


def test_short_last_batch_is_explained_in_full():
    """The short last batch's explanation: kind, words, severity, input, dim and the two sizes."""
    stats = _epoch(SignatureTracker(xla=True), 0, [_tokens(5)] * 3 + [_tokens(5, batch=3)])
    (short,) = stats.explanations[:1]
    assert short.to_dict() == {
        "kind": "short_last_batch",
        "message": "short last batch: input 'tokens' dim 0 was 3 in the last batch only (other batches: 8); "
        "it costs one extra compilation per run - batch with drop_remainder=True (which leaves those 3 "
        "examples out of every epoch) or make the number of examples a multiple of the batch size",
        "severity": "warning",
        "input": "x['tokens']",
        "dim": 0,
        "values": [3, 8],
        "step": None,
        "fix_code": "",
    }
    # The short batch's own signature is left out of what varied: no dim_varied, no fix.
    assert [e.kind for e in stats.explanations] == ["short_last_batch", "first_signature", "new_signature"]


@pytest.mark.parametrize(
    ("xla", "function", "cost", "severity"),
    [
        (
            True,
            "test",
            "drop_remainder=True would leave those 3 examples out of the metrics, so keep it",
            "warning",
        ),
        (
            True,
            "predict",
            "drop_remainder=True would leave those 3 examples out of the predictions",
            "warning",
        ),
        (False, "train", "without XLA it compiles nothing", "info"),
        (False, "predict", "without XLA it compiles nothing", "info"),
    ],
)
def test_short_last_batch_advises_dropping_examples_only_for_training_with_xla(xla, function, cost, severity):
    """Evaluate/predict keep their last batch (dropping it loses results); without XLA it costs nothing."""
    tracker = SignatureTracker(xla=xla, function=function)
    (short,) = _epoch(tracker, 0, [_tokens(5)] * 3 + [_tokens(5, batch=3)]).explanations[:1]
    assert short.kind == "short_last_batch" and short.severity == severity
    assert short.message.startswith(
        "short last batch: input 'tokens' dim 0 was 3 in the last batch only (other batches: 8); "
    )
    assert cost in short.message
    assert "batch with drop_remainder" not in short.message


@pytest.mark.parametrize(("xla", "function"), [(False, "train"), (True, "test"), (True, "predict")])
def test_no_bucketing_fix_without_xla_or_outside_training(xla, function):
    """Padding pays only where XLA compiles per shape, and the bucketing code drops batches results need."""
    lengths = [5, 6, 7, 8, 13, 14, 15, 16]
    stats = _epoch(SignatureTracker(xla=xla, function=function), 0, [_tokens(n) for n in lengths])
    assert "bucketing_fix" not in [e.kind for e in stats.explanations]
    assert stats.explanations[0].message.startswith("input 'tokens' dim 1 varied across 8 values")
    trained = _epoch(SignatureTracker(xla=True), 0, [_tokens(n) for n in lengths])
    assert trained.explanations[-1].kind == "bucketing_fix"  # the control: the same epoch, training with XLA


def test_short_last_batch_names_the_input_whose_batch_shrank():
    """When an unbatched input comes first, the explanation names the batched input that shrank."""

    def sig(batch: int) -> Signature:
        return Signature.of(
            ({"a_scale": np.zeros((2,), "float32"), "tokens": np.zeros((batch, 5), "int32")},),
            root_names=("x",),
        )

    stats = _epoch(SignatureTracker(xla=True), 0, [sig(8), sig(8), sig(3)])
    assert stats.short_last_batch is True
    assert (stats.explanations[0].input, stats.explanations[0].values) == ("x['tokens']", (3, 8))


def test_a_changed_structure_is_explained_in_full():
    """A dtype change: the structure explanation, its severity, and the difference it names."""
    stats = _epoch(SignatureTracker(xla=True), 0, [_tokens(5), _tokens(5, dtype="int64")])
    assert stats.explanations[0].to_dict() == {
        "kind": "structure_changed",
        "message": "the input structure itself changed: 2 different structures (paths, dtypes or ranks) in this "
        "epoch",
        "severity": "warning",
        "input": None,
        "dim": None,
        "values": [],
        "step": None,
        "fix_code": "",
    }
    assert stats.explanations[-1].message == (
        "new signature at step 1: x['tokens']: dtype int32 -> int64 (closest earlier "
        "signature: x['tokens']: int32[8,5], y: float32[8,1])"
    )


@pytest.mark.parametrize(
    ("paths", "lambda_args", "access"),
    [
        # A bare array: one root.
        (None, "x", "x"),  # the tracker calls it `input`; the element is the lambda's `x`
        # (x, y) with a dict x: two roots.
        (("tokens",), "x, y", 'x["tokens"]'),
    ],
)
def test_fix_code_reads_the_length_from_the_element_as_the_dataset_yields_it(paths, lambda_args, access):
    """The printed lambda takes the dataset's element as it is and reads the varying input in it."""
    if paths is None:
        sigs = [Signature.of(np.zeros((4, n), "float32")) for n in (3, 6, 9, 12, 30)]
    else:
        sigs = [_tokens(n, batch=4) for n in (3, 6, 9, 12, 30)]
    fix = _epoch(SignatureTracker(xla=True), 0, sigs).explanations[-1]
    assert fix.kind == "bucketing_fix"
    assert f"element_length_func=lambda {lambda_args}: tf.shape({access})[0]," in fix.fix_code
    assert "bucket_batch_sizes=[4, 4, 4, 4]," in fix.fix_code


def test_fix_code_of_a_dataset_with_sample_weights_takes_three_roots():
    """(x, y, sample_weight) elements: the lambda takes all three."""

    def sig(n: int) -> Signature:
        return Signature.of(
            (np.zeros((8, n), "int32"), np.zeros((8, 1)), np.zeros((8,))),
            root_names=("x", "y", "sample_weight"),
        )

    fix = _epoch(SignatureTracker(xla=True), 0, [sig(n) for n in (3, 6, 9, 12, 30)]).explanations[-1]
    assert "element_length_func=lambda x, y, sample_weight: tf.shape(x)[0]," in fix.fix_code


def test_fix_batch_size_is_the_most_common_one():
    """The printed batch size is the one most batches had, not the first seen."""
    sigs = [_tokens(5, batch=4)] + [_tokens(n, batch=16) for n in (5, 7, 9, 11, 13, 5, 7, 9)]
    fix = _epoch(SignatureTracker(xla=True), 0, sigs).explanations[-1]
    assert fix.kind == "bucketing_fix" and "batch_size=16)" in fix.fix_code


@pytest.mark.parametrize(
    ("root_count", "path", "head", "access"),
    [
        (1, "x", "lambda x:", "tf.shape(x)[1]"),
        (2, "x['a']", "lambda x, y:", 'tf.shape(x["a"])[1]'),
        (3, "sample_weight", "lambda x, y, sample_weight:", "tf.shape(sample_weight)[1]"),
        (4, "x['a']", "lambda *element:", 'tf.shape(element[0]["a"])[1]'),
        (4, "y", "lambda *element:", "tf.shape(element[1])[1]"),
        (4, "sample_weight", "lambda *element:", "tf.shape(element[2])[1]"),
        (5, "[4]['b']", "lambda *element:", 'tf.shape([4]["b"])[1]'),
    ],
)
def test_bucketing_code_names_the_element_for_every_root_count(root_count, path, head, access):
    """One, two, three or more top-level entries: the lambda's parameters and the input it reads."""
    code = bucketing_code(path, 2, (4, 9), 3, root_count=root_count)
    assert f"    element_length_func={head} {access}," in code.splitlines()


def test_bucketing_code_defaults_to_an_x_y_dataset_and_reads_whole():
    """root_count defaults to 2; every line of the printed code is as documented."""
    assert bucketing_code("x['tokens']", 1, (13, 7, 7), 8) == FIX_CODE
    assert bucketing_code("x['tokens']", 1, (7, 13), 8) == bucketing_code(
        "x['tokens']", 1, (7, 13), 8, root_count=2
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"boundaries": ()}, "`boundaries` must not be empty. Received: boundaries=()"),
        ({"batch_size": 0}, "`batch_size` must be >= 1. Received: batch_size=0"),
    ],
)
def test_bucketing_code_refuses_bad_arguments_naming_them(kwargs, message):
    """Empty boundaries and a batch size below 1 are ValueErrors with the value; 1 is a batch size."""
    args = {"path": "x", "dim": 1, "boundaries": (4,), "batch_size": 1, **kwargs}
    with pytest.raises(ValueError) as raised:
        bucketing_code(**args)
    assert str(raised.value) == message
    assert "bucket_batch_sizes=[1, 1]," in bucketing_code("x", 1, (4,), 1)


def test_recommend_buckets_at_its_edges():
    """Zero lengths, zero padding, one bucket, repeated lengths and a share exactly at the limit."""
    assert recommend_buckets([0, 0]) == (0,)
    assert recommend_buckets([5, 7], max_padding=0.0) == (5, 7)
    assert recommend_buckets([5, 7, 9], max_buckets=1) == (9,)
    # 1 and 3 once: one bucket pads 4 real to 6, a share of exactly 1/3.
    assert recommend_buckets([1, 3], max_padding=1 / 3) == (3,)
    assert recommend_buckets([1, 3], max_padding=0.33) == (1, 3)
    # Repeats weigh: 1 three times and 3 once pads 6 real to 12 in one bucket.
    assert recommend_buckets([1, 1, 1, 3], max_padding=0.4) == (1, 3)
    assert recommend_buckets({1: 3, 3: 1}, max_padding=0.4) == (1, 3)
    assert recommend_buckets({1: 1, 3: 1}, max_padding=0.4) == (3,)


def test_only_batch_shrunk_compares_every_batched_input():
    """A shorter dim 0 everywhere it differs and nothing else: True; any other change: False."""

    def sig(*shapes: tuple[int, ...]) -> Signature:
        return Signature.of(
            tuple(np.zeros(s, "float32") for s in shapes), root_names=("x", "y", "sample_weight")
        )

    assert only_batch_shrunk(sig((3, 5), (3, 1)), sig((8, 5), (8, 1))) is True
    assert only_batch_shrunk(sig((8, 5), (8, 1)), sig((8, 5), (8, 1))) is False  # nothing shrank
    assert only_batch_shrunk(sig((9, 5), (9, 1)), sig((8, 5), (8, 1))) is False  # grew
    assert only_batch_shrunk(sig((3, 6), (3, 1)), sig((8, 5), (8, 1))) is False  # another dim changed
    assert only_batch_shrunk(sig((3, 5), (8, 1)), sig((8, 5), (8, 1))) is True  # one input shrank
    assert only_batch_shrunk(sig((3, 5), (8, 2)), sig((8, 5), (8, 1))) is False  # the other changed
    assert only_batch_shrunk(sig((), (3, 1)), sig((), (8, 1))) is True  # a scalar input is skipped
    assert only_batch_shrunk(sig((3, 5)), sig((8, 5), (8, 1))) is False  # another structure
    unknown = _unknown_batch(Signature.of((np.zeros((3, 5)),)))
    assert only_batch_shrunk(unknown, Signature.of((np.zeros((8, 5)),))) is False
    assert only_batch_shrunk(Signature.of((np.zeros((3, 5)),)), unknown) is False


def test_signature_helpers_answer_exactly():
    """to_dict, str, input names, differences and the closest earlier signature, exactly."""
    spec = _unknown_batch(_tokens(5))
    assert spec.to_dict() == {
        "paths": ["x['tokens']", "y"],
        "shapes": [[None, 5], [8, 1]],
        "dtypes": ["int32", "float32"],
    }
    assert str(spec) == "x['tokens']: int32[?,5], y: float32[8,1]"
    assert str(Signature.of(())) == "(no arrays)"
    nested = Signature.of(({"a": {"b": np.zeros((2, 3))}},), root_names=("x",))
    assert (nested.paths, input_name(nested, 0)) == (("x['a']['b']",), "input 'b'")
    assert differences(_tokens(7, batch=4), _tokens(5)) == [
        "x['tokens']: int32[4,7] vs int32[8,5] (dim 0: 8 -> 4, dim 1: 5 -> 7)",
        "y: float32[4,1] vs float32[8,1] (dim 0: 8 -> 4)",
    ]
    assert differences(spec, _tokens(5)) == ["x['tokens']: int32[?,5] vs int32[8,5] (dim 0: 8 -> ?)"]
    assert differences(_tokens(5), _tokens(5)) == []
    # Closest: fewest differing dims, another structure farthest, the latest on a tie.
    earlier = [_tokens(5, dtype="int64"), _tokens(9), _tokens(6, batch=4), _tokens(7)]
    assert closest(_tokens(8), earlier) == _tokens(7)
    assert closest(_tokens(8), earlier[:3]) == _tokens(9)
    assert closest(_tokens(8), earlier[:1]) == earlier[0]
    assert closest(_tokens(8), []) is None


def test_explanation_from_dict_takes_missing_values_as_none_given():
    """A stored explanation without `values` reads back with an empty tuple."""
    stored = {
        "kind": "first_signature",
        "message": "m",
        "severity": "info",
        "input": None,
        "dim": None,
        "step": 0,
        "fix_code": "",
    }
    assert Explanation.from_dict(stored).values == ()
    assert Explanation.from_dict({**stored, "values": [3, 8]}).values == (3, 8)


def test_printed_code_for_a_dataset_of_bare_arrays_runs():
    """Run as printed on a dataset of bare variable-length arrays, the fix yields the bucket shapes."""
    import tensorflow as tf

    lengths = (3, 6, 9, 12, 30)
    fix = _epoch(
        SignatureTracker(xla=True), 0, [Signature.of(np.zeros((4, n), "float32")) for n in lengths]
    ).explanations[-1]
    examples = [np.ones(n, "float32") for n in lengths * 4]
    scope = {
        "tf": tf,
        "dataset": tf.data.Dataset.from_generator(
            lambda: iter(examples), output_signature=tf.TensorSpec([None], tf.float32)
        ),
    }
    exec(fix.fix_code, scope)  # running the printed recommendation is the point
    assert {tuple(batch.shape) for batch in scope["dataset"]} == {(4, b) for b in fix.values}


def test_what_the_printed_code_says_it_drops_and_refuses_is_what_it_does():
    """Run as printed: each bucket's short last batch is dropped (within the bound it names); longer fails."""
    import tensorflow as tf

    fix_code = bucketing_code("x", 1, (7, 13), 8, root_count=1)
    assert "up to 14 examples an epoch" in fix_code and "longer than 13 fails" in fix_code

    def run(lengths: list[int]) -> list[Any]:
        scope = {
            "tf": tf,
            "dataset": tf.data.Dataset.from_generator(
                lambda: (np.ones(n, "float32") for n in lengths),
                output_signature=tf.TensorSpec([None], tf.float32),
            ),
        }
        exec(fix_code, scope)  # running the printed recommendation is the point
        return list(scope["dataset"])

    # 8 + 7 examples of bucket 7, 8 + 7 of bucket 13: the two short batches of 7 go.
    batches = run([5] * 15 + [10] * 15)
    assert sorted(tuple(b.shape) for b in batches) == [(8, 7), (8, 13)]
    assert 30 - sum(b.shape[0] for b in batches) == 14
    with pytest.raises(tf.errors.OpError):
        run([5] * 8 + [14])


@pytest.mark.slow
def test_padding_changes_an_unmasked_models_output_and_the_mask_the_code_names_keeps_it():
    """The printed caveat: zero-padding 7 -> 13 moves an unmasked pooled model's output; mask_zero=True does not."""
    import keras

    tokens = np.array([[3, 5, 7, 9, 11, 13, 15]], "int32")
    padded = np.pad(tokens, ((0, 0), (0, 6)))
    outputs = {}
    for mask in (False, True):
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((None,), dtype="int32"),
                keras.layers.Embedding(20, 4, mask_zero=mask),
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(1),
            ]
        )
        outputs[mask] = [float(model.predict(x, verbose=0)[0, 0]) for x in (tokens, padded)]
    unpadded, with_padding = outputs[False]
    assert abs(unpadded - with_padding) > 1e-3
    assert outputs[True][0] == pytest.approx(outputs[True][1], abs=1e-6)


def test_tracker_defaults_and_its_argument_checks():
    """XLA off by default (no expected compilations); bad max_buckets or max_padding refused at once."""
    tracker = SignatureTracker()
    assert (tracker.xla, tracker.executions) == (False, 0)
    tracker.begin_epoch(0)
    tracker.observe(_tokens(5), count=3)
    assert tracker.executions == 3
    assert tracker.end_epoch().expected_compilations is None
    with pytest.raises(ValueError, match="max_buckets=0"):
        SignatureTracker(xla=True, max_buckets=0)
    with pytest.raises(ValueError, match="max_padding=1.0"):
        SignatureTracker(xla=True, max_padding=1.0)


def test_an_epoch_ended_without_a_beginning_is_epoch_0():
    """end_epoch before any begin_epoch gives an empty epoch numbered 0."""
    stats = SignatureTracker(xla=True).end_epoch()
    assert (stats.epoch, stats.steps, stats.distinct_signatures, stats.explanations) == (0, 0, 0, ())


def test_four_new_signatures_leave_one_to_the_more_line():
    """The fourth new signature of an epoch is counted in '... and 1 more', not explained."""
    stats = _epoch(SignatureTracker(xla=True), 0, [_tokens(n) for n in (5, 6, 7, 8)])
    assert stats.explanations[-2].message == "... and 1 more new signature(s) in this epoch"


def test_the_trackers_bucket_limits_shape_the_fix():
    """max_buckets caps the fix's buckets; with no padding allowed there is no fix at all."""
    lengths = (5, 7, 9, 11, 13)
    one = _epoch(SignatureTracker(xla=True, max_buckets=1), 0, [_tokens(n) for n in lengths]).explanations[-1]
    assert (
        one.message == "fix: pad input 'tokens' dim 1 to 1 bucket length(s) (13) -> at most 1 compilation(s) "
        "instead of 5"
    )
    # As many buckets as lengths once no padding is allowed: nothing to gain, no fix.
    exact = _epoch(
        SignatureTracker(xla=True, max_buckets=5, max_padding=0.0), 0, [_tokens(n) for n in lengths]
    )
    assert [e.kind for e in exact.explanations if e.kind == "bucketing_fix"] == []
    padded = _epoch(SignatureTracker(xla=True, max_buckets=5), 0, [_tokens(n) for n in lengths]).explanations[
        -1
    ]
    assert (padded.kind, padded.values) == ("bucketing_fix", (5, 9, 13))


def test_fix_without_a_known_batch_size_prints_batches_of_32():
    """When no batch size is known (dimension 0 unknown everywhere) the code batches by 32."""
    sigs = [_unknown_batch(_tokens(n)) for n in (5, 7, 9, 11, 13)]
    sigs = [dataclasses.replace(s, shapes=(s.shapes[0], (None, 1))) for s in sigs]
    fix = _epoch(SignatureTracker(xla=True), 0, sigs).explanations[-1]
    assert fix.kind == "bucketing_fix" and "bucket_batch_sizes=[32, 32, 32, 32]," in fix.fix_code
