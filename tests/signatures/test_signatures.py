"""Input signatures: the pure tracker, the engine's guards, and real `fit` runs."""

from __future__ import annotations

import collections
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from _fit_helpers import (
    BATCH,
    HEADLINE,
    LENGTHS,
    ROWS,
    _events,
    _guard,
    _seq_batches,
    _seq_dataset,
    _seq_model,
)

from keras_xla_guard.errors import RecompilationLimitError, XlaGuardWarning
from keras_xla_guard.output.tensorboard_markdown import escape_markdown
from keras_xla_guard.runtime.engine import XlaGuardEngine
from keras_xla_guard.signatures import (
    Signature,
    SignatureTracker,
    bucketing_code,
    closest,
    recommend_buckets,
)

pytestmark = pytest.mark.compat


def _batch(length: int, batch: int = 8) -> tuple[dict[str, np.ndarray], np.ndarray]:
    return {"tokens": np.zeros((batch, length), "int32")}, np.zeros((batch, 1), "float32")


def _sig(length: int, batch: int = 8) -> Signature:
    return Signature.of(_batch(length, batch), root_names=("x", "y"))


def _epoch(tracker: SignatureTracker, epoch: int, sigs: list[Signature]):
    tracker.begin_epoch(epoch)
    for step, sig in enumerate(sigs):
        tracker.observe(sig, step=step)
    return tracker.end_epoch()


# ------------------------------------------------------------------ Signature


def test_signature_paths_shapes_dtypes_of_keras_data():
    """Dict keys, tuple roots and dtypes land in paths/shapes/dtypes, keys sorted."""
    x = {"tokens": np.zeros((8, 5), "int32"), "mask": np.ones((8, 5), "bool")}
    sig = Signature.of((x, np.zeros((8, 1), "float32"), None), root_names=("x", "y", "sample_weight"))
    assert sig.paths == ("x['mask']", "x['tokens']", "y")
    assert sig.shapes == ((8, 5), (8, 5), (8, 1))
    assert sig.dtypes == ("bool", "int32", "float32")
    assert str(sig) == "x['mask']: bool[8,5], x['tokens']: int32[8,5], y: float32[8,1]"


def test_signature_positions_namedtuples_and_bare_arrays():
    """Without root names positions render as [i]; namedtuple fields as keys; a bare array is 'input'."""
    pair = collections.namedtuple("Pair", "a b")
    sig = Signature.of([pair(np.zeros(3), np.zeros((2, 2)))])
    assert sig.paths == ("[0]['a']", "[0]['b']")
    assert Signature.of(np.zeros((4, 2), "float16")).paths == ("input",)
    assert Signature.of(np.zeros(1), root_names=("x",)).paths == ("x",)


def test_signature_equality_and_hash_follow_shapes():
    """Equal shapes give equal, hashable signatures; a different length does not."""
    assert _sig(5) == _sig(5)
    assert len({_sig(5), _sig(5), _sig(7)}) == 2


def test_signature_of_specs_marks_unknown_dims():
    """TensorSpec-like leaves keep None dims, which dynamic_dims/with_dims fill in (never on an unranked leaf)."""
    import tensorflow as tf

    spec = ({"tokens": tf.TensorSpec((None, None), tf.int32)}, tf.TensorSpec((None, 1), tf.float32))
    sig = Signature.of(spec, root_names=("x", "y"))
    assert sig.shapes == ((None, None), (None, 1))
    assert sig.dynamic_dims() == ((0, 0), (0, 1), (1, 0))
    assert sig.with_dims(sig.dynamic_dims(), (8, 5, 8)) == _sig(5)
    assert Signature.of(tf.TensorSpec(None, tf.float32)).shapes == (None,)
    with pytest.raises(ValueError, match=r"values=\(1,\)"):
        sig.with_dims(sig.dynamic_dims(), (1,))
    unranked = Signature.of(tf.TensorSpec(None, tf.float32))
    with pytest.raises(ValueError, match=r"Leaf 0 has no known rank.*dims=\(\(0, 0\),\)"):
        unranked.with_dims([(0, 0)], (3,))


def test_equal_dict_keys_of_different_types_keep_their_own_paths():
    """`{1: a}`, `{1.0: a}` and `{True: a}` render their keys as written, in any order, despite the path cache."""
    leaf = np.zeros(2)
    for _ in range(2):
        for key, path in ((True, "[True]"), (1.0, "[1.0]"), (1, "[1]"), (np.int64(1), f"[{np.int64(1)!r}]")):
            assert Signature.of({"x": {key: leaf}}).paths == (f"['x']{path}",)
    assert Signature.of({("a", 1): leaf}).paths == ("[('a', 1)]",)


def test_path_and_dtype_caches_stay_bounded_and_right():
    """Thousands of distinct structures and fresh dtype objects each get their own paths and names; the caches stay bounded."""
    from keras_xla_guard.signatures import signature as module

    class Dtype:
        def __init__(self, name: str) -> None:
            self.name = name

    class Leaf:
        def __init__(self, dtype: Dtype) -> None:
            self.shape = (2,)
            self.dtype = dtype

    for i in range(1000):
        sig = Signature.of({f"k{i}": Leaf(Dtype(f"d{i}"))}, root_names=["unused"])
        assert (sig.paths, sig.dtypes) == ((f"['k{i}']",), (f"d{i}",))
    assert len(module._RENDERED) <= module._RENDERED_MAX
    assert len(module._DTYPE_NAMES) <= module._DTYPE_NAMES_MAX


def test_containers_and_leaves_off_the_fast_paths_read_as_before():
    """Mappings other than dict, list subclasses, odd shapes and dtypes take the general walk and give the same figures."""
    import types

    class Leaf:
        def __init__(self, shape: object, dtype: object = "float32") -> None:
            self.shape = shape
            self.dtype = dtype

    class Shapeless:
        shape = (3,)

    class Items(list):
        pass

    class Size(tuple):
        pass

    a, b = np.zeros((2, 3), "int32"), np.zeros(4, "float32")
    plain = Signature.of({"b": b, "a": a})
    for mapping in (collections.OrderedDict(b=b, a=a), types.MappingProxyType({"b": b, "a": a})):
        assert Signature.of(mapping) == plain
    assert Signature.of(Items([a, Shapeless(), b])).paths == ("[0]", "[2]")
    sig = Signature.of([Leaf([2, 3]), Leaf(Size((5,))), Leaf((1,), None)])
    assert (sig.shapes, sig.dtypes) == (((2, 3), (5,), (1,)), ("float32", "float32", "None"))
    assert Signature.of((a, b), root_names=("x",)).paths == ("x", "[1]")


