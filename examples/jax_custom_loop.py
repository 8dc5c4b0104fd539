"""A JAX custom loop under `XlaGuard`: a `jax.jit` step fed a short last batch and a Python float.

Needs JAX only (no Keras, no TensorFlow); docs/jax.md shows what it prints:

    python examples/jax_custom_loop.py [LOG_DIR]
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from keras_xla_guard import XlaGuard


@jax.jit
def train_step(params, batch, lr):
    def loss(p):
        return jnp.mean((batch["x"] @ p["w"] + p["b"] - batch["y"]) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)


def main(log_dir: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 8)).astype("float32")
    y = x[:, :1] * 0.5
    params = {"w": jnp.zeros((8, 1)), "b": jnp.zeros((1,))}
    with XlaGuard(log_dir=log_dir, profile_epochs=(1,), verbose=1) as guard:
        step = guard.watch(train_step)
        for epoch in range(3):
            # Epoch 0 passes the rate as a Python float, later epochs as np.float32:
            # JAX keys the first as weakly typed, so each is a program of its own.
            lr = 0.1 if epoch == 0 else np.float32(0.1)
            with guard.epoch(epoch):
                for start in range(0, 100, 32):  # batches of 32, 32, 32 and 4
                    batch = {"x": x[start : start + 32], "y": y[start : start + 32]}
                    params = step(params, batch, lr)
    for watched in guard.watched:
        print(f"{watched.name}: {watched.compilations} compilations, {watched.executables} programs held")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "logs/xla_guard")
