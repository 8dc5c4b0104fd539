"""`XlaGuard` around JAX custom loops (`jax.jit`, Keras `stateless_call`), in a venv without TensorFlow.

Every count is checked against the test's own `jax.monitoring` listener
(`_jax_helpers.monitoring_oracle`), and every explanation against the one
change each case makes by construction.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _jax_helpers import monitoring_oracle

import keras_xla_guard
from keras_xla_guard import RecompilationLimitError, XlaGuard, XlaGuardWarning

pytest_plugins = ["pytester"]


def _rows(guard: XlaGuard, function: str = "train") -> list[Any]:
    return [row for c in guard.compilations.values() for row in c.rows if row.function == function]


def _messages(guard: XlaGuard) -> list[str]:
    return [x.message for s in guard.signatures.values() for x in s.explanations]


def _step() -> Any:
    import jax
    import jax.numpy as jnp

    @jax.jit
    def train_step(w, x):
        return w - 0.1 * jnp.mean(x @ w)

    return train_step


def test_tensorflow_is_not_installed_here():
    """The premise of every test below: the JAX path runs where TensorFlow cannot be imported."""
    assert importlib.util.find_spec("tensorflow") is None


def test_a_jit_loop_over_three_shapes_counts_jaxs_compilations_with_their_signatures(tmp_path):
    """3 batch sizes: 3 train compilations at steps 0-2 of epoch 0, none later, as jax.monitoring counts."""
    import jax.numpy as jnp

    step_fn = _step()
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
            step = guard.watch(step_fn)
            w = jnp.ones((8,))
            for epoch in range(2):
                with guard.epoch(epoch):
                    for n in (4, 8, 16):
                        w = step(w, np.ones((n, 8), np.float32))
        compiled = [name for name in oracle.compiles[start:] if name == "jit(train_step)"]
    rows = _rows(guard)
    assert len(rows) == len(compiled) == 3
    assert [(r.epoch, r.step, r.program) for r in rows] == [
        (0, 0, "train_step"),
        (0, 1, "train_step"),
        (0, 2, "train_step"),
    ]
    assert [r.signature for r in rows] == [f"w: float32[8], x: float32[{n},8]" for n in (4, 8, 16)]
    assert all(r.compile_s > 0 and r.trace_s > 0 and r.lower_s is not None for r in rows)
    assert guard.compilations[1].count("train") == 0
    assert "input x dim 0 varied across 3 values (4, 8, 16)" in _messages(guard)
    assert guard.watched[0].calls == 6 and guard.watched[0].compilations == 3
    assert guard.watched[0].executables == 3 and guard.watched[0].reached_xla is True


def test_a_static_arguments_new_value_is_named_with_its_fix(tmp_path):
    import jax

    @functools.partial(jax.jit, static_argnames=("mode",))
    def scaled(w, x, mode):
        return w * (2.0 if mode == "a" else 3.0) + x.sum()

    with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
        step = guard.watch(scaled)
        w = np.ones(4, np.float32)
        with guard.epoch(0):
            for mode in ("a", "b", "a"):
                w = step(w, np.ones(3, np.float32), mode=mode)
    rows = _rows(guard)
    assert [r.signature for r in rows] == [f"w: float32[4], x: float32[3], mode='{m}'" for m in "ab"]
    assert any(
        m.startswith(
            "new signature at step 1: static argument mode: 'a' -> 'b' (each value of a static argument"
        )
        for m in _messages(guard)
    )


def test_a_pytree_key_added_is_named(tmp_path):
    import jax

    @jax.jit
    def update(params, x):
        return jax.tree_util.tree_map(lambda p: p - x.sum(), params)

    with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
        step = guard.watch(update)
        params = {"a": np.ones(3, np.float32)}
        for epoch in range(2):
            with guard.epoch(epoch):
                params = step(params, np.ones(2, np.float32))
            params = {**params, "b": np.ones(2, np.float32)}
    rows = _rows(guard)
    assert [(r.epoch, r.signature) for r in rows] == [
        (0, "params['a']: float32[3], x: float32[2]"),
        (1, "params['a']: float32[3], params['b']: float32[2], x: float32[2]"),
    ]
    assert any(
        "input(s) added to the structure: params['b'] (pass the same keys" in m for m in _messages(guard)
    )


def test_a_python_float_then_a_numpy_float32_is_a_weak_type_change(tmp_path):
    """JAX keys a Python scalar as weakly typed: 0.1 and np.float32(0.1) are two programs."""
    import jax

    step_fn = jax.jit(lambda w, lr: w - lr * w)
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
            step = guard.watch(step_fn)
            w = np.ones(4, np.float32)
            with guard.epoch(0):
                w = step(w, 0.1)
                w = step(w, np.float32(0.1))
                w = step(w, 0.2)
        compiled = len([n for n in oracle.compiles[start:] if n == "jit(<lambda>)"])
    rows = _rows(guard)
    assert len(rows) == compiled == 2
    assert [r.signature for r in rows] == [
        "w: float32[4], lr: weak float32[]",
        "w: float32[4], lr: float32[]",
    ]
    assert any(
        "lr: dtype weak float32 -> float32 (weak type: a Python scalar is weakly typed" in m
        for m in _messages(guard)
    )


def _closure(lr: float) -> Any:
    import jax.numpy as jnp

    def make_step(w, x):
        return w - lr * jnp.mean(x @ w)

    return make_step


def test_a_step_recreated_every_epoch_compiles_every_epoch_and_says_why(tmp_path):
    """The closure stand-in for a Flax NNX module or optimizer rebuilt each epoch (google/flax#5548)."""
    import jax
    import jax.numpy as jnp

    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
            w = jnp.ones((8,))
            for epoch in range(3):
                # A new function object of the same code every epoch, as a rebuilt closure is.
                make_step = _closure(0.1)
                step = guard.watch(jax.jit(make_step))
                with guard.epoch(epoch):
                    for _ in range(2):
                        w = step(w, np.ones((4, 8), np.float32))
        compiled = len([n for n in oracle.compiles[start:] if n == "jit(make_step)"])
    assert [c.count("train") for c in guard.compilations.values()] == [1, 1, 1]
    assert compiled == 3
    found = [m for m in _messages(guard) if "new function object" in m]
    assert len(found) == 2
    assert "(_closure.<locals>.make_step object 1 -> _closure.<locals>.make_step object 2)" in found[0]
    assert "create the jitted step once, outside the loop" in found[0]


def test_growing_executables_are_warned_once(tmp_path):
    """A new batch size every epoch: the jit cache grows at each epoch's end; one warning after three."""
    import jax.numpy as jnp

    step_fn = _step()
    with pytest.warns(XlaGuardWarning) as caught:
        with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
            step = guard.watch(step_fn)
            w = jnp.ones((8,))
            for epoch in range(5):
                with guard.epoch(epoch):
                    w = step(w, np.ones((epoch + 1, 8), np.float32))
    growth = [str(w.message) for w in caught if "compiled programs after epoch" in str(w.message)]
    assert growth == [
        "keras-xla-guard: train_step holds 4 compiled programs after epoch 3, more at each of the last 3 "
        "epochs' ends (1, 2, 3, 4): every new input signature or static argument keeps one more executable "
        "alive, and their memory grows until the step is deleted. guard.compilations names the signatures; "
        "pad them to a few sizes or make the varying argument non-static."
    ]
    assert guard.watched[0].executables == 5


def test_a_step_that_never_reaches_xla_is_reported_as_such(tmp_path):
    def numpy_step(w, x):
        return w - 0.1 * (x @ w).mean()

    with pytest.warns(XlaGuardWarning, match="the watched step numpy_step never reached XLA: its 2 call"):
        with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0, backend="jax") as guard:
            step = guard.watch(numpy_step)
            w = np.ones(8, np.float32)
            for epoch in range(2):
                with guard.epoch(epoch):
                    w = step(w, np.ones((4, 8), np.float32))
    assert guard.watched[0].reached_xla is False
    assert guard.watched[0].compilations == 0 and guard.watched[0].executables is None


