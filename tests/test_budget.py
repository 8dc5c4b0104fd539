"""`max_compilations`, the recompilation budget for a block of code, on real fits.

The sequence model of `_fit_helpers.py` trains on 7 batches of lengths 5, 7, 9, 5, 11, 7, 13
(jit_compile=True): 5 distinct input signatures, 5 XLA compilations of the train function, at
steps 0, 1, 2, 4 and 6, by construction. No callback is passed to `fit`; no profiler runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from _fit_helpers import LENGTHS, _seq_batches, _seq_dataset, _seq_model

import keras_xla_guard
from keras_xla_guard import CompilationsUnknownError, RecompilationLimitError, XlaGuard, max_compilations

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

pytestmark = [pytest.mark.slow, pytest.mark.compat]

# Steps of the epoch where LENGTHS brings a new length: 5, 7, 9, 11, 13.
NEW_AT = [0, 1, 2, 4, 6]
REPO = Path(__file__).resolve().parents[1]


def _keras_untouched() -> bool:
    """Whether no budget is left wrapping keras.Model.

    The `*_on_batch` methods are Keras' own; so are fit/evaluate/predict,
    unless a guard still alive in this process (a session fixture's) holds
    them, which only tells it when each call ends.
    """
    import keras

    from keras_xla_guard import _model_hooks

    entry = [name in vars(keras.Model) for name in _model_hooks._ENTRY_POINTS]
    return (
        _model_hooks._users == 0
        and not any(name in vars(keras.Model) for name in _model_hooks._UNOBSERVED)
        and (all(entry) if _model_hooks._holders else not any(entry) and _model_hooks.wrapped_classes() == ())
    )


def _fit(model: Any, epochs: int = 1, **kwargs: Any) -> Any:
    return model.fit(_seq_dataset(LENGTHS), epochs=epochs, verbose=0, **kwargs)


def test_a_fit_within_budget_passes_and_counts_each_compilation(tmp_path, monkeypatch):
    """max_compilations(5) around a 2-epoch fit: passes, 5 compilations at the known steps, no file written."""
    monkeypatch.chdir(tmp_path)
    model = _seq_model(True)
    with max_compilations(5) as budget:
        _fit(model, epochs=2)
    assert budget.count == 5 and not budget.exceeded and budget.unknown is None
    assert [(c.function, c.epoch, c.step) for c in budget.compilations] == [("train", 0, s) for s in NEW_AT]
    assert [c.signature.shapes[0] for c in budget.compilations] == [(8, n) for n in (5, 7, 9, 11, 13)]
    assert _keras_untouched()
    assert list(tmp_path.iterdir()) == []


def test_a_fit_over_budget_raises_on_exit_listing_every_compilation_and_the_fix():
    """max_compilations(4): RecompilationLimitError after fit, naming each of the 5 with its change and fix."""
    model = _seq_model(True)
    with pytest.raises(RecompilationLimitError) as raised:
        with max_compilations(4):
            history = _fit(model, epochs=2)
    assert len(history.history["loss"]) == 2  # the whole fit ran first
    message = str(raised.value)
    assert message.startswith(
        "keras-xla-guard: 5 XLA compilation(s) inside max_compilations(4), 1 more than it allows."
    )
    for number, (step, length) in enumerate(zip(NEW_AT, (5, 7, 9, 11, 13)), 1):
        assert (
            f"  {number}. train function, epoch 0, step {step}: x['tokens']: int32[8,{length}], "
            "y: float32[8,1]"
        ) in message
    assert "x['tokens']: int32[8,13] vs int32[8,11] (dim 1: 11 -> 13)" in message
    assert message.count("why: input 'tokens' dim 1 varied across 5 values (5, 7, 9, 11, 13)") == 4
    assert message.count("fix: pad input 'tokens' dim 1 to 2 bucket length(s) (7, 13)") == 4
    assert message.count("dataset = dataset.bucket_by_sequence_length(") == 1
    assert _keras_untouched()


def test_without_xla_a_fit_compiles_nothing_and_fits_a_budget_of_zero():
    """jit_compile=False: no function is compiled with XLA, so 0 compilations (a true 0: XLA is off)."""
    with max_compilations(0) as budget:
        _fit(_seq_model(False))
    assert budget.count == 0


def test_fail_fast_stops_fit_at_the_step_after_the_compilation_over_the_limit():
    """fail_fast with limit 2: fit stops when the third signature is seen, before the epoch's remaining steps."""
    model = _seq_model(True)
    with pytest.raises(RecompilationLimitError) as raised:
        with max_compilations(2, fail_fast=True) as budget:
            _fit(model, epochs=2)
    assert "XLA compilation 3 inside max_compilations(2) goes over it (fail_fast=True)" in str(raised.value)
    assert [c.step for c in budget.compilations] == [0, 1, 2]
    # The guard reads a step's batch at the next step's begin: step 3 never ran.
    assert int(model.optimizer.iterations.numpy()) == 3
    assert _keras_untouched()


def test_the_users_own_guard_reports_to_the_budget_and_none_is_added():
    """With an XlaGuardCallback in callbacks, the budget adds no guard and counts through the user's."""
    from keras_xla_guard import _model_hooks

    model = _seq_model(True)
    guard = keras_xla_guard.XlaGuardCallback(profile_epochs=(), write_summaries=False, verbose=0)
    with max_compilations(5) as budget:
        _fit(model, callbacks=[guard])
    assert budget.count == 5
    assert guard.signatures[0].new_signatures == 5
    assert model not in _model_hooks._guards


def test_an_exception_inside_fit_leaves_keras_unwrapped_and_propagates_unchanged():
    """A callback raising inside fit: the error passes through the block and keras.Model is Keras' again."""
    import keras

    class Boom(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 3:
                raise ValueError("boom at step 3")

    with pytest.raises(ValueError, match="boom at step 3"):
        with max_compilations(0):
            _fit(_seq_model(True), callbacks=[Boom()])
    assert _keras_untouched()


def test_ctrl_c_inside_fit_leaves_keras_unwrapped():
    """A KeyboardInterrupt (Ctrl-C) inside fit leaves the block as raised and puts Keras back."""
    import keras

    class CtrlC(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with max_compilations(None):
            _fit(_seq_model(True), callbacks=[CtrlC()])
    assert _keras_untouched()


def test_nested_budgets_count_alike_and_the_inner_error_comes_out():
    """An inner budget over its limit raises out of the outer one; both counted the fit's 5 compilations."""
    with pytest.raises(RecompilationLimitError, match=r"inside max_compilations\(1\), 4 more"):
        with max_compilations(None) as outer:
            with max_compilations(1) as inner:
                _fit(_seq_model(True))
            assert not _keras_untouched()  # the outer budget still needs the wrappers
    assert outer.count == inner.count == 5
    assert _keras_untouched()


def test_a_fit_in_another_thread_is_not_counted_and_gets_no_guard():
    """While the main thread's budget is open, a fit in another thread goes straight to Keras."""
    from keras_xla_guard import _model_hooks

    added = []
    models = []

    def fit_in_thread() -> None:
        models.append(_seq_model(True))
        history = _fit(models[0])
        added.append(len(history.history["loss"]))

    with max_compilations(None) as budget:
        thread = threading.Thread(target=fit_in_thread)
        thread.start()
        thread.join()
    assert added == [1]
    assert budget.count == 0
    # No guard was made for the other thread's model (its fit went straight to Keras).
    assert models[0] not in _model_hooks._guards


def test_a_budget_in_a_thread_counts_that_threads_fit():
    """A budget opened in a worker thread counts the fit of that thread."""
    counts = []

    def run() -> None:
        with max_compilations(None) as budget:
            _fit(_seq_model(True))
        counts.append(budget.count)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert counts == [5]
    assert _keras_untouched()


def test_callbacks_keras_cannot_be_given_a_guard_leave_the_count_unknown():
    """callbacks= as a CallbackList without a guard: the budget cannot observe fit and does not pass."""
    import keras

    model = _seq_model(True)
    callbacks = keras.callbacks.CallbackList([], add_history=True, model=model)
    with pytest.raises(
        CompilationsUnknownError,
        match=r"Functional.fit\(\) could not be observed: "
        r"TypeError: its callbacks are a CallbackList; pass a list",
    ):
        with max_compilations(5) as budget:
            _fit(model, callbacks=callbacks)
    assert budget.count is None


def test_a_custom_loops_watched_step_counts_and_fail_fast_raises_before_the_step_runs():
    """XlaGuard-watched jit step: each new length is counted at its step; fail_fast raises before that step runs."""
    import tensorflow as tf

    calls = tf.Variable(0)

    @tf.function(jit_compile=True)
    def train_step(tokens, target):
        calls.assign_add(1)
        return tf.reduce_mean(tf.cast(tokens, tf.float32)) - tf.reduce_mean(target)

    batches = _seq_batches(LENGTHS)
    guard = XlaGuard(profile_epochs=(), write_summaries=False, verbose=0)
    step = guard.watch(train_step)
    with max_compilations(None) as budget:
        with guard, guard.epoch(0):
            for x, y in batches:
                step(x["tokens"], y)
    assert [(c.step, str(c.signature)) for c in budget.compilations] == [
        (s, f"['target']: float32[8,1], ['tokens']: int32[8,{n}]") for s, n in zip(NEW_AT, (5, 7, 9, 11, 13))
    ]
    assert "['tokens']: int32[8,7] vs int32[8,5] (dim 1: 5 -> 7)" in budget.compilations[1].change.message

    guard = XlaGuard(profile_epochs=(), write_summaries=False, verbose=0)
    step = guard.watch(train_step)
    calls.assign(0)
    with pytest.raises(RecompilationLimitError, match="XLA compilation 2 inside max_compilations"):
        with max_compilations(1, fail_fast=True):
            with guard, guard.epoch(0):
                for x, y in batches:
                    step(x["tokens"], y)
    assert int(calls.numpy()) == 1  # step 1, whose length would compile, never ran


_ORACLE = """
import collections, glob, json, os, sys
sys.path.insert(0, {tests!r})
import tensorflow as tf
from _fit_helpers import LENGTHS, _seq_batches, _seq_dataset, _seq_model
import keras_xla_guard

def dumped():
    return len(glob.glob(os.path.join({dump!r}, "*before_optimizations.txt")))

model = _seq_model(True)
x_only = tf.data.Dataset.from_generator(lambda: (x for x, _ in _seq_batches((5, 21))),
                                        output_signature={{"tokens": tf.TensorSpec((None, None), tf.int32)}})
blocks = []
def block(run):
    before = dumped()
    with keras_xla_guard.max_compilations(None) as budget:
        run()
    blocks.append({{"counted": [[c.function, c.epoch, c.step] for c in budget.compilations],
                   "dumped": dumped() - before}})

def calls():
    model.fit(_seq_dataset(LENGTHS), epochs=2, verbose=0, validation_data=_seq_dataset((5, 9, 15)))
    model.evaluate(_seq_dataset((15, 17)), verbose=0)
    model.predict(x_only, verbose=0)

block(calls)
block(lambda: model.fit(_seq_dataset(LENGTHS), epochs=1, verbose=0))
model.compile("adam", "mse", jit_compile=True)
block(lambda: model.fit(_seq_dataset(LENGTHS), epochs=1, verbose=0))
print(json.dumps(blocks))
"""


def test_every_function_is_counted_and_the_counts_equal_xlas_own_dumps(tmp_path):
    """fit with validation, evaluate, predict; a second fit; a fit after compile(): XLA's dump files agree.

    In a fresh process with `--xla_dump_to` (XLA writes one module per compilation): the budget's
    count of each block equals the modules XLA dumped in it. Train: lengths 5, 7, 9, 11, 13;
    test (validation 5, 9, 15, then evaluate 15, 17): 4; predict (5, 21): 2; a second fit of the
    same model: 0 (Keras keeps its compiled function and the model's guard knows it); after
    `model.compile(...)`, a new train function: 5 again.
    """
    dump = tmp_path / "xla_dump"
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "XLA_FLAGS": f"--xla_dump_to={dump}",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _ORACLE.format(tests=str(REPO / "tests"), dump=str(dump))],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    first, again, recompiled = json.loads(proc.stdout.strip().splitlines()[-1])
    assert first["counted"] == [
        *(["train", 0, s] for s in NEW_AT),
        ["test", 0, 0],
        ["test", 0, 1],
        ["test", 0, 2],  # validation: lengths 5, 9, 15
        ["test", None, 1],  # evaluate: 15 is known to the test function, 17 is new
        ["predict", None, 0],
        ["predict", None, 1],
    ]
    assert first["dumped"] == len(first["counted"]) == 11
    assert again == {"counted": [], "dumped": 0}
    assert recompiled == {"counted": [["train", 0, s] for s in NEW_AT], "dumped": 5}


def test_a_model_fitted_before_any_budget_leaves_its_compilations_uncertain():
    """A fit outside any budget first: the block cannot tell new compilations from old, and does not pass."""
    model = _seq_model(True)
    _fit(model)
    with pytest.raises(CompilationsUnknownError) as raised:
        with max_compilations(0) as budget:
            _fit(model)
    assert str(raised.value).startswith(
        "keras-xla-guard: max_compilations(0) could not count the XLA compilations inside it: Functional's "
        "train function was built before a budget first saw the model (by a call outside any budget"
    )
    assert "5 of the compilation(s) counted may have happened then" in str(raised.value)
    assert budget.count is None and not budget.exceeded
    assert all(c.uncertain is not None for c in budget.compilations)
    model.compile("adam", "mse", jit_compile=True)  # a new train function: certain again
    with max_compilations(5) as budget:
        _fit(model)
    assert budget.count == 5


def test_tf_keras_fits_are_counted_too(tmp_path):
    """tf_keras (TF_USE_LEGACY_KERAS=1, in a subprocess): the same fit counts the same 5 compilations."""
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        import numpy as np, tensorflow as tf, tf_keras as keras
        from _fit_helpers import LENGTHS, _seq_dataset
        import keras_xla_guard

        tokens = keras.Input((None,), dtype="int32", name="tokens")
        hidden = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8)(tokens))
        model = keras.Model({{"tokens": tokens}}, keras.layers.Dense(1)(hidden))
        model.compile("adam", "mse", jit_compile=True)
        with keras_xla_guard.max_compilations(None) as budget:
            model.fit(_seq_dataset(LENGTHS), epochs=2, verbose=0)
        print(json.dumps({{"steps": [c.step for c in budget.compilations],
                          "unwrapped": "fit" in vars(keras.Model) and keras.Model.fit.__module__}}))
    """)
    env = {
        **os.environ,
        "TF_USE_LEGACY_KERAS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["steps"] == NEW_AT
    assert out["unwrapped"].startswith("tf_keras.")  # its own fit is back in place


def test_over_the_limit_with_more_uncounted_raises_the_limit_error_and_names_both():
    """Counted compilations over the limit win over 'could not count': RecompilationLimitError, the rest noted."""
    import numpy as np

    from keras_xla_guard.runtime.budget import report_compilation, report_unavailable
    from keras_xla_guard.signatures import Signature, SignatureTracker

    class Engine:
        """Stands for the reporting engine."""

    engine, tracker = Engine(), SignatureTracker(xla=True)
    tracker.begin_epoch(0)
    with pytest.raises(RecompilationLimitError) as raised:
        with max_compilations(1):
            report_unavailable("the test function's signatures were not recorded")
            for step, length in enumerate((5, 7)):
                sig = Signature.of((np.zeros((8, length), "int32"),), root_names=("x",))
                tracker.observe(sig, step=step)
                report_compilation(engine, "train", tracker, sig, epoch=0, step=step)
    message = str(raised.value)
    assert message.startswith("keras-xla-guard: 2 XLA compilation(s) inside max_compilations(1), 1 more")
    assert message.endswith(
        "\nMore may have happened uncounted: the test function's signatures were not recorded."
    )


def test_a_budget_is_entered_once():
    """Entering a used budget again is a RuntimeError naming the fix (a new max_compilations())."""
    budget = max_compilations(None)
    with budget:
        pass
    with pytest.raises(RuntimeError, match=r"entered once; make a new one with max_compilations\(\)"):
        budget.__enter__()


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_while_keras_is_put_back_is_held_until_it_is_back(monkeypatch):
    """Two Ctrl-Cs while the last budget unwraps keras.Model: every method goes back, then one KeyboardInterrupt."""
    from keras_xla_guard import _model_hooks

    unwrap = _model_hooks._unwrap
    left = []

    def interrupted_unwrap() -> None:
        # The second signal is the one a gate that does not hold passes on at once.
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
        left.append(tuple(_model_hooks._wrapped))  # release() holds the hooks' lock
        unwrap()

    monkeypatch.setattr(_model_hooks, "_unwrap", interrupted_unwrap)
    # As if no guard were alive: the last budget then unwraps everything.
    monkeypatch.setattr(_model_hooks, "_holders", 0)
    with pytest.raises(KeyboardInterrupt):
        with max_compilations(None):
            pass
    assert len(left) == 1 and left[0] != ()  # the signals came while Keras was still wrapped
    assert _keras_untouched()
    monkeypatch.undo()
    with _model_hooks._lock:
        _model_hooks._sync()  # the guards still alive get their wrappers back


def test_warm_up_before_the_block_leaves_the_fits_compilations_uncertain():
    """warm_up outside the block builds the train function: the fit's 5 compilations are uncertain, no pass."""
    model = _seq_model(True)
    assert len(keras_xla_guard.warm_up(model, _seq_dataset(LENGTHS)).signatures) == 5
    with pytest.raises(CompilationsUnknownError, match="train function was built before a budget first saw"):
        with max_compilations(5) as budget:
            _fit(model)
    assert [(c.step, c.uncertain is not None) for c in budget.compilations] == [(s, True) for s in NEW_AT]


