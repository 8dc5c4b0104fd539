"""Tests of what ends a guarded fit, evaluate or predict, run on both backends.

tests/test_exits.py (TensorFlow) and tests/on_jax/test_exits.py (Keras on
JAX without TensorFlow) import these tests; each backend's suite collects
them under its own Keras. Every case uses the real mechanism: a callback
that raises, a real SIGINT the backend's profiler sends itself from inside
its stop, a full tmpfs. After each: the backend's profiler starts again,
Keras' functions are its own, the run file is read by `report`, and a
later unguarded fit trains bit for bit as one that never had a guard.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _exits import (
    BATCH,
    EPOCHS,
    PROFILED,
    STEPS,
    data,
    full_disk,
    hooks,
    keras_own,
    left_of_the_guard,
    make_model,
    profiler_starts,
    report_of,
    resync,
    saved_statuses,
    sigint_inside,
    state,
)

from keras_xla_guard import XlaGuardCallback, XlaGuardWarning

__all__ = [
    "test_a_budget_counts_every_compilation_of_a_fit_an_exception_ended",
    "test_a_full_disk_costs_one_warning_per_failure_and_leaves_the_profiler_free",
    "test_a_real_sigint_in_the_profilers_stop_is_raised_after_it_and_the_window_kept",
    "test_an_exception_in_evaluate_or_predict_puts_keras_function_back",
    "test_keras_calls_no_end_hook_when_an_exception_leaves_fit_evaluate_or_predict",
    "test_whatever_ends_fit_leaves_nothing_of_the_guard_behind",
]


def _fit(model: Any, callbacks: list[Any], epochs: int = EPOCHS, validation: bool = True) -> Any:
    x, y, validation_data = data()
    return model.fit(
        x,
        y,
        batch_size=BATCH,
        epochs=epochs,
        validation_data=validation_data if validation else None,
        callbacks=callbacks,
        verbose=0,
        shuffle=False,
    )


def _guard(log_dir: Path, **kwargs: Any) -> Any:
    kwargs.setdefault("profile_epochs", (PROFILED,))
    return XlaGuardCallback(log_dir=log_dir, skip_steps=0, verbose=0, **kwargs)


def test_keras_calls_no_end_hook_when_an_exception_leaves_fit_evaluate_or_predict():
    """What Keras itself calls on each way out, pinned: after an exception no end hook, after a stop one.

    Why the guard cannot clean up in on_train_end / on_test_end / on_predict_end alone: after an
    exception from a callback's on_epoch_end (or a KeyboardInterrupt, a SystemExit) Keras calls none.
    """
    x, y, _ = data()
    model = make_model()

    def fit_ends(raise_at: Any = None, stop_at: Any = None) -> list[str]:
        recorder = hooks(raise_at, stop_at)
        try:
            _fit(model, [recorder], epochs=2)
        except BaseException as e:  # noqa: BLE001 - the case under test raises it
            assert raise_at is not None and e is raise_at[2]
        return [name for name, _ in recorder.seen if name in ("on_epoch_end", "on_train_end")]

    # A clean fit: each epoch ends, then the run.
    assert fit_ends() == ["on_epoch_end", "on_epoch_end", "on_train_end"]
    assert fit_ends(("on_epoch_end", 0, RuntimeError("user callback"))) == ["on_epoch_end"]
    assert fit_ends(("on_train_batch_end", 2, KeyboardInterrupt())) == []
    assert fit_ends(("on_epoch_begin", 1, SystemExit(3))) == ["on_epoch_end"]
    # stop_training (EarlyStopping's way) ends the run as usual.
    assert fit_ends(stop_at=2) == ["on_epoch_end", "on_train_end"]
    for call, hook, end in (
        ("evaluate", "on_test_batch_end", "on_test_end"),
        ("predict", "on_predict_batch_end", "on_predict_end"),
    ):
        recorder = hooks((hook, 0, RuntimeError(call)))
        with pytest.raises(RuntimeError, match=call):
            if call == "evaluate":
                model.evaluate(x, y, batch_size=BATCH, callbacks=[recorder], verbose=0)
            else:
                model.predict(x, batch_size=BATCH, callbacks=[recorder], verbose=0)
        resync(model)
        assert end not in [name for name, _ in recorder.seen]


# (hook, its epoch or batch, in which epoch, exception, with validation, the profiled epoch's report after it)
_CASES = {
    # Before the guard's own on_epoch_end: its window is still open.
    "on_epoch_end": (
        "on_epoch_end",
        PROFILED,
        PROFILED,
        RuntimeError("user callback failed"),
        False,
        "incomplete",
    ),
    "ctrl_c_in_a_step": ("on_train_batch_end", 3, PROFILED, KeyboardInterrupt(), True, "incomplete"),
    # After the profiled epoch: its window finished and is kept.
    "sys_exit_next_epoch": ("on_epoch_begin", PROFILED + 1, PROFILED + 1, SystemExit(2), True, "ok"),
    # The validation closed the window before it ran.
    "in_validation": ("on_test_end", None, PROFILED, RuntimeError("validation callback failed"), True, "ok"),
    "after_validation": (
        "on_epoch_end",
        PROFILED,
        PROFILED,
        RuntimeError("user callback failed"),
        True,
        "ok",
    ),
}


def _raising_fit(model: Any, case: str, log_dir: Path | None) -> BaseException:
    """Fits with the case's raising callback first (and a guard when `log_dir`); what came out of fit."""
    hook, index, epoch, error, validation, _ = _CASES[case]
    recorder = hooks()
    record = recorder._hook

    def _hook(name: str, i: Any = None) -> None:
        record(name, i)
        epochs = [e for n, e in recorder.seen if n == "on_epoch_begin"]
        if (name, i) == (hook, index) and epochs and epochs[-1] == epoch:
            raise error

    recorder._hook = _hook
    callbacks = [recorder] if log_dir is None else [recorder, _guard(log_dir)]
    with pytest.raises(type(error)) as raised:
        _fit(model, callbacks, validation=validation)
    return raised.value