def test_a_signature_unpickled_from_another_process_is_found_by_its_equal():
    """A signature pickled where string hashes differ is rehashed on load: it finds its equal in a dict."""
    import pickle
    import subprocess
    import sys

    code = (
        "import pickle, sys, numpy as np\n"
        "from keras_xla_guard.signatures import Signature\n"
        "sig = Signature.of({'tokens': np.zeros((8, 5), 'int32')}, root_names=('x',))\n"
        "sys.stdout.buffer.write(pickle.dumps(sig))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": "1"},
    ).stdout
    loaded = pickle.loads(out)
    here = Signature.of({"tokens": np.zeros((8, 5), "int32")}, root_names=("x",))
    assert loaded == here
    assert pickle.loads(pickle.dumps(here)) == here
    assert {here: "found"}.get(loaded) == "found"


def test_tf_shapes_and_tf1_dimensions_read_as_ints():
    """TensorShapes (listed), TF 1 Dimensions and NumPy integers in a shape all give plain ints or None."""
    import tensorflow as tf

    class Leaf:
        def __init__(self, shape: object) -> None:
            self.shape = shape
            self.dtype = "float32"

    dims = (tf.compat.v1.Dimension(3), tf.compat.v1.Dimension(None), np.int64(4), 5)
    sig = Signature.of([tf.zeros((2, 3)), Leaf(dims), Leaf(tf.TensorShape([None, 7]))])
    assert sig.shapes == ((2, 3), (3, None, 4, 5), (None, 7))
    assert all(type(d) is int for shape in sig.shapes for d in shape if d is not None)
    assert sig.dtypes == ("float32", "float32", "float32")


def test_signature_rejects_string_root_names():
    """A string for root_names is a ValueError quoting it."""
    with pytest.raises(ValueError, match="root_names='xy'"):
        Signature.of(np.zeros(1), root_names="xy")


def test_closest_prefers_fewest_differences_then_most_recent():
    """closest() picks the signature differing in the fewest dims."""
    assert closest(_sig(9), [_sig(5, batch=4), _sig(5), _sig(7)]) == _sig(7)
    assert closest(_sig(9), []) is None


# ----------------------------------------------------------------- tracker


def test_tracker_counts_and_explains_five_lengths():
    """Five lengths: 5 distinct/new/expected, the headline, closest earlier, and a bucketing fix."""
    tracker = SignatureTracker(xla=True)
    stats = _epoch(tracker, 0, [_sig(n) for n in LENGTHS])
    assert (stats.steps, stats.distinct_signatures, stats.new_signatures) == (7, 5, 5)
    assert stats.expected_compilations == 5
    assert stats.short_last_batch is False
    headline = stats.explanations[0]
    assert headline.message == HEADLINE
    assert (headline.kind, headline.severity, headline.input, headline.dim, headline.values) == (
        "dim_varied",
        "warning",
        "x['tokens']",
        1,
        (5, 7, 9, 11, 13),
    )
    assert (
        stats.explanations[1].message == "first signature at step 0: x['tokens']: int32[8,5], y: float32[8,1]"
    )
    assert (stats.explanations[1].kind, stats.explanations[1].step) == ("first_signature", 0)
    assert stats.explanations[2].message == (
        "new signature at step 1: x['tokens']: int32[8,7] vs int32[8,5] (dim 1: 5 -> 7) "
        "(closest earlier signature: x['tokens']: int32[8,5], y: float32[8,1])"
    )
    fix = stats.explanations[-1]
    assert (fix.kind, fix.input, fix.dim) == ("bucketing_fix", "x['tokens']", 1)
    assert fix.message == (
        f"fix: pad input 'tokens' dim 1 to {len(fix.values)} bucket length(s) {fix.values} -> "
        f"at most {len(fix.values)} compilation(s) instead of 5"
    )
    assert fix.fix_code == bucketing_code("x['tokens']", 1, fix.values, 8, root_count=2)
    assert "bucket_by_sequence_length(" in fix.fix_code and "pad_to_bucket_boundary=True" in fix.fix_code
    assert "drop_remainder=True" in fix.fix_code and 'tf.shape(x["tokens"])[0]' in fix.fix_code
    assert fix.to_dict()["values"] == list(fix.values)

    again = _epoch(tracker, 1, [_sig(n) for n in LENGTHS])
    assert (again.distinct_signatures, again.new_signatures, again.expected_compilations) == (5, 0, 0)
    assert again.compilations_so_far == 5
    assert again.explanations[0].message == HEADLINE
    # An epoch that compiled nothing repeats no fix ("instead of 5" is epoch 0's).
    assert [e.kind for e in again.explanations] == ["dim_varied"]


def test_inputs_that_vary_together_are_all_named_by_the_fix():
    """token_ids, segment_ids and padding_mask of one length: the fix names all three, the code pads them together."""
    tracker = SignatureTracker(xla=True)
    batches = [
        Signature.of(
            (
                {name: np.zeros((8, n), "int32") for name in ("token_ids", "segment_ids", "padding_mask")},
                np.zeros((8, 1), "float32"),
            ),
            root_names=("x", "y"),
        )
        for n in LENGTHS
    ]
    fix = _epoch(tracker, 0, batches).explanations[-1]
    assert fix.kind == "bucketing_fix" and fix.input == "x['padding_mask']"
    assert fix.message == (
        "fix: pad input 'padding_mask' dim 1, input 'segment_ids' dim 1 and input 'token_ids' dim 1 (they vary "
        f"together) to {len(fix.values)} bucket length(s) {fix.values} -> at most {len(fix.values)} "
        "compilation(s) instead of 5"
    )
    assert fix.fix_code.splitlines()[0] == (
        f"# Pad x['padding_mask'], x['segment_ids'] and x['token_ids'] dim 1 to {len(fix.values)} bucket length(s) "
        f"{fix.values}; full batches only."
    )
    # Inputs of different lengths: the code would pad one to the other's length, so no fix.
    apart = [
        Signature.of(
            (
                {"tokens": np.zeros((8, n), "int32"), "mask": np.zeros((8, 20 - n), "int32")},
                np.zeros((8, 1), "float32"),
            ),
            root_names=("x", "y"),
        )
        for n in LENGTHS
    ]
    assert "bucketing_fix" not in [e.kind for e in _epoch(SignatureTracker(xla=True), 0, apart).explanations]