def test_bad_arguments_name_the_value(tmp_path):
    with pytest.raises(ValueError, match=r"Received: fn=3"):
        XlaGuard(log_dir=tmp_path).watch(3)
    with pytest.raises(ValueError, match=r"Received: backend='torch'"):
        XlaGuard(log_dir=tmp_path, backend="torch")


def test_a_python_step_calling_jitted_code_is_on_jax_and_counted(tmp_path):
    """Not itself jitted: the backend is the one framework imported, and its inner program counts."""
    from keras_xla_guard import backend

    inner = _step()

    def python_step(w, x):
        return inner(w, x)

    assert backend.for_step(python_step).name == "jax"
    assert backend.for_step(inner).name == "jax"
    with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
        step = guard.watch(python_step)
        with guard.epoch(0):
            step(np.ones(8, np.float32), np.ones((5, 8), np.float32))
    assert [(r.program, r.signature) for r in _rows(guard)] == [
        ("train_step", "w: float32[8], x: float32[5,8]")
    ]
    assert guard.watched[0].reached_xla is True and guard.watched[0].executables is None


def test_a_budget_counts_a_watched_jax_loop_once_per_compilation(tmp_path):
    import jax.numpy as jnp

    step_fn = _step()
    with pytest.raises(RecompilationLimitError) as info:
        with keras_xla_guard.max_compilations(1) as budget:
            with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
                step = guard.watch(step_fn)
                w = jnp.ones((8,))
                for epoch in range(2):
                    with guard.epoch(epoch):
                        for n in (4, 8, 4):
                            w = step(w, np.ones((n, 8), np.float32))
    assert budget.count == 2
    message = str(info.value)
    assert "2 XLA compilation(s) inside max_compilations(1), 1 more than it allows" in message
    assert "2. train function, epoch 0, step 1: w: float32[8], x: float32[8,8]" in message
    assert "  3. " not in message