@pytest.mark.parametrize("case", sorted(_CASES))
def test_whatever_ends_fit_leaves_nothing_of_the_guard_behind(case, tmp_path):
    """A callback's exception, a KeyboardInterrupt or a SystemExit leaving fit: the exception comes out
    unchanged, the profiler is free, Keras' functions are its own, the run ended with every output
    written (a window training left is `incomplete`), and the model trains on as without a guard."""
    model = make_model()
    own = keras_own(model)
    log_dir = tmp_path / "guard"
    raised = _raising_fit(model, case, log_dir)
    assert raised is _CASES[case][3]
    assert profiler_starts(model, tmp_path / "probe")
    assert left_of_the_guard(model, own) == []
    status = _CASES[case][-1]
    assert saved_statuses(log_dir)[str(PROFILED)] == status
    code, doc = report_of(log_dir)
    assert code in (0, 1), doc
    (run,) = doc["runs"]
    assert run["combined"]["status"] == status
    # Training on, unguarded: bit for bit as after the same failed fit without a guard.
    _fit(model, [], epochs=1)
    reference = make_model()
    _raising_fit(reference, case, None)
    _fit(reference, [], epochs=1)
    for a, b in zip(state(model), state(reference), strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_exception_in_evaluate_or_predict_puts_keras_function_back(tmp_path):
    """evaluate and predict with a guard, each stopped by a callback's exception: functions back, calls published."""
    x, y, _ = data()
    model = make_model()
    own = keras_own(model)
    guard = _guard(tmp_path / "guard")
    with pytest.raises(RuntimeError, match="in evaluate"):
        model.evaluate(
            x,
            y,
            batch_size=BATCH,
            callbacks=[hooks(("on_test_batch_end", 2, RuntimeError("in evaluate"))), guard],
            verbose=0,
        )
    resync(model)
    with pytest.raises(RuntimeError, match="in predict"):
        model.predict(
            x,
            batch_size=BATCH,
            callbacks=[hooks(("on_predict_batch_end", 1, RuntimeError("in predict"))), guard],
            verbose=0,
        )
    resync(model)
    assert left_of_the_guard(model, own) == []
    # Each call is published with the steps it saw before the exception.
    assert [(c.function, c.signatures.steps) for c in guard.calls] == [("test", 3), ("predict", 2)]
    # Another evaluate with the same guard runs as usual.
    model.evaluate(x, y, batch_size=BATCH, callbacks=[guard], verbose=0)
    assert [c.signatures.steps for c in guard.calls] == [3, 2, STEPS]


def test_a_real_sigint_in_the_profilers_stop_is_raised_after_it_and_the_window_kept(
    tmp_path, monkeypatch, python_sigint
):
    """Ctrl-C while the guard stops its profiler (a real SIGINT the backend sends itself from inside
    its stop): the stop and the trace's export finish, then KeyboardInterrupt comes out of fit; the
    window is measured, the run file and `report` have it, and nothing of the guard is left."""
    model = make_model()
    own = keras_own(model)
    sent = sigint_inside(monkeypatch, model)
    guard = _guard(tmp_path / "guard")
    with pytest.raises(KeyboardInterrupt) as raised:
        _fit(model, [guard])
    assert sent == [True]
    # Raised where the guard's gate passed the held signal on, once its stop had finished.
    assert "_deliver" in [frame.name for frame in raised.traceback]
    monkeypatch.undo()
    assert profiler_starts(model, tmp_path / "probe")
    assert left_of_the_guard(model, own) == []
    report = guard.reports[PROFILED]
    assert (report.status, report.steps_profiled) == ("ok", STEPS)
    assert saved_statuses(tmp_path / "guard") == {str(PROFILED): "ok"}
    code, doc = report_of(tmp_path / "guard")
    assert code == 0 and [run["combined"]["status"] for run in doc["runs"]] == ["ok"]


def test_a_full_disk_costs_one_warning_per_failure_and_leaves_the_profiler_free(tmp_path):
    """A log dir on a full tmpfs, every epoch profiled: each output that fails warns once in the run
    (not each epoch), in words naming the output, the cost and the fix; each epoch's report says why;
    the backend's profiler is free after each failed export (JAX would refuse every later start);
    no half-written file is left; and a guard writing elsewhere next profiles as usual."""
    model = make_model()
    own = keras_own(model)
    with full_disk(tmp_path / "full") as full:
        guard = XlaGuardCallback(log_dir=full, profile_every=1, skip_steps=0, verbose=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _fit(model, [guard])
        messages = [str(w.message) for w in caught if issubclass(w.category, XlaGuardWarning)]
        left = sorted(p.name for p in full.iterdir() if p.stat().st_size > 0 and p.name != "filler")
    assert len(messages) == 3, messages
    trace, board, run_file = (
        next(m for m in messages if needle in m)
        for needle in ("epoch 0 is not measured", "TensorBoard summaries", "the run file")
    )
    assert "writing the trace failed" in trace and "No space left on device" in trace
    fix = f"To fix: make {str(full)!r} a writable local directory with free space, or pass another log_dir."
    assert all(m.endswith(fix) for m in (trace, board, run_file)), messages
    assert all("step_begin" not in m and "write_epoch" not in m for m in messages)
    assert [r.status for r in guard.reports.values()] == ["failed"] * EPOCHS
    assert all(r.reason.startswith("writing the trace failed: ") for r in guard.reports.values())
    assert left == []
    assert profiler_starts(model, tmp_path / "probe")
    assert left_of_the_guard(model, own) == []
    after = _guard(tmp_path / "writable")
    _fit(model, [after], epochs=PROFILED + 1)
    assert after.reports[PROFILED].status == "ok"


def test_a_budget_counts_every_compilation_of_a_fit_an_exception_ended(tmp_path):
    """Inside max_compilations, a guarded fit that a callback's exception ends at its first epoch's end,
    then another fit with the same guard: each compilation counted once, with its step and signature.

    On JAX a compilation waits for its step's signature until the epoch ends; the epoch never ended,
    so the one at the epoch's last step was dropped (3 counted where 4 compiled).
    """
    import keras
    from _fit_helpers import _seq_batches, _seq_model

    from keras_xla_guard import max_compilations

    class Batches(keras.utils.PyDataset):
        def __init__(self, lengths: tuple[int, ...]) -> None:
            super().__init__()
            self.batches = _seq_batches(lengths)

        def __len__(self) -> int:
            return len(self.batches)

        def __getitem__(self, index: int) -> Any:
            return self.batches[index]

    model = _seq_model(True)
    guard = XlaGuardCallback(log_dir=tmp_path, profile_epochs=(), verbose=0)
    with max_compilations(None) as budget:
        with pytest.raises(RuntimeError, match="user callback failed"):
            model.fit(
                Batches((5, 7)),
                epochs=2,
                shuffle=False,
                verbose=0,
                callbacks=[hooks(("on_epoch_end", 0, RuntimeError("user callback failed"))), guard],
            )
        model.fit(Batches((5, 9, 11, 9)), epochs=1, shuffle=False, verbose=0, callbacks=[guard])
    # Each of the 4 new lengths is one compilation with its signature (Keras 3.10 on JAX 0.6 adds
    # state-placement ones, counted too, with none).
    caused = [c for c in budget.compilations if c.signature is not None]
    assert len(caused) == 4 and budget.count == len(budget.compilations) and budget.unknown is None
    assert [(c.function, c.epoch, c.step, c.signature.shapes[0]) for c in caused] == [
        ("train", 0, 0, (8, 5)),
        ("train", 0, 1, (8, 7)),
        ("train", 0, 1, (8, 9)),
        ("train", 0, 2, (8, 11)),
    ]