def test_tracker_without_xla_expects_no_compilations():
    """With xla=False expected_compilations is None but signatures are still counted."""
    stats = _epoch(SignatureTracker(xla=False), 0, [_sig(5), _sig(7)])
    assert stats.expected_compilations is None
    assert stats.new_signatures == 2


def test_short_last_batch_is_recognised_only_as_last_batch():
    """A smaller dim 0 in the last batch only is a short last batch, not a varying dim."""
    tracker = SignatureTracker(xla=True)
    stats = _epoch(tracker, 0, [_sig(5)] * 4 + [_sig(5, batch=3)])
    assert stats.short_last_batch is True
    short = stats.explanations[0]
    assert short.message.startswith(
        "short last batch: input 'tokens' dim 0 was 3 in the last batch only (other batches: 8)"
    )
    assert (short.kind, short.dim, short.values) == ("short_last_batch", 0, (3, 8))
    assert "drop_remainder=True" in short.message
    assert not any(finding.kind == "dim_varied" for finding in stats.explanations)
    assert _epoch(tracker, 1, [_sig(5)] * 4 + [_sig(5, batch=3)]).short_last_batch is True

    # The same small batch in the middle of an epoch is a varying batch size.
    mid = _epoch(SignatureTracker(xla=True), 0, [_sig(5), _sig(5, batch=3), _sig(5)])
    assert mid.short_last_batch is False
    assert mid.explanations[0].message == "input 'tokens' dim 0 varied across 2 values (3, 8)"


def test_structure_change_is_explained():
    """A changed dtype is reported as a structure change, not as a dim."""
    other = Signature.of(
        ({"tokens": np.zeros((8, 5), "int64")}, np.zeros((8, 1), "float32")), root_names=("x", "y")
    )
    stats = _epoch(SignatureTracker(xla=True), 0, [_sig(5), other])
    assert stats.explanations[0].kind == "structure_changed"
    assert stats.explanations[0].message.startswith("the input structure itself changed: 2 different")
    assert "x['tokens']: dtype int32 -> int64" in stats.explanations[-1].message


def _two_inputs(tokens: int, other: tuple[int, ...], name: str = "mask") -> Signature:
    """`x` = tokens `[8, tokens]` and another input of shape `[8, *other]`."""
    x = {"tokens": np.zeros((8, tokens), "int32"), name: np.zeros((8, *other), "float32")}
    return Signature.of((x, np.zeros((8, 1), "float32")), root_names=("x", "y"))


def test_two_inputs_varying_together_pad_the_first_in_path_order():
    """Tokens and their mask vary together: the fix keys on the first input in path order and names both."""
    stats = _epoch(SignatureTracker(xla=True), 0, [_two_inputs(n, (n,)) for n in LENGTHS])
    varied = [(e.input, e.dim, e.values) for e in stats.explanations if e.kind == "dim_varied"]
    assert varied == [
        ("x['mask']", 1, tuple(sorted(set(LENGTHS)))),
        ("x['tokens']", 1, tuple(sorted(set(LENGTHS)))),
    ]
    fix = stats.explanations[-1]
    bounds = recommend_buckets(LENGTHS)
    assert (fix.kind, fix.input, fix.dim, fix.values) == ("bucketing_fix", "x['mask']", 1, bounds)
    assert fix.message == (
        f"fix: pad input 'mask' dim 1 and input 'tokens' dim 1 (they vary together) to "
        f"{len(bounds)} bucket length(s) {bounds} -> at most {len(bounds)} compilation(s) "
        "instead of 5"
    )


def test_printed_code_pads_inputs_varying_together_to_one_shape():
    """Run as printed on tokens and mask of one length, the fix yields both at the bucket shapes only."""
    import tensorflow as tf

    fix = _epoch(SignatureTracker(xla=True), 0, [_two_inputs(n, (n,)) for n in LENGTHS]).explanations[-1]
    rng = np.random.default_rng(3)
    examples = [
        ({"tokens": rng.integers(1, 50, n).astype("int32"), "mask": np.ones(n, "float32")}, np.float32(n))
        for n in LENGTHS * 8
    ]
    spec = (
        {"tokens": tf.TensorSpec([None], tf.int32), "mask": tf.TensorSpec([None], tf.float32)},
        tf.TensorSpec([], tf.float32),
    )
    scope = {
        "tf": tf,
        "dataset": tf.data.Dataset.from_generator(lambda: iter(examples), output_signature=spec),
    }
    exec(fix.fix_code, scope)  # running the printed recommendation is the point
    shapes = {(tuple(x["tokens"].shape), tuple(x["mask"].shape)) for x, _ in scope["dataset"]}
    assert shapes == {((8, b), (8, b)) for b in fix.values}


@pytest.mark.parametrize(
    ("signatures", "varied"),
    [
        # Two inputs of unrelated lengths: padding both to the tokens' bucket
        # would pad the image to the tokens' length.
        (
            [_two_inputs(n, (w, 3), "image") for n in (5, 7, 9, 11, 13) for w in (10, 11)],
            [("x['image']", 1), ("x['tokens']", 1)],
        ),
        # One input whose two dimensions vary apart (lengths n and n + 1).
        (
            [
                Signature.of(
                    ({"tokens": np.zeros((8, n, n + 1), "int32")}, np.zeros((8, 1), "float32")),
                    root_names=("x", "y"),
                )
                for n in (5, 7, 9, 11, 13)
            ],
            [("x['tokens']", 1), ("x['tokens']", 2)],
        ),
    ],
)
def test_dimensions_varying_apart_get_no_bucketing_code(signatures, varied):
    """Two dimensions varying on their own: each is explained, and no fix pads one to the other."""
    stats = _epoch(SignatureTracker(xla=True), 0, signatures)
    assert [(e.input, e.dim) for e in stats.explanations if e.kind == "dim_varied"] == varied
    assert not [e for e in stats.explanations if e.kind == "bucketing_fix"]
    assert stats.distinct_signatures == len(signatures)


def test_megamorphic_risk_needs_many_compiles_and_few_executions():
    """Risk starts at 8 signatures with fewer than 50 executions per compile."""
    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(0)
    for n in range(1, 8):
        tracker.observe(_sig(n))
    assert not tracker.megamorphic_risk()
    tracker.observe(_sig(8))
    assert tracker.megamorphic_risk()
    tracker.observe(_sig(8), count=400)
    assert not tracker.megamorphic_risk()


# ---------------------------------------------------------- recommendations


