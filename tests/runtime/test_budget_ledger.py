"""The compilation budgets' ledger and registry (runtime/budget.py): what each compilation
carries, whom a report reaches, when fail_fast raises, and the message. Pure: signatures fed
to a real SignatureTracker, as the engine does; the real fits are in tests/test_budget.py (hence
this file's other name: pytest needs distinct basenames)."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import replace

import numpy as np
import pytest

from keras_xla_guard.errors import RecompilationLimitError
from keras_xla_guard.runtime.budget import (
    BudgetCompilation,
    CompilationLedger,
    active_ledgers,
    enter_ledger,
    leave_ledger,
    note_unseen_history,
    pending_compilation,
    report_compilation,
    report_counted,
    report_epoch,
    report_unavailable,
)
from keras_xla_guard.signatures import Signature, SignatureTracker


class _Engine:
    """Stands for the reporting engine: an object a weak reference can point to."""


ENGINE = _Engine()


def _sig(batch: int, length: int) -> Signature:
    return Signature.of(
        ({"tokens": np.zeros((batch, length), "int32")}, np.zeros((batch, 1), "float32")),
        root_names=("x", "y"),
    )


def _feed(
    tracker: SignatureTracker, shapes: list[tuple[int, int]], source: object = ENGINE, epoch: int = 0
) -> None:
    """Observes one step per shape, reporting each new one as the engine does."""
    tracker.begin_epoch(epoch)
    for step, (batch, length) in enumerate(shapes):
        sig = _sig(batch, length)
        if tracker.observe(sig, step=step):
            report_compilation(source, "train", tracker, sig, epoch=epoch, step=step)


@pytest.fixture
def ledger():
    """A counting ledger open in this thread for the test's length."""
    opened = CompilationLedger(None)
    enter_ledger(opened)
    yield opened
    leave_ledger(opened)


def test_each_new_signature_is_one_compilation_with_its_step_change_and_fix(ledger):
    """5 lengths in 7 steps: 5 compilations at the steps they first ran, each naming what changed."""
    tracker = SignatureTracker(xla=True)
    _feed(tracker, [(8, n) for n in (5, 7, 9, 5, 11, 7, 13)])
    found = ledger.compilations
    assert [c.step for c in found] == [0, 1, 2, 4, 6]
    assert [c.signature.shapes[0] for c in found] == [(8, 5), (8, 7), (8, 9), (8, 11), (8, 13)]
    assert found[0].first and found[0].change.kind == "first_signature" and found[0].fix is None
    assert found[1].change.kind == "new_signature"
    assert found[1].changed == (("x['tokens']", 1),)
    assert "x['tokens']: int32[8,7] vs int32[8,5] (dim 1: 5 -> 7)" in found[1].change.message
    # The last compilation's fix is the bucketing the tracker recommends for all five lengths.
    assert found[-1].fix is not None and found[-1].fix.kind == "bucketing_fix"
    assert found[-1].fix.values == (7, 13)
    assert found[-1].fix.fix_code == tracker.end_epoch().explanations[-1].fix_code


def test_the_epoch_end_gives_each_compilation_the_epochs_final_reasons(ledger):
    """A short last batch is known only at the epoch's end; report_epoch hands it to that compilation."""
    tracker = SignatureTracker(xla=True)
    _feed(tracker, [(8, 5), (8, 5), (4, 5)])
    (_, short) = ledger.compilations
    assert short.fix is None and short.changed == (("x['tokens']", 0), ("y", 0))
    report_epoch(ENGINE, "train", tracker.end_epoch())
    (_, short) = ledger.compilations
    assert short.fix is not None and short.fix.kind == "short_last_batch"
    assert short.fix.values == (4, 8)


def test_report_epoch_of_another_source_or_epoch_leaves_compilations_alone(ledger):
    """Reasons go to the compilations of the same source, function and epoch only."""
    tracker = SignatureTracker(xla=True)
    a, b = _Engine(), _Engine()
    _feed(tracker, [(8, 5), (4, 5)], source=a)
    stats = tracker.end_epoch()
    report_epoch(b, "train", stats)
    report_epoch(a, "test", stats)
    assert ledger.compilations[1].fix is None
    report_epoch(a, "train", stats)
    assert ledger.compilations[1].fix is not None


def test_without_an_open_ledger_a_report_reaches_nobody():
    """No budget open: report_compilation returns at once and nothing is kept anywhere."""
    assert active_ledgers() == ()
    tracker = SignatureTracker(xla=True)
    _feed(tracker, [(8, 5), (8, 7)])
    opened = CompilationLedger(None)
    enter_ledger(opened)
    try:
        assert opened.compilations == ()
    finally:
        leave_ledger(opened)


