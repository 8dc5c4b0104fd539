"""Cost of input-signature tracking in `model.fit`, measured side by side.

Prints one JSON object. Per variant:

* `ratio`: median epoch time with tracking over the median epoch time of the
  same guard with tracking left out (goal <= 1.01); `ratio_pair_median`, the
  median of per-round ratios; `cpu_ratio`, the same for process CPU time;
* `aa_ratio`: the untracked arm against a second, identical untracked arm
  (an A/A control). When it is further from 1 than the goal's margin, the
  machine is too noisy to resolve the goal and `resolvable` is false;
* `python_us_per_step`: time spent in the guard's own tracking hooks during
  the tracked epochs (drains included), per step; `fit_setup_ms`: the
  one-off cost per `fit` call of finding the dataset and building the tap
  (in `on_train_begin`, outside the epoch);
* `tap_us_per_batch`: extra time per batch when a tight loop pulls the
  dataset with the tap's map versus without (minimum of alternated runs; in
  `fit` this work runs on tf.data's thread, beside the step);
* `estimated_ratio`: (untracked step + python + tap) / untracked step, i.e.
  the ratio if none of the tap's work overlapped the step.

Variants: `dynamic` batches without `drop_remainder` (dimension 0 is unknown
to tf.data, so the tap's map records it) with steps_per_execution 1 and 4,
and `static` batches with `drop_remainder=True` (no map is added). Arms
alternate in rotating order on the same compiled model, so drift of the
machine affects all alike. Each run is a 2-epoch `fit`; the second epoch is
timed (`on_epoch_begin` to `on_epoch_end`), i.e. steady state.
`python_us_per_step` averages over both epochs, so it includes the reads
at the start of each `fit`.

Usage: python benchmarks/bench_signatures.py [--rounds 9] [--batches 300]
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


def _tap_cost_us(tf, dataset, batches: int, repeats: int = 10) -> float:  # noqa: ANN001
    """Extra microseconds per batch for pulling `dataset` through the tap."""
    from keras_xla_guard.input_tap import InputTap

    @tf.function
    def drain(ds):  # noqa: ANN001, ANN202
        n = tf.constant(0, tf.int64)
        for x, _ in ds:
            n += tf.shape(x, out_type=tf.int64)[0]
        return n

    times: dict[str, list[float]] = {"plain": [], "tap": []}
    for i in range(repeats):
        for arm in (("plain", "tap") if i % 2 else ("tap", "plain")):
            ds = InputTap(dataset.element_spec).wrap(dataset) if arm == "tap" else dataset
            drain(ds)
            t0 = time.perf_counter()
            drain(ds)
            times[arm].append(time.perf_counter() - t0)
    return 1e6 * (min(times["tap"]) - min(times["plain"])) / batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9, help="alternated rounds per variant")
    parser.add_argument("--batches", type=int, default=300, help="steps per epoch")
    parser.add_argument("--no-jit", action="store_true", help="train without jit_compile")
    args = parser.parse_args()

    import warnings

    warnings.filterwarnings("ignore")
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard import XlaGuardCallback

    class Tracked(XlaGuardCallback):
        """The guard as shipped, with a stopwatch around its tracking hooks."""

        spent = {"setup": 0.0, "steps": 0.0}

        def _track(self, method, *a):  # noqa: ANN001, ANN002, ANN202 - benchmark-only override
            t0 = time.perf_counter()
            try:
                return super()._track(method, *a)
            finally:
                key = "setup" if method == self._attach_inputs else "steps"
                Tracked.spent[key] += time.perf_counter() - t0

    def untracked(**kwargs):  # noqa: ANN003, ANN202
        """The same guard with tracking off: the baseline."""
        return XlaGuardCallback(track_signatures=False, **kwargs)

    class EpochClock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):  # noqa: ANN001
            self.wall, self.cpu = time.perf_counter(), time.process_time()

        def on_epoch_end(self, epoch, logs=None):  # noqa: ANN001
            self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu

    rows = args.batches * 64 + 17  # a short last batch when not dropped
    x = np.random.default_rng(0).standard_normal((rows, 128)).astype("float32")
    y = x[:, :1].copy()
    tmp = tempfile.mkdtemp(prefix="xla_guard_bench_sig_")
    variants = []
    for name, spe, drop in (("dynamic_spe1", 1, False), ("dynamic_spe4", 4, False), ("static_spe1", 1, True)):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64, drop_remainder=drop).prefetch(2)
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, activation="relu"),
                                  keras.layers.Dense(256, activation="relu"), keras.layers.Dense(1)])
        model.compile("adam", "mse", jit_compile=not args.no_jit, steps_per_execution=spe)
        model.fit(ds, epochs=1, verbose=0)  # trace + compile outside the measurement
        arms = {"tracked": Tracked, "untracked": untracked, "untracked_again": untracked}
        results: dict[str, list[tuple[float, float]]] = {a: [] for a in arms}
        Tracked.spent = {"setup": 0.0, "steps": 0.0}
        names = list(arms)
        for i in range(args.rounds):
            for arm in names[i % 3:] + names[: i % 3]:
                clock = EpochClock()
                guard = arms[arm](log_dir=os.path.join(tmp, f"{name}_{arm}_{i}"), profile_epochs=(99,),
                                  verbose=0)
                # Two epochs per fit, the second one timed: steady state, after
                # the tap's start-of-fit reads at steps 1, 2, 4, ... 256.
                model.fit(ds, epochs=2, callbacks=[guard, clock], verbose=0)
                results[arm].append((clock.wall, clock.cpu))

        def med(arm: str, k: int = 0) -> float:
            return statistics.median(r[k] for r in results[arm])

        step_s = med("untracked") / args.batches
        python_us = 1e6 * Tracked.spent["steps"] / (2 * args.rounds * args.batches)
        tap_us = _tap_cost_us(tf, ds, args.batches + (0 if drop else 1)) if not drop else 0.0
        aa = med("untracked_again") / med("untracked")
        variants.append({
            "variant": name,
            "steps_per_execution": spe,
            "drop_remainder": drop,
            "tap_map_added": not drop,
            "step_us_median": {a: round(1e6 * med(a) / args.batches, 1) for a in arms},
            "ratio": round(med("tracked") / med("untracked"), 4),
            "ratio_pair_median": round(statistics.median(
                t[0] / u[0] for t, u in zip(results["tracked"], results["untracked"])), 4),
            "cpu_ratio": round(med("tracked", 1) / med("untracked", 1), 4),
            "aa_ratio": round(aa, 4),
            "resolvable": abs(aa - 1) <= GOAL - 1,
            "python_us_per_step": round(python_us, 2),
            "fit_setup_ms": round(1e3 * Tracked.spent["setup"] / args.rounds, 1),
            "tap_us_per_batch": round(tap_us, 1),
            "estimated_ratio": round((1e6 * step_s + python_us + max(tap_us, 0.0)) / (1e6 * step_s), 4),
        })

    print(json.dumps({
        "benchmark": "signature_tracking_overhead",
        "machine": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(), "tensorflow": tf.__version__,
                    "keras": keras.__version__},
        "jit_compile": not args.no_jit,
        "steps_per_epoch": args.batches,
        "rounds": args.rounds,
        "goal_ratio": GOAL,
        "variants": variants,
        "meets_goal_measured": all(v["ratio"] <= GOAL for v in variants),
        "meets_goal_estimated": all(v["estimated_ratio"] <= GOAL for v in variants),
    }, indent=2))


if __name__ == "__main__":
    main()