def test_recommend_buckets_limits_padding_and_count():
    """Boundaries are observed lengths, the longest last, with padding within the limit."""
    assert recommend_buckets([5, 7, 9, 11, 13]) == (5, 9, 13)
    assert recommend_buckets({10: 100, 11: 1}) == (11,)
    assert recommend_buckets([8, 8, 8]) == (8,)
    assert recommend_buckets(range(1, 200), max_buckets=4)[-1] == 199
    assert len(recommend_buckets(range(1, 200), max_buckets=4)) == 4
    assert recommend_buckets([]) == ()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_buckets": 0}, "max_buckets=0"),
        ({"max_padding": 1.0}, "max_padding=1.0"),
        ({"lengths": [3, -1]}, r"lengths=\[3, -1\]"),
    ],
)
def test_recommend_buckets_rejects_bad_arguments(kwargs, match):
    """Bad arguments are ValueErrors quoting the value."""
    # Not popped: the parameters are shared by every run of the test in a process.
    options = {k: v for k, v in kwargs.items() if k != "lengths"}
    with pytest.raises(ValueError, match=match):
        recommend_buckets(kwargs.get("lengths", [3]), **options)


def test_bucketing_code_is_valid_python_with_tf_boundaries():
    """The printed code compiles and uses exclusive bounds (length + 1)."""
    code = bucketing_code("x['tokens']", 1, (7, 11, 13), 8)
    compile(code, "<recommendation>", "exec")
    assert "bucket_boundaries=[8, 12, 14]" in code
    assert "bucket_batch_sizes=[8, 8, 8, 8]" in code
    assert "pad_to_buckets(dataset, (7, 11, 13), batch_size=8)" in code
    assert "lambda x: tf.shape(x)[1]" in bucketing_code("x", 2, (4,), 2, root_count=1)
    with pytest.raises(ValueError, match="dim=0"):
        bucketing_code("x", 0, (4,), 2)


def test_printed_tf_data_code_runs_and_yields_the_bucket_shapes():
    """The recommendation's tf.data code, executed as printed, yields only the bucket shapes."""
    import tensorflow as tf

    tracker = SignatureTracker(xla=True)
    fix = _epoch(tracker, 0, [_sig(n) for n in LENGTHS]).explanations[-1]
    code = fix.fix_code
    rng = np.random.default_rng(3)
    examples = [({"tokens": rng.integers(1, 50, n).astype("int32")}, np.float32(n)) for n in LENGTHS * 8]
    spec = ({"tokens": tf.TensorSpec([None], tf.int32)}, tf.TensorSpec([], tf.float32))
    scope = {
        "tf": tf,
        "dataset": tf.data.Dataset.from_generator(lambda: iter(examples), output_signature=spec),
    }
    exec(code, scope)  # running the printed recommendation is the point
    shapes = {tuple(x["tokens"].shape) for x, _ in scope["dataset"]}
    assert shapes == {(8, 7), (8, 13)}


# ------------------------------------------------------------ engine guards


def _engine(tmp_path: Path, **kwargs) -> XlaGuardEngine:
    engine = XlaGuardEngine(log_dir=tmp_path, profile_epochs=(), write_summaries=False, verbose=0, **kwargs)
    engine.train_begin(epochs=1, xla_mode="jit_compile")
    engine.epoch_begin(0)
    return engine


def test_engine_observe_inputs_builds_epoch_stats(tmp_path):
    """observe_inputs feeds the tracker; epoch_end stores the epoch's figures."""
    engine = _engine(tmp_path)
    for step, n in enumerate(LENGTHS):
        engine.observe_inputs(_batch(n), step=step)
    engine.epoch_end(0)
    stats = engine.signatures[0]
    assert (stats.distinct_signatures, stats.expected_compilations) == (5, 5)
    assert stats.explanations[0].message == HEADLINE