def test_reports_reach_the_ledgers_of_the_reporting_thread_only(ledger):
    """A compilation reported from another thread is not counted by this thread's ledger."""
    other = CompilationLedger(None)

    def run() -> None:
        enter_ledger(other)
        try:
            _feed(SignatureTracker(xla=True), [(8, 5), (8, 7), (8, 9)])
        finally:
            leave_ledger(other)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    _feed(SignatureTracker(xla=True), [(8, 5)])
    assert len(other.compilations) == 3
    assert len(ledger.compilations) == 1


def test_nested_ledgers_both_count_and_leaving_the_outer_keeps_the_inner(ledger):
    """An inner budget counts what happens inside it; the outer one counts that too."""
    inner = CompilationLedger(None)
    enter_ledger(inner)
    tracker = SignatureTracker(xla=True)
    _feed(tracker, [(8, 5), (8, 7)])
    leave_ledger(inner)
    _feed(tracker, [(8, 9)], epoch=1)
    assert (len(ledger.compilations), len(inner.compilations)) == (3, 2)
    leave_ledger(ledger)
    enter_ledger(inner)
    assert active_ledgers() == (inner,)
    leave_ledger(inner)
    enter_ledger(ledger)


def test_fail_fast_raises_at_the_compilation_over_the_limit_after_every_ledger_counted_it(ledger):
    """limit 2, fail_fast: the third new signature raises, listing the 3; the outer ledger has it too."""
    strict = CompilationLedger(2, fail_fast=True)
    enter_ledger(strict)
    tracker = SignatureTracker(xla=True)
    try:
        with pytest.raises(RecompilationLimitError) as raised:
            _feed(tracker, [(8, 5), (8, 7), (8, 7), (8, 9), (8, 11)])
    finally:
        leave_ledger(strict)
    message = str(raised.value)
    assert message.startswith("keras-xla-guard: XLA compilation 3 inside max_compilations(2) goes over it")
    assert "  3. train function, epoch 0, step 3: x['tokens']: int32[8,9], y: float32[8,1]" in message
    assert "  4." not in message
    # Every compilation of the epoch so far carries the same, latest bucketing: its code comes once.
    assert message.count("bucket_by_sequence_length(") == 1
    assert len(ledger.compilations) == len(strict.compilations) == 3
    assert strict.exceeded and not ledger.exceeded


def test_the_message_lists_every_compilation_and_the_fix_code_once(ledger):
    """Over budget: one numbered entry per compilation (where, signature, change, why, fix), code once."""
    ledger.limit = 2
    tracker = SignatureTracker(xla=True)
    _feed(tracker, [(8, n) for n in (5, 7, 9, 11, 13)])
    report_epoch(ENGINE, "train", tracker.end_epoch())
    message = ledger.message()
    lines = message.splitlines()
    assert lines[0] == (
        "keras-xla-guard: 5 XLA compilation(s) inside max_compilations(2), 3 more than it "
        "allows. Each one, with what changed and the fix:"
    )
    assert [line.split(":")[0] for line in lines if line.startswith("  ") and line[2].isdigit()] == [
        f"  {n}. train function, epoch 0, step {n - 1}" for n in range(1, 6)
    ]
    assert lines[2] == "       first signature at step 0: x['tokens']: int32[8,5], y: float32[8,1]"
    assert message.count("       why: input 'tokens' dim 1 varied across 5 values (5, 7, 9, 11, 13)") == 4
    assert message.count("       fix: pad input 'tokens' dim 1 to ") == 4
    assert message.count("Fix code for x['tokens'] dim 1:") == 1
    assert message.count("bucket_by_sequence_length(") == 1


def test_without_a_computed_fix_the_message_says_what_to_keep_fixed(ledger):
    """A batch-size change that is not a short last batch, and a changed structure, get a plain fix."""
    tracker = SignatureTracker(xla=True)
    _feed(tracker, [(8, 5), (4, 5), (8, 5)])
    tracker.begin_epoch(1)
    odd = Signature.of(
        ({"tokens": np.zeros((8, 5, 2), "int32")}, np.zeros((8, 1), "float32")), root_names=("x", "y")
    )
    tracker.observe(odd, step=0)
    report_compilation(ENGINE, "train", tracker, odd, epoch=1, step=0)
    batch, structure = ledger.compilations[1:]
    assert batch.describe()[-1] == (
        "  fix: use one batch size for every step (e.g. drop the short last batch: a number of examples "
        "that is a multiple of the batch size, or tf.data's drop_remainder=True; its examples are then left "
        "out of the epoch)"
    )
    # An evaluation or prediction must keep every example: no drop_remainder advice there.
    for function in ("test", "predict"):
        assert dataclasses.replace(batch, function=function).describe()[-1] == (
            "  fix: use one batch size for every step, but keep every example: dropping the short last "
            "batch would leave its examples out of the results"
        )
    assert structure.changed == () and structure.reasons == ()
    assert (
        structure.describe()[-1]
        == "  fix: keep the inputs' structure, dtypes and ranks the same in every call"
    )


