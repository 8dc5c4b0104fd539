"""Cost of `XlaGuard.watch` in a custom training loop, measured side by side.

Prints one JSON object: the median epoch time of a loop calling the watched
step (unprofiled epochs: step marks and input-signature tracking only) over
the median epoch time of the same loop calling the bare `tf.function`
(`ratio`, goal <= 1.01), the median of per-round ratios, the same for
process CPU time, and the added time per step in microseconds. The
guard's own cost per call (`guard_us_per_call`), which the epoch times
cannot resolve from the step's noise, is timed apart: the dataset's
batches passed to a watched and a bare Python no-op in alternated blocks (the
epoch's per-step figures include the epoch scope's fixed cost, a few
milliseconds over the epoch; this does not). That fixed cost is timed
too (`epoch_scope_ms`: an epoch scope around one watched call; its end
explains the epoch's signatures and writes them to TensorBoard). A third arm
runs the bare step again: ``aa_ratio`` (bare again over bare) is the A/A
control, how far two identical arms land apart on this machine. The step is
a `tf.function(jit_compile=True)` MLP update on raw variables, compiled
before the measurement; batches come from a `tf.data` pipeline iterated in
Python, as in a typical custom loop. Arms alternate in rotating order so
drift of the machine affects both alike.

Usage: python benchmarks/bench_loop.py [--rounds 9] [--batches 200] [--width 256]
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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GOAL = 1.01


def _keras_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("keras")
    except PackageNotFoundError:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9, help="alternated rounds")
    parser.add_argument("--batches", type=int, default=200, help="steps per epoch")
    parser.add_argument("--width", type=int, default=256, help="hidden units of the MLP")
    args = parser.parse_args()

    import tensorflow as tf

    from keras_xla_guard import XlaGuard

    features, batch = 64, 64
    w1 = tf.Variable(0.05 * tf.random.stateless_normal((features, args.width), seed=(0, 1)))
    w2 = tf.Variable(0.05 * tf.random.stateless_normal((args.width, 1), seed=(0, 2)))

    @tf.function(jit_compile=True)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.nn.relu(x @ w1) @ w2 - y) ** 2)
        g1, g2 = tape.gradient(loss, [w1, w2])
        w1.assign_sub(0.01 * g1)
        w2.assign_sub(0.01 * g2)
        return loss

    x = tf.random.stateless_normal((args.batches * batch, features), seed=(1, 1))
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(batch).prefetch(2)
    for xb, yb in ds.take(1):
        train_step(xb, yb)  # trace + compile outside the measurement

    guard = XlaGuard(
        log_dir=tempfile.mkdtemp(prefix="xla_guard_bench_loop_"), profile_epochs=(10**6,), verbose=0
    )
    watched = guard.watch(train_step)

    def epoch(arm: str, index: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        if arm == "watched":
            with guard.epoch(index):
                for xb, yb in ds:
                    loss = watched(xb, yb)
        else:  # "bare" and its A/A twin "bare_again"
            for xb, yb in ds:
                loss = train_step(xb, yb)
        loss.numpy()  # the last step has finished
        return time.perf_counter() - wall, time.process_time() - cpu

    arms = ["watched", "bare", "bare_again"]
    results: dict[str, list[tuple[float, float]]] = {a: [] for a in arms}
    for i in range(args.rounds):
        for arm in arms[i % 3 :] + arms[: i % 3]:
            results[arm].append(epoch(arm, i))

    # The guard's own cost per call, which epoch times cannot resolve from
    # the step's noise: the dataset's batches (fresh tensors, as in the
    # loop) passed to a Python no-op, watched and bare, in alternated
    # blocks of one epoch's batches, all in one epoch of the guard (its
    # scope's fixed cost is not per call).
    def noop(x: object, y: object) -> None:
        return None

    watched_noop = guard.watch(noop, jit_compile=True)
    calls: dict[str, list[float]] = {"watched": [], "bare": []}
    with guard.epoch(args.rounds):
        for i in range(args.rounds):
            for arm in ("watched", "bare") if i % 2 == 0 else ("bare", "watched"):
                fn = watched_noop if arm == "watched" else noop
                wall = time.perf_counter()
                for xb, yb in ds:
                    fn(xb, yb)
                calls[arm].append((time.perf_counter() - wall) / args.batches)
    # The epoch scope's fixed cost (its end explains the epoch's signatures
    # and writes them to TensorBoard), spread over the epoch's steps in the
    # epoch times: scopes of one watched no-op call each.
    scopes = []
    first_batch = next(iter(ds))
    for i in range(args.rounds):
        wall = time.perf_counter()
        with guard.epoch(2 * args.rounds + i):
            watched_noop(*first_batch)
        scopes.append(time.perf_counter() - wall)
    guard.close()
    guard_us = 1e6 * (statistics.median(calls["watched"]) - statistics.median(calls["bare"]))
    scope_ms = 1e3 * statistics.median(scopes)

    def med(arm: str, k: int) -> float:
        return statistics.median(r[k] for r in results[arm])

    pair_ratios = [w[0] / b[0] for w, b in zip(results["watched"], results["bare"])]
    ratio = med("watched", 0) / med("bare", 0)
    print(
        json.dumps(
            {
                "benchmark": "custom_loop_watch_overhead",
                "machine": {
                    "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(),
                    "tensorflow": tf.__version__,
                    "keras": _keras_version(),
                },
                "steps_per_epoch": args.batches,
                "hidden_units": args.width,
                "rounds": args.rounds,
                "epoch_ms_median": {a: round(1e3 * med(a, 0), 2) for a in arms},
                "step_us_median": {a: round(1e6 * med(a, 0) / args.batches, 1) for a in arms},
                "added_us_per_step": round(1e6 * (med("watched", 0) - med("bare", 0)) / args.batches, 1),
                "ratio": round(ratio, 4),
                "ratio_pair_median": round(statistics.median(pair_ratios), 4),
                "aa_ratio": round(med("bare_again", 0) / med("bare", 0), 4),
                "cpu_ratio": round(med("watched", 1) / med("bare", 1), 4),
                "guard_us_per_call": round(guard_us, 2),
                "guard_share_of_bare_step": round(guard_us / (1e6 * med("bare", 0) / args.batches), 4),
                "epoch_scope_ms": round(scope_ms, 2),
                "epoch_scope_us_per_step": round(1e3 * scope_ms / args.batches, 1),
                "goal_ratio": GOAL,
                "meets_goal": ratio <= GOAL,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
