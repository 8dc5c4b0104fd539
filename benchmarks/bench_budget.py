"""Cost of a compilation budget (`with max_compilations(...)`) around `model.fit`, side by side.

Prints one JSON object. Four arms train the same compiled model
(jit_compile=True) on the same data, one `fit` call each per round, in
rotating order, after one untimed round of each, the budget's first
(tracing, compilation and the guard's recording function happen there,
once):

* `plain`: `model.fit(...)`, nothing else;
* `plain_again`: the same, a second arm (an A/A control: how far two
  identical arms drift apart on this machine);
* `budget`: `with max_compilations(None): model.fit(...)`, no callback
  passed (the budget wraps `fit` and adds its signature-only guard), the
  block's entry and exit included;
* `guard`: `model.fit(..., callbacks=[XlaGuardCallback(profile_epochs=(),
  write_summaries=False, verbose=0, max_compilations=None)])`: the guard's
  own signature tracking, the cost the budget should not exceed.

Ratios are of median `fit` wall times: `budget_ratio` (budget / plain),
`guard_ratio` (guard / plain), `budget_vs_guard` (budget / guard, the
figure the goal is about: <= 1 within noise) and `aa_ratio`; the same of
the arms' fastest runs (`min`, the least disturbed by other processes) and
of median process CPU time (`cpu`). Also the
median cost of entering and leaving an empty block (`enter_exit_us`, with
Keras imported) and the extra cost of one call through the budget's
wrapper from a thread with no budget open while another thread holds one
(`idle_wrapper_ns`, minimum of alternated runs of 100,000 calls).

The batches have an unknown batch dimension (no `drop_remainder`), so the
guard records every batch's shape: the worst case for tracking.

Usage: python benchmarks/bench_budget.py [--rounds 9] [--batches 200] [--epochs 2] [--width 256]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds of every arm, alternated")
    parser.add_argument("--batches", type=int, default=200, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=2, help="epochs per fit call")
    parser.add_argument("--width", type=int, default=256, help="units of the two hidden layers")
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    import keras_xla_guard
    from keras_xla_guard import XlaGuardCallback, max_compilations

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batches * 32, 32)).astype("float32")
    y = rng.standard_normal((args.batches * 32, 1)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).prefetch(2)
    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(args.width, activation="relu"),
            keras.layers.Dense(args.width, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=True)
    guard = XlaGuardCallback(profile_epochs=(), write_summaries=False, verbose=0, max_compilations=None)

    def plain() -> None:
        model.fit(dataset, epochs=args.epochs, verbose=0)

    def budget() -> None:
        with max_compilations(None):
            model.fit(dataset, epochs=args.epochs, verbose=0)

    def guarded() -> None:
        model.fit(dataset, epochs=args.epochs, verbose=0, callbacks=[guard])

    arms = {"plain": plain, "budget": budget, "guard": guarded, "plain_again": plain}
    # The budget first: a model whose train function was built outside any budget gives
    # uncertain compilations (docs/budgets.md), and the budget would not pass.
    for arm in ("budget", "plain", "guard", "plain_again"):
        arms[arm]()
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    cpu: dict[str, list[float]] = {arm: [] for arm in arms}
    names = list(arms)
    for i in range(args.rounds):
        turn = i % len(names)
        for arm in names[turn:] + names[:turn]:
            t0, c0 = time.perf_counter(), time.process_time()
            arms[arm]()
            times[arm].append(time.perf_counter() - t0)
            cpu[arm].append(time.process_time() - c0)

    enter_exit = []
    for _ in range(200):
        t0 = time.perf_counter()
        with max_compilations(None):
            pass
        enter_exit.append(time.perf_counter() - t0)

    # The wrapper's cost where no budget is open in the calling thread (another thread holds
    # one): `_model_hooks`' own wrapper around a method that does nothing, against the bare method.
    from keras_xla_guard import _model_hooks

    class Bare:
        def fit(self, callbacks=None):
            return callbacks

    bare = Bare().fit
    unwrap = _model_hooks._wrap(Bare, "fit")
    wrapped = Bare().fit
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with max_compilations(None):
            holding.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait()
    calls = 100_000
    idle: dict[str, list[float]] = {"wrapped": [], "bare": []}
    for i in range(10):
        for arm, call in (
            (("wrapped", wrapped), ("bare", bare)) if i % 2 else (("bare", bare), ("wrapped", wrapped))
        ):
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            idle[arm].append((time.perf_counter() - t0) / calls)
    release.set()
    holder.join()
    unwrap()

    median = {arm: statistics.median(values) for arm, values in times.items()}
    least = {arm: min(values) for arm, values in times.items()}
    cpu_median = {arm: statistics.median(values) for arm, values in cpu.items()}

    def ratios(figures: dict[str, float]) -> dict[str, float]:
        return {
            "budget_ratio": round(figures["budget"] / figures["plain"], 4),
            "guard_ratio": round(figures["guard"] / figures["plain"], 4),
            "budget_vs_guard": round(figures["budget"] / figures["guard"], 4),
            "aa_ratio": round(figures["plain_again"] / figures["plain"], 4),
        }

    print(
        json.dumps(
            {
                "benchmark": "bench_budget",
                "rounds": args.rounds,
                "batches": args.batches,
                "epochs": args.epochs,
                "width": args.width,
                "keras": keras.__version__,
                "tensorflow": tf.__version__,
                "keras_xla_guard": keras_xla_guard.__version__,
                "fit_s": {arm: round(value, 4) for arm, value in median.items()},
                "fit_s_rounds": {arm: [round(v, 4) for v in values] for arm, values in times.items()},
                **ratios(median),
                "min": ratios(least),
                "cpu": ratios(cpu_median),
                "enter_exit_us": round(1e6 * statistics.median(enter_exit), 1),
                "idle_wrapper_ns": round(1e9 * (min(idle["wrapped"]) - min(idle["bare"])), 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