def test_on_violation_raise_stops_the_loop_at_the_epochs_limit(tmp_path):
    import jax.numpy as jnp

    guard = XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0, max_compilations=1, on_violation="raise")
    step = guard.watch(_step())
    w = jnp.ones((8,))
    with pytest.raises(RecompilationLimitError, match="epoch 0 caused 2 XLA compilations"):
        with guard:
            with guard.epoch(0):
                for n in (4, 8, 16):
                    w = step(w, np.ones((n, 8), np.float32))


def _keras_parts() -> tuple[Any, Any, Any]:
    """A small Keras model, its optimizer and the jitted stateless train step (Keras' JAX guide)."""
    import jax
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.SGD(0.01)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.MeanSquaredError()

    def compute_loss(trainable, non_trainable, x, y):
        y_pred, non_trainable = model.stateless_call(trainable, non_trainable, x)
        return loss_fn(y, y_pred), non_trainable

    grad_fn = jax.value_and_grad(compute_loss, has_aux=True)

    @jax.jit
    def train_step(state, data):
        trainable, non_trainable, opt_vars = state
        x, y = data
        (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return loss, (trainable, non_trainable, opt_vars)

    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    )
    return train_step, state, model


def _keras_loop(guard: XlaGuard | None) -> list[np.ndarray]:
    train_step, state, _ = _keras_parts()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 8)).astype("float32")
    y = x[:, :1] * 0.5
    step = guard.watch(train_step) if guard is not None else train_step
    for epoch in range(2):
        with guard.epoch(epoch) if guard is not None else _nothing():
            for start in range(0, 40, 16):
                _, state = step(state, (x[start : start + 16], y[start : start + 16]))
    return [np.asarray(v) for v in state[0]]


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def test_a_keras_stateless_call_loop_is_counted_and_its_weights_are_bit_identical(tmp_path):
    """Batches 16, 16, 8: two train programs, as JAX counts; the same weights with and without the guard."""
    bare = _keras_loop(None)
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with XlaGuard(log_dir=tmp_path, profile_epochs=(1,), skip_steps=0, verbose=0) as guard:
            guarded = _keras_loop(guard)
        compiled = len([n for n in oracle.compiles[start:] if n == "jit(train_step)"])
    assert all(np.array_equal(a, b) for a, b in zip(bare, guarded, strict=True))
    rows = _rows(guard)
    assert len(rows) == compiled == 2
    assert [r.step for r in rows] == [0, 2]
    assert rows[1].signature.endswith("data[0]: float32[8,8], data[1]: float32[8,1]")
    assert any(m.startswith("short last batch: input data[0] dim 0 was 8") for m in _messages(guard))
    report = guard.reports[1]
    assert report.status == "ok" and report.backend == "jax"
    assert report.steps_profiled == len(report.steps) == 3
    assert "tensorflow" not in sys.modules