def test_engine_observe_inputs_never_raises_on_odd_inputs(tmp_path):
    """Inputs without arrays count as an empty signature instead of failing."""
    engine = _engine(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.observe_inputs(object())
    engine.epoch_end(0)
    assert engine.signatures[0].distinct_signatures == 1


def test_engine_guard_warns_once_per_epoch(tmp_path):
    """on_violation='warn': one XlaGuardWarning naming the limit and what varied."""
    engine = _engine(tmp_path, max_compilations=3)
    with pytest.warns(XlaGuardWarning, match="more than max_compilations=3") as record:
        for n in LENGTHS:
            engine.observe_inputs(_batch(n))
    assert sum("max_compilations" in str(w.message) for w in record) == 1
    assert "dim 1 varied across 4 values (5, 7, 9, 11)" in str(record[0].message)
    assert not engine.stop_requested


def test_engine_guard_raise_and_stop(tmp_path):
    """'raise' raises RecompilationLimitError; 'stop' sets stop_requested."""
    engine = _engine(tmp_path / "raise", max_compilations=2, on_violation="raise")
    engine.observe_inputs(_batch(5))
    engine.observe_inputs(_batch(7))
    with pytest.raises(RecompilationLimitError, match="epoch 0 caused 3 XLA compilations"):
        engine.observe_inputs(_batch(9))

    engine = _engine(tmp_path / "stop", max_compilations=2, on_violation="stop")
    with pytest.warns(XlaGuardWarning, match="Stopping training"):
        for n in (5, 7, 9):
            engine.observe_inputs(_batch(n))
    assert engine.stop_requested


def test_engine_guard_is_off_without_xla(tmp_path):
    """Without xla_mode no compilation limit applies and none is expected."""
    engine = XlaGuardEngine(
        log_dir=tmp_path,
        profile_epochs=(),
        write_summaries=False,
        verbose=0,
        max_compilations=1,
        on_violation="raise",
    )
    engine.train_begin(epochs=1)
    engine.epoch_begin(0)
    for n in LENGTHS:
        engine.observe_inputs(_batch(n))
    engine.epoch_end(0)
    assert engine.signatures[0].expected_compilations is None


def test_engine_megamorphic_warning_comes_before_the_threshold(tmp_path):
    """The megamorphic warning fires at 8 compilations and says what TF will do."""
    engine = _engine(tmp_path, max_compilations=None)
    with pytest.warns(XlaGuardWarning, match="megamorphic") as record:
        for n in range(1, 9):
            engine.observe_inputs(_batch(n))
    message = str(record[0].message)
    assert message.startswith("keras-xla-guard: 8 XLA compilations of the train step so far")
    assert "more than 10 compilations" in message
    assert "jit_compile=True TensorFlow never gives up" in message


@pytest.mark.parametrize(
    "kwargs, match",
    [({"max_compilations": 0}, "max_compilations=0"), ({"on_violation": "halt"}, "on_violation='halt'")],
)
def test_engine_rejects_bad_guard_arguments(tmp_path, kwargs, match):
    """Bad guard arguments are ValueErrors quoting the value."""
    with pytest.raises(ValueError, match=match):
        XlaGuardEngine(log_dir=tmp_path, **kwargs)


# ------------------------------------------------------- real model.fit runs


@pytest.fixture(scope="module")
def five_lengths(tmp_path_factory):
    """A jit_compile=True fit over 7 batches with 5 lengths, epoch 0 profiled whole, and a twin without the guard."""
    import keras

    log_dir = tmp_path_factory.mktemp("five_lengths")
    keras.utils.set_random_seed(0)
    model = _seq_model(jit_compile=True)
    guard = _guard(log_dir, profile_epochs=0, skip_steps=0, max_steps=50)
    model.fit(_seq_dataset(LENGTHS), epochs=2, callbacks=[guard], verbose=0)
    keras.utils.set_random_seed(0)
    plain = _seq_model(jit_compile=True)
    plain.fit(_seq_dataset(LENGTHS), epochs=2, verbose=0)
    return guard, model, plain, log_dir


@pytest.mark.slow
def test_trace_compilations_equal_signature_prediction(five_lengths):
    """The profiled epoch's trace counts 5 compilations and the signatures predict 5."""
    guard = five_lengths[0]
    report = guard.reports[0]
    assert report.ok, report.reason
    assert report.compilations == 5
    assert report.expected_compilations == 5
    assert (report.distinct_signatures, report.new_signatures) == (5, 5)
    assert report.signature_explanations[0].message == HEADLINE
    assert "input signatures:          5     (5 new, 5 expected compilation(s))" in str(report)


@pytest.mark.slow
def test_later_epochs_are_tracked_without_profiling(five_lengths):
    """Epoch 1 (not profiled) still has figures: 5 distinct, none new, nothing to compile."""
    guard = five_lengths[0]
    assert 1 not in guard.reports
    stats = guard.signatures[1]
    assert (stats.steps, stats.distinct_signatures, stats.new_signatures) == (7, 5, 0)
    assert stats.expected_compilations == 0
    assert stats.explanations[0].message == HEADLINE


@pytest.mark.slow
def test_tracking_changes_no_weights(five_lengths):
    """Weights after fit are bit-identical with and without the guard's input tap."""
    _, model, plain, _ = five_lengths
    for a, b in zip(model.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_tensorboard_gets_signature_scalars_and_text_every_epoch(five_lengths):
    """distinct/new signature scalars and the explanation text exist for epochs 0 and 1."""
    events = _events(five_lengths[3])
    assert events["xla_guard/distinct_signatures"] == {0: 5.0, 1: 5.0}
    assert events["xla_guard/new_signatures"] == {0: 5.0, 1: 0.0}
    assert events["xla_guard/expected_compilations"] == {0: 5.0, 1: 0.0}
    text = events["xla_guard/signatures"][0]
    assert text.startswith("**Input signatures: 5 distinct, 5 new** over 7 steps")
    assert f"- {escape_markdown(HEADLINE)}" in text
    assert "    dataset = dataset.bucket_by_sequence_length(" in text
    assert set(events["xla_guard/signatures"]) == {0, 1}


def _dense_data():
    rng = np.random.default_rng(1)
    return rng.standard_normal((ROWS, 4)).astype("float32"), rng.standard_normal((ROWS, 1)).astype("float32")


def _fit_kind(kind: str, steps_per_execution: int, log_dir: Path):
    import keras
    import tensorflow as tf

    x, y = _dense_data()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    guard = _guard(log_dir)
    batches = [(x[i : i + BATCH], y[i : i + BATCH]) for i in range(0, ROWS, BATCH)]
    if kind == "numpy":
        model.fit(x, y, batch_size=BATCH, shuffle=False, epochs=2, callbacks=[guard], verbose=0)
    elif kind == "tf.data":
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
        model.fit(data, epochs=2, callbacks=[guard], verbose=0)
    elif kind == "generator":

        def forever():
            while True:
                yield from batches

        model.fit(forever(), steps_per_epoch=len(batches), epochs=2, callbacks=[guard], verbose=0)
    else:

        class Batches(keras.utils.PyDataset):
            def __len__(self):
                return len(batches)

            def __getitem__(self, index):
                return batches[index]

        # fit() shuffles a PyDataset's batch order unless told not to.
        model.fit(Batches(), shuffle=False, epochs=2, callbacks=[guard], verbose=0)
    return guard


@pytest.mark.slow
@pytest.mark.parametrize("steps_per_execution", [1, 2])
@pytest.mark.parametrize("kind", ["tf.data", "numpy", "generator", "PyDataset"])
def test_every_input_kind_records_every_batch(kind, steps_per_execution, tmp_path):
    """tf.data, NumPy, generator and PyDataset: 6 batches per epoch, the short last one recognised."""
    guard = _fit_kind(kind, steps_per_execution, tmp_path)
    first, second = guard.signatures[0], guard.signatures[1]
    assert (first.steps, first.distinct_signatures, first.new_signatures) == (6, 2, 2)
    assert (second.steps, second.distinct_signatures, second.new_signatures) == (6, 2, 0)
    assert first.expected_compilations is None
    assert first.short_last_batch and second.short_last_batch
    assert first.explanations[0].message.startswith(
        "short last batch: input x dim 0 was 4 in the last batch only (other batches: 8)"
    )
    assert {tuple(s.shapes) for s in first.signatures} == {((8, 4), (8, 1)), ((4, 4), (4, 1))}


@pytest.mark.slow
@pytest.mark.parametrize("on_violation", ["warn", "raise", "stop"])
def test_fit_guard_actions(on_violation, tmp_path):
    """More than max_compilations new shapes in an epoch warn, raise, or stop training."""
    import keras

    from keras_xla_guard import RecompilationLimitError as Error

    keras.utils.set_random_seed(0)
    model = _seq_model(jit_compile=True)
    guard = _guard(tmp_path, max_compilations=3, on_violation=on_violation)
    lengths = LENGTHS * 3
    fit = lambda: model.fit(_seq_dataset(lengths), epochs=3, callbacks=[guard], verbose=0)  # noqa: E731 - one fit, run under each branch below
    if on_violation == "raise":
        with pytest.raises(Error, match="epoch 0 caused 4 XLA compilations"):
            fit()
        return
    with pytest.warns(XlaGuardWarning, match="more than max_compilations=3"):
        history = fit()
    if on_violation == "warn":
        assert history.epoch == [0, 1, 2]
    else:
        assert model.stop_training is True
        assert history.epoch == [0]
        assert guard.signatures[0].steps < len(lengths)


@pytest.mark.slow
def test_fit_warns_before_megamorphic_threshold(tmp_path):
    """12 lengths: the megamorphic warning arrives by step 10, before the 11th compilation."""
    import keras

    seen_at: list[int] = []

    class Watch(keras.callbacks.Callback):
        def __init__(self, record):
            super().__init__()
            self.record = record

        def on_train_batch_begin(self, batch, logs=None):
            if not seen_at and any("megamorphic" in str(w.message) for w in self.record):
                seen_at.append(batch)

    keras.utils.set_random_seed(0)
    model = _seq_model(jit_compile=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.fit(
            _seq_dataset(range(3, 15)),
            epochs=1,
            verbose=0,
            callbacks=[_guard(tmp_path, max_compilations=None), Watch(record)],
        )
    assert seen_at and seen_at[0] <= 10
    message = next(str(w.message) for w in record if "megamorphic" in str(w.message))
    assert "8 XLA compilations of the train step so far" in message
    assert "every further new shape is compiled again" in message


@pytest.mark.slow
def test_recommended_bucketing_cuts_measured_compilations(tmp_path):
    """Applying the printed pad_to_buckets recommendation cuts traced compilations to <= buckets."""
    import ast
    import re

    import keras
    import tensorflow as tf

    from keras_xla_guard.signatures.data import pad_to_buckets

    lengths = sorted([5, 7, 9, 11, 13] * BATCH)
    rng = np.random.default_rng(2)
    examples = [(rng.integers(1, 50, n).astype("int32"), np.float32(n)) for n in lengths]
    spec = (tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32))

    def unbatched():
        return tf.data.Dataset.from_generator(lambda: iter(examples), output_signature=spec)

    def fit(dataset, log_dir):
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((None,), dtype="int32"),
                keras.layers.Embedding(50, 8),
                keras.layers.GlobalAveragePooling1D(),
                keras.layers.Dense(1),
            ]
        )
        model.compile("adam", "mse", jit_compile=True)
        guard = _guard(log_dir, profile_epochs=0, skip_steps=0, max_steps=50)
        model.fit(dataset, epochs=1, callbacks=[guard], verbose=0)
        return guard

    before = fit(unbatched().padded_batch(BATCH), tmp_path / "before")
    assert before.reports[0].compilations == 5
    fix = before.signatures[0].explanations[-1]
    match = re.search(r"pad_to_buckets\(dataset, (\([\d, ]+\)), batch_size=(\d+)\)", fix.fix_code)
    assert match, fix
    assert ast.literal_eval(match.group(1)) == fix.values
    boundaries, batch_size = ast.literal_eval(match.group(1)), int(match.group(2))
    assert batch_size == BATCH and len(boundaries) < 5

    after = fit(pad_to_buckets(unbatched(), boundaries, batch_size), tmp_path / "after")
    report = after.reports[0]
    assert report.ok, report.reason
    assert 1 <= report.compilations <= len(boundaries)
    assert report.compilations == report.expected_compilations