def test_an_unavailable_report_marks_every_open_ledger_unknown(ledger):
    """report_unavailable: the reason is kept (once per distinct reason) by each open ledger."""
    report_unavailable("keras 9.9 is not a Keras this guard knows how to record")
    report_unavailable("keras 9.9 is not a Keras this guard knows how to record")
    assert ledger.unknown == "keras 9.9 is not a Keras this guard knows how to record"
    # A call missed at every step of a loop (train_on_batch) is held once, not once per step.
    for _ in range(1000):
        report_unavailable("Functional.train_on_batch() was called")
    assert ledger._unknown == [
        "keras 9.9 is not a Keras this guard knows how to record",
        "Functional.train_on_batch() was called",
    ]


def test_compilations_of_a_function_with_unseen_history_are_uncertain_until_it_changes(ledger):
    """note_unseen_history: reports are uncertain while the reason holds; they neither pass nor fail a budget."""
    ledger.limit = 0
    holds = ["the train function was built before a budget saw it"]
    engine = _Engine()
    note_unseen_history(engine, "train", lambda: holds[0])
    tracker = SignatureTracker(xla=True)
    _feed(tracker, [(8, 5), (8, 7)], source=engine)
    assert [c.uncertain for c in ledger.compilations] == [holds[0]] * 2
    assert ledger.certain == 0 and not ledger.exceeded
    assert ledger.unknown == f"{holds[0]}; 2 of the compilation(s) counted may have happened then"
    assert "  (may have been compiled before the budget: the train function was built" in ledger.message()
    holds[0] = None  # e.g. the model was compiled again: a new function, seen from its start
    _feed(tracker, [(8, 9)], source=engine, epoch=1)
    assert ledger.compilations[-1].uncertain is None
    assert ledger.certain == 1 and ledger.exceeded
    assert ledger.message().startswith(
        "keras-xla-guard: 1 XLA compilation(s) inside max_compilations(0) "
        "(and 2 that may have happened before it), 1 more than it allows."
    )


def test_a_negative_limit_is_refused_naming_it():
    """CompilationLedger(-1) is a ValueError quoting the value."""
    with pytest.raises(ValueError, match=r"`limit` must be an integer >= 0 or None. Received: limit=-1"):
        CompilationLedger(-1)


def test_counted_compilations_keep_their_program_and_one_without_a_signature_says_so(ledger):
    """As the engine under JAX counts: a pending signature paired with its program, then one with none."""
    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(0)
    sig = _sig(8, 5)
    tracker.observe(sig, step=0)
    pending = pending_compilation(ENGINE, "train", tracker, sig, epoch=0, step=0)
    assert pending is not None and pending.program is None and not pending.measured
    report_counted(ENGINE, replace(pending, program="train_step"), tracker.current_explanations())
    bare = BudgetCompilation(
        "train", 0, 1, None, None, program="train_step", note="why (not certain): x\nfind out: y"
    )
    report_counted(ENGINE, bare, tracker.current_explanations())
    report_epoch(ENGINE, "train", tracker.end_epoch())
    first, second = ledger.compilations
    assert first.measured and first.first and first.signature == sig
    assert second.measured and not second.first and second.reasons == () and second.fix is None
    assert second.describe() == [
        "train function, epoch 0, step 1: train_step compiled with no new input signature",
        "  why (not certain): x",
        "  find out: y",
    ]
    assert (
        ledger.message()
        .splitlines()[-1]
        .startswith("(Counted as the backend compiled them (JAX's jax.monitoring)")
    )


