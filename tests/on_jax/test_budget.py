"""Compilation budgets on KERAS_BACKEND=jax: they count what jax.monitoring saw JAX compile, each with its reason."""

from __future__ import annotations

import pytest
from _jax_helpers import BATCH, make_data, make_model, monitoring_oracle

pytestmark = pytest.mark.slow

# Keras' step programs: the compilations a budget counts (the small eager ones are not steps).
STEPS = ("jit(train_step)", "jit(test_step)", "jit(predict_step)")
# The new input signatures of `_calls` by construction, (function, epoch, step, signature):
# fit: 80 training examples in batches of 32, 32, 16 and one validation batch of 20;
# evaluate: 50 examples in 32 and 18; predict: 40 in 32 and 8.
CAUSED = {
    ("train", 0, 0, "x: float32[32,16], y: float32[32,1]"),
    ("train", 0, 2, "x: float32[16,16], y: float32[16,1]"),
    ("test", 0, 0, "x: float32[20,16], y: float32[20,1]"),
    ("test", None, 0, "x: float32[32,16], y: float32[32,1]"),
    ("test", None, 1, "x: float32[18,16], y: float32[18,1]"),
    ("predict", None, 0, "x: float32[32,16]"),
    ("predict", None, 1, "x: float32[8,16]"),
}


def _calls(model, epochs: int = 3) -> None:
    """A fit with validation, an evaluate and a predict of the same model."""
    x, y = make_data()
    model.fit(x, y, batch_size=BATCH, epochs=epochs, validation_split=0.2, verbose=0, shuffle=False)
    model.evaluate(x[:50], y[:50], batch_size=BATCH, verbose=0)
    model.predict(x[:40], batch_size=BATCH, verbose=0)


def _steps_compiled(oracle, start: int = 0) -> int:
    return sum(name in STEPS for name in oracle.compiles[start:])


@pytest.fixture(scope="module")
def counted():
    """`_calls` inside a counting budget, with the test's own jax.monitoring listener beside it."""
    import keras_xla_guard

    model = make_model()
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with keras_xla_guard.max_compilations(None) as budget:
            _calls(model)
        compiled = list(oracle.compiles[start:])
    return budget, compiled


def test_the_count_is_jax_monitorings_own(counted):
    """The budget counts exactly the step programs an independent jax.monitoring listener saw compile."""
    budget, compiled = counted
    assert budget.unknown is None
    assert budget.count == sum(name in STEPS for name in compiled) >= len(CAUSED)
    assert all(c.measured for c in budget.compilations)
    assert [f"jit({c.program})" for c in budget.compilations if c.function == "predict"] == [
        n for n in compiled if n == "jit(predict_step)"
    ]


def test_each_new_signature_is_paired_with_its_steps_compilation(counted):
    """Every new input signature by construction is one counted compilation, at its function, epoch and step."""
    budget, _ = counted
    caused = [
        (c.function, c.epoch, c.step, str(c.signature)) for c in budget.compilations if c.change is not None
    ]
    assert len(caused) == len(CAUSED) and set(caused) == CAUSED
    assert {c.program for c in budget.compilations} <= {"train_step", "test_step", "predict_step"}


def test_compilations_without_a_new_signature_are_listed_with_a_hedged_reason(counted):
    """Compilations JAX made with no new signature (Keras 3.10 on JAX 0.6 places the state anew) say so."""
    budget, compiled = counted
    bare = [c for c in budget.compilations if c.change is None]
    assert len(bare) == sum(name in STEPS for name in compiled) - len(CAUSED)
    for compilation in bare:
        assert compilation.signature is None and compilation.step is not None
        assert compilation.note.startswith("why (not certain): no new input signature at this step")
        assert "jax_explain_cache_misses" in compilation.note


def test_over_budget_the_block_raises_listing_function_step_signature_and_fix():
    """max_compilations(2) over the fit: RecompilationLimitError on exit, as many as JAX compiled, each named."""
    import keras_xla_guard
    from keras_xla_guard import RecompilationLimitError

    model = make_model()
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with pytest.raises(RecompilationLimitError) as info:
            with keras_xla_guard.max_compilations(2):
                _calls(model, epochs=2)
        compiled = _steps_compiled(oracle, start)
    message = str(info.value)
    assert (
        f"{compiled} XLA compilation(s) inside max_compilations(2), {compiled - 2} more than it allows"
        in message
    )
    assert "train function, epoch 0, step 0: x: float32[32,16], y: float32[32,1]" in message
    assert "train function, epoch 0, step 2: x: float32[16,16], y: float32[16,1]" in message
    assert "test function, epoch 0, step 0: x: float32[20,16], y: float32[20,1]" in message
    assert "predict function, step 1: x: float32[8,16]" in message
    assert "fix: short last batch" in message
    assert f"  {compiled}. " in message and f"  {compiled + 1}. " not in message
    assert message.endswith("where one came; docs/budgets.md.)")


def test_within_budget_the_block_passes_with_jaxs_count():
    """A budget at least JAX's count passes; its count is still the listener's."""
    import keras_xla_guard

    model = make_model()
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with keras_xla_guard.max_compilations(20) as budget:
            _calls(model, epochs=1)
        compiled = _steps_compiled(oracle, start)
    assert not budget.exceeded and budget.count == compiled >= len(CAUSED)


def test_a_model_fitted_before_the_block_is_counted_for_certain():
    """Unlike signatures, JAX's own count is sure: a second fit counts what JAX compiled again, no unknown."""
    import keras_xla_guard

    model = make_model()
    x, y = make_data()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with keras_xla_guard.max_compilations(None) as budget:
            model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False)
        compiled = _steps_compiled(oracle, start)
    assert budget.unknown is None
    assert budget.count == compiled
    assert all(c.uncertain is None and c.measured for c in budget.compilations)


def test_fail_fast_raises_in_the_epoch_of_the_compilation_over_the_limit():
    """max_compilations(1, fail_fast=True): the fit stops in epoch 0, once the second compilation is counted."""
    import keras_xla_guard
    from keras_xla_guard import RecompilationLimitError

    model = make_model()
    x, y = make_data()
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with pytest.raises(RecompilationLimitError) as info:
            with keras_xla_guard.max_compilations(1, fail_fast=True) as budget:
                model.fit(x, y, batch_size=BATCH, epochs=3, validation_split=0.2, verbose=0, shuffle=False)
        compiled = _steps_compiled(oracle, start)
    message = str(info.value)
    assert "XLA compilation 2 inside max_compilations(1) goes over it (fail_fast=True)" in message
    # Counted once the step's batch is read: at the next step, or at the validation's end for the
    # epoch's last train step (whose batch the guard reads at the epoch's end), so JAX may be one ahead.
    assert len(budget.compilations) == 2 and compiled in (2, 3)
    assert all(c.epoch == 0 for c in budget.compilations)