_TF_KERAS_SCRIPT = """
import json, sys, warnings
import numpy as np
import tensorflow as tf
from keras_xla_guard import XlaGuardCallback

warnings.simplefilter("error", UserWarning)
rng = np.random.default_rng(0)
batches = [(rng.integers(0, 50, (8, n)).astype("int32"), rng.standard_normal((8, 1)).astype("float32"))
           for n in (5, 7, 5, 9)]
spec = (tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, 1), tf.float32))
data = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)
model = tf.keras.Sequential([tf.keras.layers.Embedding(50, 8), tf.keras.layers.GlobalAveragePooling1D(),
                             tf.keras.layers.Dense(1)])
model.compile("adam", "mse", jit_compile=True)
guard = XlaGuardCallback(log_dir=sys.argv[1], profile_epochs=(), verbose=0)
model.fit(data, epochs=2, callbacks=[guard], verbose=0)
print(json.dumps({"module": type(model).__module__,
                  "epochs": {e: s.to_dict() for e, s in guard.signatures.items()}}))
"""


@pytest.mark.slow
def test_tf_keras_fit_is_tracked_too(tmp_path):
    """With TF_USE_LEGACY_KERAS=1 the tap finds tf_keras' data handler and records each batch."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", _TF_KERAS_SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["module"].startswith("tf_keras")
    first, second = result["epochs"]["0"], result["epochs"]["1"]
    assert (first["steps"], first["distinct_signatures"], first["new_signatures"]) == (4, 3, 3)
    assert first["expected_compilations"] == 3
    assert (second["steps"], second["new_signatures"]) == (4, 0)
    assert first["explanations"][0]["message"] == "input x dim 1 varied across 3 values (5, 7, 9)"
    assert first["explanations"][0]["values"] == [5, 7, 9]


@pytest.mark.slow
def test_track_signatures_switch(tmp_path):
    """track_signatures=False leaves Keras' train function alone; True taps it for the fit only."""
    import keras

    from keras_xla_guard import XlaGuardCallback
    from keras_xla_guard.seam._recording import FunctionTap

    during = []

    class Spy(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            during.append(self.model.train_function)

    data = _seq_dataset(LENGTHS)
    for track in (False, True):
        model = _seq_model(jit_compile=False)
        model.make_train_function()
        keras_function = model.train_function
        guard = XlaGuardCallback(
            log_dir=tmp_path / str(track), profile_epochs=(), verbose=0, track_signatures=track
        )
        during.clear()
        model.fit(data, epochs=1, callbacks=[guard, Spy()], verbose=0)
        assert (guard.signatures != {}) is track
        assert all(isinstance(f, FunctionTap) is track for f in during)
        assert all(f is keras_function for f in during) is not track
        assert model.train_function is keras_function


@pytest.mark.slow
def test_later_fits_reuse_the_tap_without_retracing(tmp_path):
    """A second fit with a new guard reuses the traced recording function and counts only its own batches."""

    from keras_xla_guard.seam import _TAPPED

    model = _seq_model(jit_compile=True)
    data = _seq_dataset(LENGTHS)
    guards = [_guard(tmp_path / str(i)) for i in range(2)]
    model.fit(data, epochs=1, callbacks=[guards[0]], verbose=0)
    ((tap, function),) = _TAPPED[model.train_function].values()
    traces = _tracing_count(function)
    model.fit(data, epochs=1, callbacks=[guards[1]], verbose=0)
    assert _tracing_count(function) == traces >= 1
    assert [(g.signatures[0].steps, g.signatures[0].new_signatures) for g in guards] == [(7, 5), (7, 5)]
    assert tap.distinct == 5


def _tracing_count(function, depth=4):
    """Traces of every tf.function reachable from `function` through closures and wrappers."""
    if depth == 0 or function is None:
        return 0
    if hasattr(function, "experimental_get_tracing_count"):
        return function.experimental_get_tracing_count() + _tracing_count(
            getattr(function, "python_function", None), depth - 1
        )
    inner = [getattr(function, "function", None)]
    inner += [
        c.cell_contents for c in (getattr(function, "__closure__", None) or ()) if callable(c.cell_contents)
    ]
    return sum(_tracing_count(f, depth - 1) for f in inner if f is not function)


@pytest.mark.slow
def test_a_failing_step_puts_keras_train_function_back(tmp_path):
    """An exception inside a tracked step propagates unchanged and leaves Keras' own train function."""
    import tensorflow as tf

    model = _seq_model(jit_compile=False)
    model.make_train_function()
    keras_function = model.train_function
    good = _seq_batches([5, 7])
    bad = ({"tokens": np.full((BATCH, 6), 99, "int32")}, good[0][1])  # index 99 > vocabulary of 50
    spec = ({"tokens": tf.TensorSpec((None, None), tf.int32)}, tf.TensorSpec((None, 1), tf.float32))
    data = tf.data.Dataset.from_generator(lambda: iter([*good, bad]), output_signature=spec)
    with pytest.raises(tf.errors.InvalidArgumentError, match="indices"):
        model.fit(data, epochs=1, callbacks=[_guard(tmp_path)], verbose=0)
    assert model.train_function is keras_function


@pytest.mark.slow
def test_run_eagerly_fit_is_tracked(tmp_path):
    """With run_eagerly=True the proxy records each batch eagerly: 5 lengths, 5 distinct signatures."""
    import keras

    keras.utils.set_random_seed(0)
    model = _seq_model(jit_compile=False)
    model.compile("adam", "mse", run_eagerly=True)
    guard = _guard(tmp_path)
    model.fit(_seq_dataset(LENGTHS), epochs=1, callbacks=[guard], verbose=0)
    stats = guard.signatures[0]
    assert (stats.steps, stats.distinct_signatures) == (7, 5)
    assert stats.explanations[0].message == HEADLINE


@pytest.mark.slow
def test_a_fit_interrupted_outside_a_step_does_not_stack_taps(tmp_path, monkeypatch):
    """A callback error outside a step: the tap is taken out as the error leaves fit (it used to stay
    until the next guarded fit). Where fit is not wrapped (XlaGuardCallback first imported inside the
    call's own arguments, after `model.fit` was looked up), it stays, and the next guarded fit unwraps
    it: every step tracked, Keras' function put back."""
    import keras

    from keras_xla_guard import XlaGuardCallback, _model_hooks  # noqa: F401 - the import wraps fit
    from keras_xla_guard.seam._recording import FunctionTap

    class Boom(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise RuntimeError("user callback failed")

    model = _seq_model(jit_compile=False)
    model.make_train_function()
    keras_function = model.train_function
    with pytest.raises(RuntimeError, match="user callback failed"):
        model.fit(_seq_dataset(LENGTHS), epochs=1, callbacks=[_guard(tmp_path / "a"), Boom()], verbose=0)
    assert model.train_function is keras_function
    monkeypatch.setattr(_model_hooks, "_holders", 0)
    with _model_hooks._lock:
        _model_hooks._sync()
    with pytest.raises(RuntimeError, match="user callback failed"):
        model.fit(_seq_dataset(LENGTHS), epochs=1, callbacks=[_guard(tmp_path / "b"), Boom()], verbose=0)
    monkeypatch.undo()
    with _model_hooks._lock:
        _model_hooks._sync()
    assert isinstance(model.train_function, FunctionTap)
    guard = _guard(tmp_path / "c")
    model.fit(_seq_dataset(LENGTHS), epochs=1, callbacks=[guard], verbose=0)
    assert (guard.signatures[0].steps, guard.signatures[0].distinct_signatures) == (7, 5)
    assert model.train_function is keras_function


@pytest.mark.slow
def test_ring_is_created_before_the_first_step(tmp_path):
    """The tap's variables exist after on_train_begin, so none are created inside a profiled first step."""
    import keras

    from keras_xla_guard.seam import _TAPPED

    built = []

    class AfterGuard(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            installation = self.model.train_function
            built.append(len(_TAPPED.get(installation.original, {})))

    model = _seq_model(jit_compile=False)
    model.fit(_seq_dataset(LENGTHS), epochs=1, callbacks=[_guard(tmp_path), AfterGuard()], verbose=0)
    assert built == [1]


def test_batch_counter_waits_for_the_batch_by_data_dependency():
    """The counter's AssignAddVariableOp is fed from IteratorGetNext, so a failed get_next counts nothing."""
    import tensorflow as tf

    from keras_xla_guard.seam._recording import RecordingIterator as _RecordingIterator
    from keras_xla_guard.seam.tap import InputTap

    dataset = tf.data.Dataset.range(10).map(lambda i: (tf.zeros([i]), i)).batch(3)
    tap = InputTap(dataset.element_spec)

    @tf.function
    def take(iterator):
        return _RecordingIterator(iterator, tap).get_next()

    graph = take.get_concrete_function(iter(dataset)).graph
    (assign,) = [op for op in graph.get_operations() if op.type == "AssignAddVariableOp"]
    upstream, frontier = set(), [t.op for t in assign.inputs]
    while frontier:
        op = frontier.pop()
        if op.name not in upstream:
            upstream.add(op.name)
            frontier.extend(t.op for t in op.inputs)
    assert any(graph.get_operation_by_name(name).type == "IteratorGetNext" for name in upstream)


def test_tap_ops_all_live_in_the_guard_scope():
    """Every op the tap adds, however often it records in one graph, is named under xla_guard_tap/."""
    import tensorflow as tf

    from keras_xla_guard.seam._recording import RecordingIterator as _RecordingIterator
    from keras_xla_guard.seam.tap import InputTap
    from keras_xla_guard.trace.classify import is_guard_op

    dataset = tf.data.Dataset.range(10).map(lambda i: (tf.zeros([i]), i)).batch(3)
    tap = InputTap(dataset.element_spec)

    @tf.function
    def take_two(iterator):
        recording = _RecordingIterator(iterator, tap)
        return recording.get_next(), recording.get_next()

    graph = take_two.get_concrete_function(iter(dataset)).graph
    baseline = tf.function(lambda it: (it.get_next(), it.get_next()))
    base_types = collections.Counter(
        op.type for op in baseline.get_concrete_function(iter(dataset)).graph.get_operations()
    )
    guard = [op for op in graph.get_operations() if is_guard_op(op.name)]
    assert sum(op.type == "ResourceScatterUpdate" for op in guard) == 2
    assert sum(op.type == "AssignAddVariableOp" for op in guard) == 2
    # Outside the scope only what the same function without the tap has.
    others = collections.Counter(op.type for op in graph.get_operations() if not is_guard_op(op.name))
    assert others == base_types


@pytest.mark.slow
def test_tap_time_is_the_guards_not_the_models(five_lengths):
    """The profiled epoch books the tap's ops as guard_op_time_s, never as the model's non-XLA ops."""
    from keras_xla_guard.trace.classify import is_guard_op

    guard = five_lengths[0]
    report = guard.reports[0]
    if guard._inputs.tap.host_recorded:
        # Keras >= 3.16 at steps_per_execution 1 hands the batch to Python,
        # where the tap reads its shapes with no TF op at all.
        assert report.guard_op_time_s == 0
        assert "guard's own ops" not in str(report)
        return
    assert report.guard_op_time_s > 0
    assert not [op for op in report.top_non_xla_ops if is_guard_op(op.op_name)]
    assert "guard's own ops" in str(report)


def test_direct_call_runs_the_traced_graph_without_retracing():
    """Calls after the first with an iterator run its concrete graph; a new iterator finds the trace, no retrace."""
    import tensorflow as tf

    from keras_xla_guard.seam._recording import DirectCall as _DirectCall

    traced = []

    @tf.function(reduce_retracing=True)
    def total(iterator):
        traced.append(1)
        return tf.reduce_sum(iterator.get_next())

    dataset = tf.data.Dataset.range(12).batch(4)
    direct = _DirectCall(total)
    first = iter(dataset)
    assert [int(direct(first)) for _ in range(3)] == [6, 22, 38]
    assert direct._concrete is total.get_concrete_function(first)
    assert int(direct(iter(dataset))) == 6
    assert len(traced) == total.experimental_get_tracing_count() == 1


def test_direct_call_does_not_keep_a_finished_iterator_alive():
    """The iterator a concrete function was picked for is held weakly, so it is freed after its fit."""
    import gc
    import weakref

    import tensorflow as tf

    from keras_xla_guard.seam._recording import DirectCall as _DirectCall

    direct = _DirectCall(tf.function(lambda iterator: iterator.get_next()))
    iterator = iter(tf.data.Dataset.range(10).prefetch(2))
    direct(iterator)
    assert int(direct(iterator)) == 1
    alive = weakref.ref(iterator)
    del iterator
    gc.collect()
    assert alive() is None


def test_direct_call_honours_run_functions_eagerly():
    """With tf.config.run_functions_eagerly(True) every call runs the Python function, as tf.function does."""
    import tensorflow as tf

    from keras_xla_guard.seam._recording import DirectCall as _DirectCall

    runs = []

    @tf.function
    def first(iterator):
        runs.append(1)
        return iterator.get_next()

    direct = _DirectCall(first)
    iterator = iter(tf.data.Dataset.range(5))
    direct(iterator)
    tf.config.run_functions_eagerly(True)
    try:
        values = [int(direct(iterator)) for _ in range(3)]
    finally:
        tf.config.run_functions_eagerly(False)
    assert values == [1, 2, 3]
    assert len(runs) == 4
    assert int(direct(iterator)) == 4 and len(runs) == 4


def test_direct_call_takes_an_iterator_of_another_structure_through_the_tf_function():
    """A new iterator goes through the tf.function (a concrete function would run it with the wrong types)."""
    import tensorflow as tf

    from keras_xla_guard.seam._recording import DirectCall as _DirectCall

    @tf.function
    def first(iterator):
        return tf.nest.map_structure(lambda t: t + 1, iterator.get_next())

    direct = _DirectCall(first)
    assert int(direct(iter(tf.data.Dataset.range(3)))) == 1
    pairs = direct(iter(tf.data.Dataset.from_tensors((tf.constant(1.5), tf.constant([2, 3])))))
    assert float(pairs[0]) == 2.5 and pairs[1].numpy().tolist() == [3, 4]
    assert first.experimental_get_tracing_count() == 2
    assert int(direct(iter(tf.data.Dataset.range(5, 8)))) == 6


def test_epoch_lists_its_new_signatures_with_the_step_each_was_first_seen_at():
    """`EpochSignatures.new`: signatures new to the run, with their first step, first seen first."""
    import numpy as np

    from keras_xla_guard.signatures import Signature, SignatureTracker

    tracker = SignatureTracker(xla=True)
    sig = {n: Signature.of(np.zeros((8, n))) for n in (5, 7, 9)}
    tracker.begin_epoch(0)
    for step, n in enumerate((5, 7, 5)):
        tracker.observe(sig[n], step=step)
    assert tracker.end_epoch().new == ((sig[5], 0), (sig[7], 1))
    tracker.begin_epoch(1)
    for step, n in enumerate((7, 9)):
        tracker.observe(sig[n], step=step)
    stats = tracker.end_epoch()
    assert stats.new == ((sig[9], 1),)
    assert stats.to_dict()["new"] == [{"signature": sig[9].to_dict(), "step": 1}]


def test_a_bare_array_is_named_the_input_in_findings_and_fixes():
    """Batches that are one bare array: 'the input dim 1 ...', never 'input input'."""
    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(0)
    for n in (5, 7, 9, 11, 13):
        tracker.observe(Signature.of(np.zeros((8, n), "float32")))
    messages = [e.message for e in tracker.end_epoch().explanations]
    assert messages[0] == "the input dim 1 varied across 5 values (5, 7, 9, 11, 13)"
    assert (
        messages[-1]
        == "fix: pad the input dim 1 to 3 bucket length(s) (5, 9, 13) -> at most 3 compilation(s) instead of 5"
    )
    assert not any("input input" in m for m in messages)


def test_differences_show_an_unknown_dimension_as_shapes_do():
    """An unknown dimension reads `?` in the change, as in the shape beside it."""
    from keras_xla_guard.signatures.signature import differences

    new = Signature(("x",), ((8, None),), ("float32",))
    old = Signature(("x",), ((8, 5),), ("float32",))
    assert differences(new, old) == ["x: float32[8,?] vs float32[8,5] (dim 1: 5 -> ?)"]