def test_a_guard_that_warms_up_inside_the_block_counts_each_warmed_signature_once():
    """XlaGuardCallback(warm_up=True) inside the block: 5 compilations, each the warm-up's, none fit's."""
    model = _seq_model(True)
    guard = keras_xla_guard.XlaGuardCallback(
        profile_epochs=(), write_summaries=False, verbose=0, warm_up=True
    )
    with max_compilations(5) as budget:
        _fit(model, epochs=2, callbacks=[guard])
    assert len(guard.warm_up_report.signatures) == 5
    assert [(c.function, c.epoch, c.step) for c in budget.compilations] == [("warm_up", None, None)] * 5
    assert [c.signature for c in budget.compilations] == list(guard.warm_up_report.signatures)
    assert budget.unknown is None


def test_a_keras_the_signature_seam_does_not_fit_leaves_the_count_unknown(monkeypatch):
    """No flavour fits the installed Keras (a release the seam does not know): no count, an error naming it."""
    import keras

    from keras_xla_guard import XlaGuardWarning
    from keras_xla_guard.seam import _detect

    # Where every part of the seam looks it up.
    monkeypatch.setattr(_detect, "flavour_of", lambda model: None)
    with pytest.warns(XlaGuardWarning, match=f"keras {keras.__version__}"):
        with pytest.raises(CompilationsUnknownError) as raised:
            with max_compilations(5) as budget:
                _fit(_seq_model(True))
    assert (
        f"could not count the XLA compilations inside it: keras {keras.__version__} on backend "
        f"'{keras.backend.backend()}' is not a Keras this guard knows how to record."
    ) in str(raised.value)
    assert budget.count is None