def test_programs_loaded_from_the_persistent_cache_count_and_each_says_so():
    """Cache hits count against the limit like compilations; each is marked, and the last line says how many."""
    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(0)
    opened = CompilationLedger(1)
    enter_ledger(opened)
    try:
        for step, length in enumerate((5, 7)):
            sig = _sig(8, length)
            tracker.observe(sig, step=step)
            pending = pending_compilation(ENGINE, "train", tracker, sig, epoch=0, step=step)
            assert pending is not None
            loaded = replace(pending, program="train_step", cache_hit=step == 1)
            report_counted(ENGINE, loaded, tracker.current_explanations())
        bare = BudgetCompilation("train", 0, 2, None, None, program="train_step", note="n", cache_hit=True)
        report_counted(ENGINE, bare, tracker.current_explanations())
    finally:
        leave_ledger(opened)
    assert [c.cache_hit for c in opened.compilations] == [False, True, True]
    assert opened.certain == 3 and opened.exceeded
    first, loaded, bare = opened.compilations
    marker = "  (loaded from JAX's persistent compilation cache, not compiled)"
    assert marker not in first.describe()
    assert loaded.describe()[:2] == [
        "train function, epoch 0, step 1: x['tokens']: int32[8,7], y: float32[8,1]",
        marker,
    ]
    assert bare.describe()[:2] == [
        "train function, epoch 0, step 2: train_step compiled with no new input signature",
        marker,
    ]
    message = opened.message()
    assert message.startswith("keras-xla-guard: 3 XLA compilation(s) inside max_compilations(1), 2 more")
    assert message.splitlines()[-1] == (
        "(Counted as the backend compiled them (JAX's jax.monitoring), each matched to the new input "
        "signature of its step where one came; 2 of them JAX loaded from its persistent compilation cache "
        "(they count all the same, so that the verdict does not depend on a warm cache); docs/budgets.md.)"
    )


def test_pending_compilation_without_an_open_ledger_is_none():
    """No budget open: the engine keeps nothing for a new signature."""
    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(0)
    sig = _sig(8, 5)
    tracker.observe(sig, step=0)
    assert pending_compilation(ENGINE, "train", tracker, sig, epoch=0, step=0) is None


def test_a_test_or_predict_compilation_outside_an_epoch_is_listed_under_its_function_without_an_epoch(ledger):
    """`evaluate` outside fit: 'test function, step 1: ...', no epoch; a predict one: 'predict function, step 0'."""
    tracker = SignatureTracker(xla=True)
    tracker.begin_epoch(None)
    for function, step, length in (("test", 1, 5), ("predict", 0, 7)):
        sig = _sig(8, length)
        tracker.observe(sig, step=step)
        report_compilation(ENGINE, function, tracker, sig, epoch=None, step=step)
    test, predict = ledger.compilations
    assert test.describe()[0] == "test function, step 1: x['tokens']: int32[8,5], y: float32[8,1]"
    assert predict.describe()[0] == "predict function, step 0: x['tokens']: int32[8,7], y: float32[8,1]"


def test_a_fail_fast_budget_outside_another_raises_once_both_having_counted():
    """fail_fast on the outer budget: the inner one counts the compilation too; later ones raise no more."""
    strict = CompilationLedger(0, fail_fast=True)
    inner = CompilationLedger(None)
    enter_ledger(strict)
    enter_ledger(inner)
    tracker = SignatureTracker(xla=True)
    try:
        with pytest.raises(RecompilationLimitError) as raised:
            _feed(tracker, [(8, 5)])
        # A loop that catches the error and goes on: the budget raised already.
        _feed(tracker, [(8, 7), (8, 9)], epoch=1)
    finally:
        leave_ledger(inner)
        leave_ledger(strict)
    assert str(raised.value).startswith(
        "keras-xla-guard: XLA compilation 1 inside max_compilations(0) goes over it"
    )
    assert len(inner.compilations) == len(strict.compilations) == 3


def test_leaving_an_outer_budget_first_keeps_the_inner_one_open():
    """Budgets left out of order: leaving the outer one leaves the inner one receiving reports."""
    outer, inner = CompilationLedger(None), CompilationLedger(None)
    enter_ledger(outer)
    enter_ledger(inner)
    leave_ledger(outer)
    try:
        assert active_ledgers() == (inner,)
        _feed(SignatureTracker(xla=True), [(8, 5)])
    finally:
        leave_ledger(inner)
    assert (len(outer.compilations), len(inner.compilations)) == (0, 1)


def test_fail_fast_numbers_the_certain_compilation_that_goes_over(ledger):
    """An uncertain compilation first: fail_fast names certain compilation 2 (of 3 counted) as the one over 1."""
    tracker = SignatureTracker(xla=True)
    strict = CompilationLedger(1, fail_fast=True)
    enter_ledger(strict)
    try:
        note_unseen_history(ENGINE, "train", lambda: "built before")
        _feed(tracker, [(8, 5)])
        note_unseen_history(ENGINE, "train", lambda: None)
        with pytest.raises(RecompilationLimitError) as raised:
            _feed(tracker, [(8, 5), (8, 7), (8, 9)], epoch=1)
    finally:
        leave_ledger(strict)
    message = str(raised.value)
    assert message.startswith("keras-xla-guard: XLA compilation 2 inside max_compilations(1) goes over it")
    assert [c.uncertain for c in strict.compilations] == ["built before", None, None]
