"""Cost of `XlaGuardCallback` on Keras' JAX backend, measured side by side.

Prints one JSON object: the median epoch time of `fit` with the guard
(unprofiled epochs: signature tracking of every batch, compile counting
through jax.monitoring, the batch hooks) over the median epoch time of the
same `fit` without it (`ratio`, goal <= 1.01), and the A/A control
(`aa_ratio`: a second unguarded arm over the first), how far two identical
arms land apart on this machine. Each arm fits its own model (compiled in a
warm-up epoch that is not timed) for `--epochs` epochs of `--batches`
batches; arms alternate in rotating order so drift affects all alike.

Usage: KERAS_BACKEND=jax python benchmarks/bench_jax_overhead.py [--rounds 7] [--batches 200] [--epochs 3]
       tiny smoke run: --rounds 1 --batches 4 --epochs 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
GOAL = 1.01


class _EpochClock:
    """Epoch wall times of one fit (Keras' callbacks bracket each epoch)."""

    def __init__(self) -> None:
        import keras

        self.times: list[float] = []
        clock = self

        class Clock(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                clock.started = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                clock.times.append(time.perf_counter() - clock.started)

        self.callback = Clock()
        self.started = 0.0


def _arm(guarded: bool, batches: int, epochs: int, root: str) -> list[float]:
    """Epoch times of one fit (the first, compiling epoch left out)."""
    import keras
    import numpy as np

    from keras_xla_guard import XlaGuardCallback

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    x = np.random.default_rng(0).standard_normal((batches * 32, 32)).astype("float32")
    clock = _EpochClock()
    callbacks = [clock.callback]
    if guarded:
        callbacks.append(XlaGuardCallback(log_dir=tempfile.mkdtemp(dir=root), profile_epochs=(), verbose=0))
    model.fit(x, x[:, :1], batch_size=32, epochs=epochs + 1, shuffle=False, callbacks=callbacks, verbose=0)
    return clock.times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    import jax
    import keras

    arms = {"bare": [], "guard": [], "bare_again": []}
    order = list(arms)
    with tempfile.TemporaryDirectory(prefix="bench_jax_") as root:
        for round_ in range(args.rounds):
            for name in order[round_ % 3 :] + order[: round_ % 3]:
                arms[name] += _arm(name == "guard", args.batches, args.epochs, root)
    median = {name: statistics.median(times) for name, times in arms.items()}
    print(
        json.dumps(
            {
                "benchmark": "bench_jax_overhead",
                "ratio": median["guard"] / median["bare"],
                "aa_ratio": median["bare_again"] / median["bare"],
                "goal": GOAL,
                "median_epoch_s": median,
                "added_us_per_step": (median["guard"] - median["bare"]) / args.batches * 1e6,
                "epochs_per_arm": len(arms["bare"]),
                "args": vars(args),
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "jax": jax.__version__,
                    "keras": keras.__version__,
                    "load_avg_1min": round(os.getloadavg()[0], 2),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