def _train_on_batches(model: Any) -> None:
    for x, y in _seq_batches(LENGTHS):
        model.train_on_batch(x, y)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_train_on_batch_is_not_counted_and_says_so_when_xla_compiles(jit_compile):
    """train_on_batch takes no callbacks: with XLA the budget cannot pass (not a silent 0); without, 0 is true."""
    model = _seq_model(jit_compile)
    if jit_compile:
        with pytest.raises(CompilationsUnknownError) as raised:
            with max_compilations(5) as budget:
                _train_on_batches(model)
        assert str(raised.value).count("train_on_batch() was called, which takes no callbacks") == 1
        assert budget.count is None
    else:
        with max_compilations(0) as budget:
            _train_on_batches(model)
        assert budget.count == 0
    assert _keras_untouched()


def test_test_and_predict_on_batch_are_not_counted_and_say_so():
    """test_on_batch and predict_on_batch of a jit-compiled model: both named, the count unknown."""
    model = _seq_model(True)
    (x, y), *_ = _seq_batches(LENGTHS)
    with pytest.raises(CompilationsUnknownError) as raised:
        with max_compilations(None):
            model.test_on_batch(x, y)
            model.predict_on_batch(x)
    assert "Functional.test_on_batch() was called" in str(raised.value)
    assert "Functional.predict_on_batch() was called" in str(raised.value)


def test_a_subclass_fit_that_skips_super_fit_is_not_counted_and_says_so():
    """A subclass's own fit looping over train_on_batch: the budget cannot see it and does not pass."""
    import keras

    class OwnFit(keras.Model):
        def fit(self, batches: Any, **kwargs: Any) -> None:
            for x, y in batches:
                self.train_on_batch(x, y)

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    hidden = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8)(tokens))
    model = OwnFit({"tokens": tokens}, keras.layers.Dense(1)(hidden))
    model.compile("adam", "mse", jit_compile=True)
    with pytest.raises(CompilationsUnknownError, match=r"OwnFit.train_on_batch\(\) was called"):
        with max_compilations(5):
            model.fit(_seq_batches(LENGTHS))
