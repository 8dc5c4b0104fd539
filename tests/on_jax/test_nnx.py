"""`XlaGuard` around a Flax NNX loop (`nnx.jit`), and the pytree-structure rule it relies on.

Flax is installed in `.venv-jax` only (flax 0.12 needs jax >= 0.10, newer
than the oldest declared jax of the compat venv); the structure rule is
checked without Flax too, on a custom pytree node built as Flax's are.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
from _jax_helpers import monitoring_oracle

from keras_xla_guard import XlaGuard

_NO_FLAX = "Flax NNX is installed in .venv-jax only: flax 0.12 needs jax >= 0.10 (make test-jax runs these)"


def _messages(guard: XlaGuard) -> list[str]:
    return [x.message for s in guard.signatures.values() for x in s.explanations]


class _Optimizer:
    """A pytree node whose static aux data holds a function made anew with each object (as optax's are)."""

    def __init__(self, state: Any, update: Any = None) -> None:
        self.state = state
        self.update = update if update is not None else (lambda g: -0.1 * g)


_registered: list[bool] = []


def _register() -> None:
    import jax

    if _registered:
        return
    _registered.append(True)
    jax.tree_util.register_pytree_node(
        _Optimizer, lambda o: ((o.state,), o.update), lambda update, children: _Optimizer(children[0], update)
    )


def test_the_same_arrays_in_a_pytree_whose_static_part_is_new_are_named(tmp_path):
    """An optimizer-like node made anew each epoch: JAX compiles each time; the guard names the argument."""
    import jax

    _register()

    @jax.jit
    def step(w, opt, x):
        return jax.tree_util.tree_map(lambda a: a - x.sum(), w), opt

    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
            watched = guard.watch(step)
            w = np.ones(3, np.float32)
            for epoch in range(3):
                opt = _Optimizer(np.zeros(3, np.float32))
                with guard.epoch(epoch):
                    for _ in range(2):
                        w, opt = watched(w, opt, np.ones(2, np.float32))
        compiled = len([n for n in oracle.compiles[start:] if n == "jit(step)"])
    assert [c.count("train") for c in guard.compilations.values()] == [1, 1, 1] and compiled == 3
    found = [m for m in _messages(guard) if "another pytree structure" in m]
    assert found[0].startswith(
        "new signature at step 0: the same arrays in another pytree structure (opt structure 1 -> opt "
        "structure 2): its static parts differ"
    )


def _nnx_loop(tmp_path: Any, recreate: bool, epochs: int = 3) -> XlaGuard:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self, rngs: Any) -> None:
            self.l1 = nnx.Linear(8, 16, rngs=rngs)
            self.l2 = nnx.Linear(16, 1, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return self.l2(jax.nn.relu(self.l1(x)))

    @nnx.jit
    def train_step(model, optimizer, x, y):
        def loss_fn(m):
            return jnp.mean((m(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    def make() -> tuple[Any, Any]:
        model = MLP(nnx.Rngs(0))
        return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    x = np.ones((40, 8), np.float32)
    y = np.ones((40, 1), np.float32)
    with XlaGuard(log_dir=tmp_path, profile_epochs=(), verbose=0) as guard:
        step = guard.watch(train_step)
        model, optimizer = make()
        for epoch in range(epochs):
            if recreate:
                model, optimizer = make()
            with guard.epoch(epoch):
                for start in range(0, 40, 16):  # 16, 16, 8
                    step(model, optimizer, x[start : start + 16], y[start : start + 16])
    return guard


@pytest.mark.skipif(importlib.util.find_spec("flax") is None, reason=_NO_FLAX)
def test_an_nnx_loop_counts_jaxs_compilations_by_module_path(tmp_path):
    with monitoring_oracle().counting() as oracle:
        start = len(oracle.compiles)
        guard = _nnx_loop(tmp_path, recreate=False)
        compiled = len([n for n in oracle.compiles[start:] if "train_step" in n])
    rows = [r for c in guard.compilations.values() for r in c.rows if r.function == "train"]
    assert len(rows) == compiled == 2 and [(r.epoch, r.step) for r in rows] == [(0, 0), (0, 2)]
    assert rows[0].signature.startswith(
        "model.l1.bias.value: float32[16], model.l1.kernel.value: float32[8,16]"
    )
    assert "x: float32[8,8], y: float32[8,1]" in rows[1].signature
    assert guard.watched[0].executables == 2 and guard.watched[0].reached_xla is True


@pytest.mark.skipif(importlib.util.find_spec("flax") is None, reason=_NO_FLAX)
def test_an_nnx_optimizer_made_every_epoch_recompiles_and_piles_up_programs_warned(tmp_path):
    """google/flax#5548: model and optimizer rebuilt each epoch; the optimizer's structure is named."""
    from keras_xla_guard import XlaGuardWarning

    with pytest.warns(XlaGuardWarning, match="train_step holds 8 compiled programs after epoch 3"):
        guard = _nnx_loop(tmp_path, recreate=True, epochs=4)
    assert [c.count("train") for c in guard.compilations.values()] == [2, 2, 2, 2]
    assert guard.watched[0].executables == 8
    found = [m for m in _messages(guard) if "another pytree structure" in m]
    assert found and "(optimizer structure 1 -> optimizer structure 2)" in found[0]
    assert "create it once, outside the loop" in found[0]
