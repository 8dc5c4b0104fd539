"""Cost of `XlaGuard.watch` around a JAX custom loop's `jax.jit` step, measured side by side.

Prints one JSON object: the median epoch time of a loop calling the watched
step (unprofiled epochs: the step mark, the call's `jax.jit` key read as a
signature, the compile-stream context) over the median epoch time of the
same loop calling the bare jitted step (`ratio`, goal <= 1.01), the A/A
control (`aa_ratio`: a second bare arm over the first), the added time per
step, and the guard's own cost per call (`guard_us_per_call`): the same
batches passed to a watched and a bare `jax.jit` no-op (returns its first
argument) in alternated blocks, which the epoch times cannot resolve from
the step's noise. The step is an MLP update on a params dict (`jax.grad`),
compiled before the measurement; batches are NumPy arrays sliced per step,
as in a typical loop. Arms alternate in rotating order so drift of the
machine affects all alike. Needs JAX only.

Usage: python benchmarks/bench_jax_loop.py [--rounds 9] [--batches 200] [--width 256]
       tiny smoke run: --rounds 1 --batches 4 --width 16
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

GOAL = 1.01


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9, help="alternated rounds")
    parser.add_argument("--batches", type=int, default=200, help="steps per epoch")
    parser.add_argument("--width", type=int, default=256, help="hidden units of the MLP")
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import numpy as np

    from keras_xla_guard import XlaGuard

    features, batch = 64, 64
    rng = np.random.default_rng(0)
    params = {
        "w1": jnp.asarray(0.05 * rng.standard_normal((features, args.width)), jnp.float32),
        "w2": jnp.asarray(0.05 * rng.standard_normal((args.width, 1)), jnp.float32),
    }

    @jax.jit
    def train_step(params, x, y):
        def loss(p):
            return jnp.mean((jax.nn.relu(x @ p["w1"]) @ p["w2"] - y) ** 2)

        grads = jax.grad(loss)(params)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

    x = rng.standard_normal((args.batches * batch, features)).astype("float32")
    y = x[:, :1].copy()
    batches = [(x[i : i + batch], y[i : i + batch]) for i in range(0, len(x), batch)]
    train_step(params, *batches[0])  # trace + compile outside the measurement

    guard = XlaGuard(
        log_dir=tempfile.mkdtemp(prefix="xla_guard_bench_jax_loop_"), profile_epochs=(10**6,), verbose=0
    )
    watched = guard.watch(train_step)
    state = {"params": params}

    def epoch(arm: str, index: int) -> float:
        p = state["params"]
        wall = time.perf_counter()
        if arm == "watched":
            with guard.epoch(index):
                for xb, yb in batches:
                    p = watched(p, xb, yb)
        else:  # "bare" and its A/A twin "bare_again"
            for xb, yb in batches:
                p = train_step(p, xb, yb)
        jax.block_until_ready(p)  # the last step has finished
        state["params"] = p
        return time.perf_counter() - wall

    arms = ["watched", "bare", "bare_again"]
    results: dict[str, list[float]] = {a: [] for a in arms}
    for i in range(args.rounds):
        for arm in arms[i % 3 :] + arms[: i % 3]:
            results[arm].append(epoch(arm, i))

    # The guard's own cost per call: a jitted no-op (no device work to hide
    # it) on the same batches, watched and bare, in alternated blocks, in one
    # epoch of the guard (its scope's fixed cost is not per call).
    noop = jax.jit(lambda p, xb, yb: xb)
    watched_noop = guard.watch(noop)
    noop(params, *batches[0])
    calls: dict[str, list[float]] = {"watched": [], "bare": []}
    with guard.epoch(args.rounds):
        for i in range(args.rounds):
            for arm in ("watched", "bare") if i % 2 == 0 else ("bare", "watched"):
                fn = watched_noop if arm == "watched" else noop
                wall = time.perf_counter()
                for xb, yb in batches:
                    fn(params, xb, yb)
                calls[arm].append((time.perf_counter() - wall) / len(batches))
    guard.close()
    guard_us = 1e6 * (statistics.median(calls["watched"]) - statistics.median(calls["bare"]))

    def med(arm: str) -> float:
        return statistics.median(results[arm])

    ratio = med("watched") / med("bare")
    print(
        json.dumps(
            {
                "benchmark": "jax_custom_loop_watch_overhead",
                "machine": {
                    "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(),
                    "jax": jax.__version__,
                },
                "steps_per_epoch": len(batches),
                "hidden_units": args.width,
                "rounds": args.rounds,
                "epoch_ms_median": {a: round(1e3 * med(a), 2) for a in arms},
                "step_us_median": {a: round(1e6 * med(a) / len(batches), 1) for a in arms},
                "added_us_per_step": round(1e6 * (med("watched") - med("bare")) / len(batches), 1),
                "ratio": round(ratio, 4),
                "aa_ratio": round(med("bare_again") / med("bare"), 4),
                "guard_us_per_call": round(guard_us, 2),
                "noop_us_per_call": round(1e6 * statistics.median(calls["bare"]), 2),
                "compilations_counted": sum(c.count("train") for c in guard.compilations.values()),
                "goal_ratio": GOAL,
                "meets_goal": ratio <= GOAL,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
