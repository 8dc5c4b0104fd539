"""CompileLog: a framework's compile-phase events become one Compilation per program, per epoch."""

from __future__ import annotations

import threading

import pytest

from keras_xla_guard.runtime.compile_log import Compilation, CompileLog, EpochCompilations, program_name


def test_program_name_strips_jax_wrappers():
    """ "jit(train_step)" and "train_step" both name the program train_step; other names stay."""
    assert [program_name(n) for n in ("jit(train_step)", "pjit(f)", "train_step", "jit(jit(g))", "")] == [
        "train_step",
        "f",
        "train_step",
        "jit(g)",
        "",
    ]


def test_phases_of_one_program_make_one_compilation_at_the_step():
    """trace + lower + compile of train_step at epoch 0 step 3: one train row with the three phase times."""
    log = CompileLog({"train_step": "train"})
    log.at(0, 3)
    log.on_phase("trace", "train_step", 0.25)
    log.on_phase("lower", "jit(train_step)", 0.125)
    log.on_phase("compile", "jit(train_step)", 0.5)
    assert log.count(0, "train") == 1
    assert log.take(0) == EpochCompilations(0, (Compilation("train", "train_step", 0, 3, 0.25, 0.125, 0.5),))


def test_eager_programs_count_as_other_and_keep_no_step():
    """jit(equal) between steps is an "other" compilation, with no trace phase and no step."""
    log = CompileLog({"train_step": "train", "test_step": "test"})
    log.at(1, 2)
    log.on_phase("lower", "jit(equal)", 0.01)
    log.on_phase("compile", "jit(equal)", 0.02)
    log.on_phase("compile", "jit(test_step)", 0.3)
    taken = log.take(1)
    assert [(r.function, r.program, r.step, r.trace_s, r.lower_s) for r in taken.rows] == [
        ("other", "equal", None, None, 0.01),
        ("test", "test_step", None, None, None),
    ]
    assert taken.counts == {"train": 0, "test": 1, "predict": 0, "warm_up": 0, "other": 1}
    assert taken.seconds("other") == pytest.approx(0.03)


def test_an_unnamed_lowering_goes_with_the_next_compilation():
    """JAX before 0.7 names a lowering by its name stack (often ""): it joins the next compilation."""
    log = CompileLog({"train_step": "train"})
    log.on_phase("lower", "", 0.5)
    log.on_phase("compile", "jit(train_step)", 1.0)
    (row,) = log.take(0).rows
    assert (row.lower_s, row.compile_s) == (0.5, 1.0)


def test_a_cache_hit_marks_only_the_compilation_it_came_in():
    """A persistent-cache hit event marks the next compilation of its thread, not the one after."""
    log = CompileLog({})
    log.on_phase("cache_hit", "", 0.0)
    log.on_phase("compile", "jit(f)", 0.001)
    log.on_phase("compile", "jit(g)", 0.2)
    assert [r.cache_hit for r in log.take(0).rows] == [True, False]


def test_phases_are_kept_apart_per_thread():
    """A trace on another thread never lends its time to this thread's compilation."""
    log = CompileLog({"f": "train"})
    other = threading.Thread(target=log.on_phase, args=("trace", "f", 9.0))
    other.start()
    other.join()
    log.on_phase("compile", "jit(f)", 1.0)
    (row,) = log.take(0).rows
    assert row.trace_s is None


def test_take_returns_an_epochs_rows_once_with_those_before_any_epoch():
    """Rows from before the first epoch go with the first one taken; taking twice gives nothing new."""
    log = CompileLog({})
    log.on_phase("compile", "jit(a)", 0.1)
    log.at(0, None)
    log.on_phase("compile", "jit(b)", 0.1)
    log.at(1, None)
    log.on_phase("compile", "jit(c)", 0.1)
    assert [r.program for r in log.take(0).rows] == ["a", "b"]
    assert [(r.program, r.epoch) for r in log.take(1).rows] == [("c", 1)]
    assert log.take(0).rows == ()


def test_without_new_signature_lists_train_rows_no_signature_explains():
    """Train rows without a signature are the ones no new input signature caused; others never count."""
    rows = (
        Compilation("train", "train_step", 0, 0, 0.1, 0.1, 0.1, signature="x: float32[2]"),
        Compilation("train", "train_step", 0, 1, None, 0.1, 0.1),
        Compilation("other", "equal", 0, None, None, 0.1, 0.1),
    )
    assert EpochCompilations(0, rows).without_new_signature == (rows[1],)


def test_epoch_compilations_round_trip_through_a_dict():
    """to_dict/from_dict give back an equal value; a malformed dict is a ValueError naming it."""
    value = EpochCompilations(2, (Compilation("test", "test_step", 2, None, 0.1, 0.2, 0.3, cache_hit=True),))
    assert EpochCompilations.from_dict(value.to_dict()) == value
    assert value.to_dict()["counts"] == {"train": 0, "test": 1, "predict": 0, "warm_up": 0, "other": 0}
    assert value.to_dict()["source"] == "counted"
    with pytest.raises(ValueError, match="not an EpochCompilations dict"):
        EpochCompilations.from_dict({"rows": []})


def test_fresh_hands_each_functions_compilation_once_with_its_functions_step():
    """fresh(): train rows with the train step, test rows with the call step (at_call), no "other" rows; once."""
    log = CompileLog({"train_step": "train", "test_step": "test"})
    log.at(0, 4)
    log.on_phase("compile", "jit(train_step)", 0.5)
    log.on_phase("compile", "jit(equal)", 0.01)
    log.at_call(2)
    log.on_phase("compile", "jit(test_step)", 0.3)
    log.at(1, None)
    log.on_phase("compile", "jit(test_step)", 0.2)
    # A test row's own step is its call's step too (a validation's row shows where it compiled).
    assert [(row.function, row.epoch, row.step, step) for row, step in log.fresh()] == [
        ("train", 0, 4, 4),
        ("test", 0, 2, 2),
        ("test", 1, None, None),
    ]
    assert log.fresh() == []
    assert log.total == 4
