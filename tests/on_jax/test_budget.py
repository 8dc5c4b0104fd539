"""Compilation budgets on KERAS_BACKEND=jax: they count what jax.monitoring saw JAX compile, each with its reason."""

from __future__ import annotations

import re

import pytest
from _helpers import run_python
from _jax_helpers import BATCH, fit_evaluate_predict, make_data, make_model, monitoring_oracle

pytestmark = pytest.mark.slow

# Keras' step programs: the compilations a budget counts (the small eager ones are not steps).
STEPS = ("jit(train_step)", "jit(test_step)", "jit(predict_step)")
# The new input signatures of `fit_evaluate_predict` by construction, (function, epoch, step, signature):
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


def _steps_compiled(oracle, start: int = 0) -> int:
    return sum(name in STEPS for name in oracle.compiles[start:])


@pytest.fixture(scope="module")
def counted():
    """`fit_evaluate_predict` inside a counting budget, with the test's own jax.monitoring listener beside it."""
    import keras_xla_guard

    model = make_model()
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with keras_xla_guard.max_compilations(None) as budget:
            fit_evaluate_predict(model)
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
                fit_evaluate_predict(model, epochs=2)
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
            fit_evaluate_predict(model, epochs=1)
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


def test_train_on_batch_compiles_uncounted_and_the_block_says_so():
    """train_on_batch on JAX compiles the step with no guard to see it: the count is unknown, not 0."""
    import keras_xla_guard

    model = make_model()
    x, y = make_data()
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with pytest.raises(keras_xla_guard.CompilationsUnknownError, match=r"train_on_batch\(\) was called"):
            with keras_xla_guard.max_compilations(None) as budget:
                model.train_on_batch(x[:BATCH], y[:BATCH])
        compiled = _steps_compiled(oracle, start)
    assert compiled == 1 and budget.count is None


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
    # epoch's last train step (whose batch the guard reads at the epoch's end), so JAX may be one
    # ahead when the error is raised; the fit's exit counts that one too, so the list is what JAX
    # compiled inside the block (it used to stop at 2 where JAX had compiled 3).
    assert len(budget.compilations) == compiled and compiled in (2, 3)
    assert all(c.epoch == 0 for c in budget.compilations)


_DUMP_ORACLE = """
import json, os, sys
from collections import Counter
sys.path.insert(0, "tests")
import keras
import keras_xla_guard
from _helpers import run_python
from _jax_helpers import BATCH, fit_evaluate_predict, make_data, make_model

dump = os.environ["XLA_FLAGS"].split("=", 1)[1]
os.makedirs(dump, exist_ok=True)
SUFFIX = ".before_optimizations.txt"


def dumped():
    # module_0012.jit_train_step.before_optimizations.txt: one file per module XLA compiled.
    return Counter(n.split(".", 1)[1][: -len(SUFFIX)] for n in os.listdir(dump) if n.endswith(SUFFIX))


def steps(counts):
    return {k: v for k, v in counts.items() if k in ("jit_train_step", "jit_test_step", "jit_predict_step")}


out = {}
model = make_model()
for block, call in (("first", lambda: fit_evaluate_predict(model)), ("again", lambda: fit_evaluate_predict(model, 2))):
    before = dumped()
    with keras_xla_guard.max_compilations(None) as budget:
        call()
    out[block] = {
        "counted": dict(Counter("jit_" + c.program for c in budget.compilations)),
        "dumped": steps(dumped() - before),
    }

x, y = make_data()
window = []
mark = keras.callbacks.LambdaCallback(
    on_train_begin=lambda logs=None: window.append(dumped()),
    on_train_end=lambda logs=None: window.append(dumped()),
)
guard = keras_xla_guard.XlaGuardCallback(log_dir=sys.argv[1], verbose=0)
make_model().fit(x, y, batch_size=BATCH, epochs=3, validation_split=0.2, verbose=0, shuffle=False,
                 callbacks=[mark, guard])
rows = [r for c in guard.engine.compilations.values() for r in c.rows]
out["callback"] = {"counted": dict(Counter("jit_" + r.program for r in rows)), "dumped": dict(window[1] - window[0])}
print(json.dumps(out))
"""


def test_the_counts_equal_the_modules_xla_dumped(tmp_path):
    """An oracle apart from jax.monitoring: per program, the budget and the callback count the modules XLA dumped.

    In a fresh process with `--xla_dump_to` (XLA writes one module per
    compilation; JAX's cache hits write none): a budget over
    `fit_evaluate_predict`, a second budget over the same model's calls
    again, and a guarded fit of a new model, each program's count against
    the `jit_<program>` modules dumped meanwhile. An event counted that XLA
    did not compile (a cache hit, a second listener) fails it, as does one
    missed.
    """
    dump = tmp_path / "xla_dump"
    out = run_python(
        _DUMP_ORACLE.replace("sys.argv[1]", repr(str(tmp_path / "xla_guard"))),
        env={"XLA_FLAGS": f"--xla_dump_to={dump}", "KERAS_BACKEND": "jax"},
    )
    first, again, callback = out["first"], out["again"], out["callback"]
    assert first["counted"] == first["dumped"]
    assert sum(first["dumped"].values()) >= len(CAUSED)
    assert first["dumped"]["jit_predict_step"] == 2
    assert again["counted"] == again["dumped"]
    assert callback["counted"] == callback["dumped"]
    assert callback["dumped"]["jit_train_step"] >= 2 and callback["dumped"]["jit_test_step"] == 1


