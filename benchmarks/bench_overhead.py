"""Overhead of XlaGuardCallback on training, measured side by side.

Prints one JSON object:

* ``unprofiled``: wall time of the epochs the callback does not profile,
  with the callback attached (defaults, signature tracking on) over the
  same epochs without it (goal <= 1.01). Each run is a 4-epoch `fit` of an
  already compiled model; the last three epochs are timed from one
  `on_epoch_end` to the next, so all of the guard's per-epoch work (its
  step hooks, the signature tap, reading the ring, writing the epoch's
  TensorBoard summaries) is inside the figure. ``aa_ratio`` is the
  no-callback arm against a second, identical one (an A/A control: how far
  apart two identical arms land on this machine); ``fit_setup_ms`` is the
  guard's one-off cost per `fit` call (installing the tap, the environment
  check), outside the epochs;
* ``profiled_vs_keras_tensorboard``: wall time of an epoch in which the
  guard profiles `steps` steps, over the same epoch profiled for the same
  steps by `keras.callbacks.TensorBoard(profile_batch=...)` (goal <= 1.10);
  its ``aa_ratio`` is a second TensorBoard-profiled epoch against the
  first (the A/A control of this comparison).

Arms run alternated on the same compiled model (rotating order), and each
ratio is of medians, so drift of the machine affects all arms alike.

Usage: python benchmarks/bench_overhead.py [--pairs 9] [--steps 20] [--batches 120] [--no-signatures]
       tiny smoke run: --pairs 1 --steps 2 --batches 8
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=9, help="alternated rounds per measurement")
    parser.add_argument("--steps", type=int, default=20, help="profiled steps per window")
    parser.add_argument("--batches", type=int, default=120, help="steps per epoch")
    parser.add_argument(
        "--no-signatures",
        action="store_true",
        help="measure with track_signatures=False (the guard without the signature tap)",
    )
    args = parser.parse_args()

    import warnings

    warnings.filterwarnings("ignore")
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard import XlaGuardCallback

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).standard_normal((args.batches * 64, 128)).astype("float32")
    y = x[:, :1].copy()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).prefetch(2)
    model = keras.Sequential(
        [
            keras.Input((128,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile("adam", "mse", jit_compile=True)
    # Trace and compile outside the measurement: Keras' train function, and
    # the guard's recording one (traced once per model, reused by every fit).
    model.fit(ds, epochs=1, verbose=0)
    model.fit(
        ds,
        epochs=1,
        verbose=0,
        callbacks=[
            XlaGuardCallback(
                log_dir=tempfile.mkdtemp(prefix="xla_guard_bench_warm_"),
                profile_epochs=(5,),
                verbose=0,
                track_signatures=not args.no_signatures,
            )
        ],
    )

    def epoch_time(callbacks: list) -> float:
        t0 = time.perf_counter()
        model.fit(ds, epochs=1, callbacks=callbacks, verbose=0)
        return time.perf_counter() - t0

    class EpochClock(keras.callbacks.Callback):
        """Times epochs 1.. from one on_epoch_end to the next (listed last, after the guard)."""

        def on_train_begin(self, logs=None):
            self.ends: list[float] = []
            self.begin = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.ends.append(time.perf_counter())

    tmp = tempfile.mkdtemp(prefix="xla_guard_bench_")
    arms = ("guard", "none", "none_again")
    epochs: dict[str, list[float]] = {arm: [] for arm in arms}
    setup: dict[str, list[float]] = {arm: [] for arm in arms}
    for i in range(args.pairs):
        for arm in arms[i % 3 :] + arms[: i % 3]:
            clock = EpochClock()
            callbacks = [clock]
            if arm == "guard":
                callbacks = [
                    XlaGuardCallback(
                        log_dir=os.path.join(tmp, f"idle{i}"),
                        profile_epochs=(),
                        verbose=0,
                        track_signatures=not args.no_signatures,
                    ),
                    clock,
                ]
            t0 = time.perf_counter()
            model.fit(ds, epochs=4, callbacks=callbacks, verbose=0)
            t1 = time.perf_counter()
            epochs[arm].append(statistics.median(b - a for a, b in zip(clock.ends, clock.ends[1:])))
            # Outside the epochs: fit's prologue up to the clock's
            # on_train_begin (after the guard's), and everything after the
            # last epoch ended (on_train_end).
            setup[arm].append((clock.begin - t0) + (t1 - clock.ends[-1]))
    med = {arm: statistics.median(v) for arm, v in epochs.items()}

    profiled: list[float] = []
    aa_profiled: list[float] = []
    guard_s: list[float] = []
    keras_s: list[float] = []
    first, last = 2, 2 + args.steps - 1
    for i in range(args.pairs):
        guard = XlaGuardCallback(
            log_dir=os.path.join(tmp, f"guard{i}"),
            profile_epochs=0,
            skip_steps=first,
            max_steps=args.steps,
            verbose=0,
            track_signatures=not args.no_signatures,
        )
        tb, tb_again = (
            keras.callbacks.TensorBoard(
                log_dir=os.path.join(tmp, f"{name}{i}"),
                profile_batch=(first + 1, last + 1),
                write_graph=False,
            )
            for name in ("tb", "tb_again")
        )
        trio = [("guard", [guard]), ("keras", [tb]), ("keras_again", [tb_again])]
        trio = trio[i % 3 :] + trio[: i % 3]
        times = {name: epoch_time(cbs) for name, cbs in trio}
        assert guard.reports[0].status == "ok", guard.reports[0]
        profiled.append(times["guard"] / times["keras"])
        aa_profiled.append(times["keras_again"] / times["keras"])
        guard_s.append(times["guard"])
        keras_s.append(times["keras"])

    print(
        json.dumps(
            {
                "benchmark": "callback_overhead",
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "tensorflow": tf.__version__,
                    "keras": keras.__version__,
                    "load_avg_1min": round(os.getloadavg()[0], 2),
                },
                "steps_per_epoch": args.batches,
                "track_signatures": not args.no_signatures,
                "pairs": args.pairs,
                "unprofiled": {
                    "ratio_median": med["guard"] / med["none"],
                    "aa_ratio": med["none_again"] / med["none"],
                    "epoch_s_median_without": med["none"],
                    "epoch_s_median_guard": med["guard"],
                    "fit_setup_ms": 1e3
                    * (statistics.median(setup["guard"]) - statistics.median(setup["none"])),
                    "goal": 1.01,
                },
                "profiled_vs_keras_tensorboard": {
                    "ratio_median": statistics.median(profiled),
                    "epoch_s_median_guard": statistics.median(guard_s),
                    "epoch_s_median_keras": statistics.median(keras_s),
                    "aa_ratio": statistics.median(aa_profiled),
                    "profiled_steps": args.steps,
                    "goal": 1.10,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