def test_a_profiled_window_writes_the_jax_report_and_its_trace(tmp_path):
    import jax.numpy as jnp

    step_fn = _step()
    with warnings.catch_warnings():
        warnings.simplefilter("error", XlaGuardWarning)
        with XlaGuard(log_dir=tmp_path, profile_epochs=(1,), verbose=0) as guard:
            step = guard.watch(step_fn)
            w = jnp.ones((8,))
            for epoch in range(2):
                with guard.epoch(epoch):
                    for _ in range(4):
                        w = step(w, np.ones((4, 8), np.float32))
    report = guard.reports[1]
    assert (report.status, report.backend, report.steps_profiled) == ("ok", "jax", len(report.steps))
    assert report.xla_executions == sum(s.launches for s in report.steps) >= report.steps_profiled
    assert all(Path(p).is_file() for p in report.trace_paths)


_PLUGIN_TESTS = """
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keras_xla_guard import XlaGuard


def _loop(tmp_path):
    step_fn = jax.jit(lambda w, x: w - jnp.mean(x @ w))
    with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
        step = guard.watch(step_fn)
        w = jnp.ones((8,))
        with guard.epoch(0):
            for n in (4, 8, 4, 16):
                w = step(w, np.ones((n, 8), np.float32))


@pytest.mark.max_compilations(3)
def test_within(tmp_path):
    _loop(tmp_path)


@pytest.mark.max_compilations(2)
def test_over(tmp_path):
    _loop(tmp_path)


def test_counts(xla_compilations, tmp_path):
    _loop(tmp_path)
    assert xla_compilations.count == 3
    assert [c.step for c in xla_compilations.compilations] == [0, 1, 3]
"""


def test_the_pytest_markers_budget_counts_a_watched_jax_loop(pytester, monkeypatch):
    """The plugin's marker and fixture on a `jax.jit` loop, Keras' backend unset (Keras cannot load here)."""
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    pytester.makepyfile(test_jax_loop=_PLUGIN_TESTS)
    result = pytester.runpytest_subprocess("-p", "keras_xla_guard.pytest_plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    text = result.stdout.str()
    assert "3 XLA compilation(s) inside max_compilations(2), 1 more than it allows" in text
    assert "3. train function, epoch 0, step 3: w: float32[8], x: float32[16,8]" in text


def test_the_examples_output_is_what_the_docs_show(tmp_path):
    """docs/jax.md's sample lines are lines examples/jax_custom_loop.py prints; timings aside."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(repo / "examples" / "jax_custom_loop.py"), str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"},
    )
    text = (repo / "docs" / "jax.md").read_text(encoding="utf-8")
    block = text.split("It prints, among the window's report (timings vary):", 1)[1].split("```\n", 2)[1]
    timing = re.compile(r"\d+\.\d+ s compiling")
    printed = [timing.sub("", line) for line in proc.stdout.splitlines()]
    for line in block.splitlines():
        assert timing.sub("", line) in printed, line


def test_the_ci_gate_reads_a_watched_loops_compilations_from_its_run_file(tmp_path, capsys):
    """`report --max-compilations` on a custom loop's log dir: JAX's count, every epoch, no profiling needed."""
    import jax.numpy as jnp

    from keras_xla_guard.cli import main

    step_fn = _step()
    with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
        step = guard.watch(step_fn)
        w = jnp.ones((8,))
        for epoch in range(2):
            with guard.epoch(epoch):
                w = step(w, np.ones((epoch + 3, 8), np.float32))
    assert main(["report", str(tmp_path), "--max-compilations", "2"]) == 0
    assert main(["report", str(tmp_path), "--max-compilations", "1"]) == 1
    out = capsys.readouterr().out
    assert "2 XLA compilations exceed --max-compilations 1 (counted: train 2 (every epoch" in out


def test_after_a_fail_fast_budget_stops_a_step_later_compilations_are_not_the_steps(tmp_path):
    """The step a fail_fast budget refuses leaves the thread outside any watched step."""
    import jax.numpy as jnp

    step_fn = _step()
    with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
        step = guard.watch(step_fn)
        w = jnp.ones((8,))
        with guard.epoch(0):
            with pytest.raises(RecompilationLimitError, match="goes over it"):
                with keras_xla_guard.max_compilations(1, fail_fast=True):
                    for n in (4, 8, 16):
                        w = step(w, np.ones((n, 8), np.float32))
            jnp.sin(jnp.ones((7, 3)))  # an eager program outside any watched call
    rows = guard.compilations[0].rows
    assert [r.program for r in rows if r.function == "train"] == ["train_step", "train_step"]
    eager = [r for r in rows if r.program != "train_step"]
    assert "sin" in {r.program for r in eager} and {r.function for r in eager} == {"other"}