_CACHE_ORACLE = """
import json, os, sys, warnings
sys.path.insert(0, "tests")
import keras_xla_guard
from _jax_helpers import BATCH, fit_evaluate_predict, make_data, make_model

dump = os.environ["XLA_FLAGS"].split("=", 1)[1]
os.makedirs(dump, exist_ok=True)
model = make_model()
try:
    with keras_xla_guard.max_compilations(2) as budget:
        fit_evaluate_predict(model)
except keras_xla_guard.RecompilationLimitError as error:
    message = str(error)
steps = ("jit_train_step.", "jit_test_step.", "jit_predict_step.")
dumped = sum(n.endswith(".before_optimizations.txt") and n.split(".", 1)[1].startswith(steps)
             for n in os.listdir(dump))
# The callback's per-epoch limit over a model with the same programs: the cache holds them now.
x, y = make_data()
guard = keras_xla_guard.XlaGuardCallback(profile_epochs=(), write_summaries=False, verbose=0,
                                         max_compilations=1)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    make_model().fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[guard])
print(json.dumps({
    "counted": [[c.program, c.cache_hit] for c in budget.compilations],
    "dumped": dumped,
    "message": message,
    "epoch_limit": [str(w.message) for w in caught if "more than max_compilations=1" in str(w.message)],
}))
"""


def test_programs_loaded_from_jaxs_persistent_cache_count_and_say_so(tmp_path):
    """A warm persistent cache: XLA dumps no step module, the budget counts as many as cold, each marked loaded.

    Two fresh processes share `JAX_COMPILATION_CACHE_DIR` (every program
    cached): the first compiles (no cache hit, as many counted as dumped),
    the second loads them all. The budget's verdict is the same either way.
    The callback's per-epoch limit message counts the loaded ones apart.
    """
    runs = []
    for name in ("cold", "warm"):
        runs.append(
            run_python(
                _CACHE_ORACLE,
                env={
                    "XLA_FLAGS": f"--xla_dump_to={tmp_path / name}",
                    "KERAS_BACKEND": "jax",
                    "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
                    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                },
            )
        )
    cold, warm = runs
    assert [hit for _, hit in cold["counted"]] == [False] * cold["dumped"]
    assert cold["dumped"] >= len(CAUSED)
    assert warm["dumped"] == 0
    assert warm["counted"] == [[program, True] for program, _ in cold["counted"]]
    count = len(warm["counted"])
    assert f"{count} XLA compilation(s) inside max_compilations(2), {count - 2} more" in warm["message"]
    assert warm["message"].count("(loaded from JAX's persistent compilation cache, not compiled)") == count
    assert (
        f"; {count} of them JAX loaded from its persistent compilation cache (they count" in warm["message"]
    )
    assert "persistent" not in cold["message"]
    # The guard's own per-epoch limit says it too, with the count at the step it went over 1.
    # The first process's budget cached its programs, so the guard's fit there loads some (its
    # batches of 32; on Keras 3.10 / JAX 0.6 the limit fires at the state-placement recompile of
    # those, before the batch of 4 compiles); the second process loads every one.
    loaded = []
    for run in runs:
        (limit,) = run["epoch_limit"]
        caused = re.search(
            r"epoch 0 caused (\d+) XLA compilations \(of the train step, counted as they happened; "
            r"(\d+) of them loaded from the persistent compilation cache, not compiled\)",
            limit,
        )
        assert caused is not None, limit
        loaded.append((int(caused[1]), int(caused[2])))
    (cold_caused, cold_loaded), (warm_caused, warm_loaded) = loaded
    assert cold_caused == warm_caused == 2
    assert 1 <= cold_loaded <= 2 and warm_loaded == 2


@pytest.mark.parametrize("steps_per_execution", [2, 3])
def test_with_steps_per_execution_each_compilation_has_its_own_step_and_signature(
    steps_per_execution, tmp_path
):
    """A budgeted, guarded fit whose calls run 2 or 3 steps: the 5 compilations of the sequence model
    (new lengths at steps 0, 1, 2, 4, 6 by construction) are listed at those steps with their signatures,
    not at their call's first step, in the budget and in the guard's compile table (which gave the
    compilation at step 1 the signature of step 0 before), and jax.monitoring saw exactly 5 compile."""
    import keras
    from _fit_helpers import LENGTHS, _seq_batches, _seq_model

    import keras_xla_guard

    class Batches(keras.utils.PyDataset):
        def __init__(self) -> None:
            super().__init__()
            self.batches = _seq_batches(LENGTHS)

        def __len__(self) -> int:
            return len(self.batches)

        def __getitem__(self, index: int):
            return self.batches[index]

    model = _seq_model(True, steps_per_execution=steps_per_execution)
    guard = keras_xla_guard.XlaGuardCallback(log_dir=tmp_path, profile_epochs=(), verbose=0)
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with keras_xla_guard.max_compilations(None) as budget:
            model.fit(Batches(), epochs=2, shuffle=False, verbose=0, callbacks=[guard])
        compiled = oracle.compiles[start:].count("jit(train_step)")
    expected = [
        ("train", 0, step, f"x['tokens']: int32[8,{n}], y: float32[8,1]")
        for step, n in ((0, 5), (1, 7), (2, 9), (4, 11), (6, 13))
    ]
    # Keras 3.10 on JAX 0.6 adds state-placement compilations with no new shape: listed without one.
    assert budget.unknown is None and budget.count == compiled >= 5
    caused = [c for c in budget.compilations if c.signature is not None]
    assert [(c.function, c.epoch, c.step, str(c.signature)) for c in caused] == expected
    assert all(c.note is None for c in caused)
    assert all(c.note for c in budget.compilations if c.signature is None)
    rows = [r for r in guard.compilations[0].rows if r.function == "train" and r.signature is not None]
    assert [(r.function, r.epoch, r.step, r.signature) for r in rows] == expected
    assert [r for r in guard.compilations[1].rows if r.function == "train" and r.signature is not None] == []
