"""Cost of input-signature tracking in `model.fit`, measured side by side.

Prints one JSON object. Per variant:

* `ratio`: median epoch time with tracking over the median epoch time of the
  same guard with tracking left out (goal <= 1.01); `ratio_pair_median`, the
  median of per-round ratios; `cpu_ratio`, the same for process CPU time;
* `aa_ratio`: the untracked arm against a second, identical untracked arm
  (an A/A control). When it is further from 1 than the goal's margin, the
  machine is too noisy to resolve the goal at the epoch level and
  `resolvable` is false;
* `step_ratio`: the train function the guard installs (the tap's ops,
  called through `DirectCall`, or its Python shape reads where Keras pulls
  the batch in Python: `recording`) against Keras' own, on the same model and
  iterator, called exactly as `fit` calls them, alternating call by call
  over `--steps` calls each (ratio of median call times;
  `step_ratio_trimmed_mean`, the same with 10%-trimmed means): resolved far
  more finely than whole epochs, because drift of the machine between
  neighbouring calls is small; `step_cost_ratio` adds the guard's tracking
  hooks (`python_us_per_step`) to it: what tracking costs per step, the
  figure the goal is about;
* its two parts, from two more arms of the same alternation:
  `tap_only_ratio`, the recording graph called through its `tf.function`
  as Keras calls its own (the tap's ops alone; `tap_only_cost_ratio` with
  the hooks), and `dispatch_only_ratio`, Keras' own graph called through
  `DirectCall` (what skipping `tf.function`'s per-call dispatch saves);
* `record_us_per_batch`: the tap's ops alone, per batch, in a tight
  in-graph loop over the dataset with and without them (minimum of
  alternated runs: the intrinsic cost, with the least disturbance);
* `python_us_per_step`: time spent in the guard's own tracking hooks during
  the tracked epochs (reads of the ring included), per step;
  `fit_setup_ms`: the one-off cost per `fit` call of installing the tap (in
  `on_train_begin`, outside the epoch; the recording function is traced
  once per model, instead of Keras' own, and reused by later fits).

Variants: `dynamic` batches without `drop_remainder` (dimension 0 is unknown
to tf.data, so every batch is recorded) with steps_per_execution 1 and 4
(`--spe`),
and `static` batches with `drop_remainder=True` (nothing to record). Arms
alternate in rotating order on the same compiled model. Each run is a
3-epoch `fit`; epochs 1 and 2 are timed (`on_epoch_begin` to
`on_epoch_end`), i.e. steady state.

Usage: python benchmarks/bench_signatures.py [--rounds 9] [--batches 300] [--steps 4000] [--width 256] [--spe 1,4]
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


def _step_ratios(model, dataset, steps: int) -> dict[str, float]:
    """The recording train function against Keras' own, alternating every call.

    Up to five arms, all called on one iterator exactly as `fit` calls
    them, each call timed alone, in rotating order call by call, so drift of
    the machine falls on all alike:

    * `keras`: Keras' own train function (the baseline), and `keras_again`,
      the same function as a further arm (A/A control);
    * `tracked`: what the guard installs - the tap's ops, called through
      `DirectCall` (the traced graph without `tf.function`'s dispatch);
    * `tap_dispatched`: the same recording graph called through its
      `tf.function`, as Keras calls its own: the tap's ops alone;
    * `keras_direct`: Keras' own graph through `DirectCall`: the dispatch
      saving alone.

    Returns:
        Ratios of median call times to `keras` (`step_ratio`: tracked;
        `tap_only_ratio`, `dispatch_only_ratio`), `step_ratio_trimmed_mean`
        (10%-trimmed means), and `call_us` (median Keras call).
    """
    import types

    from keras_xla_guard import seam
    from keras_xla_guard.seam._recording import DirectCall

    keras_function = model.train_function
    iterator = iter(dataset.repeat())
    tap, tracked = seam._tapped(seam.flavour_of(model), keras_function, iterator.element_spec)
    if tap.static:
        tracked = keras_function
    # keras_again: Keras' own function as a second arm, the A/A control.
    functions = {"keras": keras_function, "tracked": tracked, "keras_again": keras_function}
    tracked(iterator)
    # The parts exist where the recording runs in Keras' in-graph
    # multi-step function (Keras <= 3.15, or steps_per_execution > 1):
    # there the tap replaces that tf.function and calls it directly. Keras
    # 3.16 with steps_per_execution == 1 pulls the batch in Python, where
    # the tap reads its shapes with no TF op and nothing is called directly.
    names = getattr(getattr(tracked, "__code__", None), "co_freevars", ())
    in_graph = not tap.static and not tap._host and "multi_step_on_iterator" in names
    tap.skip_recorded()
    if in_graph:
        cell = names.index("multi_step_on_iterator")
        direct = tracked.__closure__[cell].cell_contents
        keras_step = keras_function.__closure__[cell].cell_contents

        def with_step(function, step):
            cells = list(function.__closure__)
            cells[cell] = types.CellType(step)
            return types.FunctionType(
                function.__code__,
                function.__globals__,
                function.__name__,
                function.__defaults__,
                tuple(cells),
            )

        functions["tap_dispatched"] = with_step(tracked, direct.function)
        functions["keras_direct"] = with_step(keras_function, DirectCall(keras_step))
    for function in functions.values():
        function(iterator)  # trace outside the measurement
    times: dict[str, list[float]] = {arm: [] for arm in functions}
    names = list(functions)
    clock = time.perf_counter
    for i in range(steps):
        turn = i % len(names)
        for arm in names[turn:] + names[:turn]:
            function = functions[arm]
            t0 = clock()
            function(iterator)
            times[arm].append(clock() - t0)
        if i % 500 == 499:
            tap.skip_recorded()  # the ring is never read here; keep the reader's cursor current

    def trimmed_mean(values: list[float]) -> float:
        values = sorted(values)
        cut = len(values) // 10
        return statistics.fmean(values[cut : len(values) - cut])

    median = {arm: statistics.median(v) for arm, v in times.items()}
    parts = (
        {
            "tap_only_ratio": median["tap_dispatched"] / median["keras"],
            "dispatch_only_ratio": median["keras_direct"] / median["keras"],
        }
        if in_graph
        else {"tap_only_ratio": None, "dispatch_only_ratio": None}
    )
    return {
        "step_ratio": median["tracked"] / median["keras"],
        "step_ratio_trimmed_mean": trimmed_mean(times["tracked"]) / trimmed_mean(times["keras"]),
        **parts,
        "step_aa_ratio": median["keras_again"] / median["keras"],
        "recording": "in_graph" if in_graph else ("none" if tap.static else "python"),
        "call_us": 1e6 * median["keras"],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _record_us(tf, dataset, repeats: int = 10) -> float:
    """Extra microseconds per batch of the tap's ops in a tight in-graph loop (min of alternated runs)."""
    from keras_xla_guard.seam.tap import InputTap

    tap = InputTap(dataset.element_spec)

    def make(record: bool):
        @tf.function
        def loop(ds):
            n = tf.constant(0, tf.int64)
            for element in ds:
                if record:
                    tap.record(element)
                n += 1
            return n

        return loop

    loops = {"plain": make(False), "record": make(True)}
    batches = int(loops["plain"](dataset))
    if tap.static:
        return 0.0
    loops["record"](dataset)
    times: dict[str, list[float]] = {"plain": [], "record": []}
    for i in range(repeats):
        for arm in ("plain", "record") if i % 2 else ("record", "plain"):
            t0 = time.perf_counter()
            loops[arm](dataset)
            times[arm].append(time.perf_counter() - t0)
    return 1e6 * (min(times["record"]) - min(times["plain"])) / batches


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9, help="alternated fit rounds per variant")
    parser.add_argument("--batches", type=int, default=300, help="steps per epoch")
    parser.add_argument(
        "--steps", type=int, default=4000, help="calls of each train function, alternated, for step_ratio"
    )
    parser.add_argument(
        "--spe",
        type=lambda text: [int(v) for v in text.split(",")],
        default=[1, 4],
        help="steps_per_execution values of the dynamic variants, comma-separated",
    )
    parser.add_argument("--no-jit", action="store_true", help="train without jit_compile")
    parser.add_argument(
        "--width", type=int, default=256, help="units of the two hidden layers (the step time grows with it)"
    )
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

        def _track(self, method, *a):
            t0 = time.perf_counter()
            try:
                return super()._track(method, *a)
            finally:
                key = "setup" if method == self._attach_inputs else "steps"
                Tracked.spent[key] += time.perf_counter() - t0

    def untracked(**kwargs):
        """The same guard with tracking off: the baseline."""
        return XlaGuardCallback(track_signatures=False, **kwargs)

    class EpochClock(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.wall = self.cpu = 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self._t = (time.perf_counter(), time.process_time())

        def on_epoch_end(self, epoch, logs=None):
            if epoch > 0:
                self.wall += time.perf_counter() - self._t[0]
                self.cpu += time.process_time() - self._t[1]

    rows = args.batches * 64 + 17  # a short last batch when not dropped
    x = np.random.default_rng(0).standard_normal((rows, 128)).astype("float32")
    y = x[:, :1].copy()
    tmp = tempfile.mkdtemp(prefix="xla_guard_bench_sig_")
    timed_steps = 2 * args.batches
    variants = []
    cases = [(f"dynamic_spe{spe}", spe, False) for spe in args.spe] + [("static_spe1", 1, True)]
    for name, spe, drop in cases:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64, drop_remainder=drop).prefetch(2)
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((128,)),
                keras.layers.Dense(args.width, activation="relu"),
                keras.layers.Dense(args.width, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        model.compile("adam", "mse", jit_compile=not args.no_jit, steps_per_execution=spe)
        arms = {"tracked": Tracked, "untracked": untracked, "untracked_again": untracked}
        # Trace and compile (Keras' function and the recording one) outside the measurement.
        for arm in arms.values():
            model.fit(
                ds,
                epochs=1,
                verbose=0,
                callbacks=[arm(log_dir=os.path.join(tmp, "warm"), profile_epochs=(), verbose=0)],
            )
        results: dict[str, list[tuple[float, float]]] = {a: [] for a in arms}
        Tracked.spent = {"setup": 0.0, "steps": 0.0}
        names = list(arms)
        for i in range(args.rounds):
            for arm in names[i % 3 :] + names[: i % 3]:
                clock = EpochClock()
                guard = arms[arm](
                    log_dir=os.path.join(tmp, f"{name}_{arm}_{i}"), profile_epochs=(), verbose=0
                )
                model.fit(ds, epochs=3, callbacks=[guard, clock], verbose=0)
                results[arm].append((clock.wall, clock.cpu))

        def med(arm: str, k: int = 0, results: dict = results) -> float:
            return statistics.median(r[k] for r in results[arm])

        python_us = 1e6 * Tracked.spent["steps"] / (3 * args.rounds * args.batches)
        calls = _step_ratios(model, ds, args.steps)
        step_ratio, call_us = calls["step_ratio"], calls["call_us"]
        record_us = _record_us(tf, ds)
        aa = med("untracked_again") / med("untracked")
        variants.append(
            {
                "variant": name,
                "steps_per_execution": spe,
                "drop_remainder": drop,
                "step_us_median": {a: round(1e6 * med(a) / timed_steps, 1) for a in arms},
                "ratio": round(med("tracked") / med("untracked"), 4),
                "ratio_pair_median": round(
                    statistics.median(t[0] / u[0] for t, u in zip(results["tracked"], results["untracked"])),
                    4,
                ),
                "cpu_ratio": round(med("tracked", 1) / med("untracked", 1), 4),
                "aa_ratio": round(aa, 4),
                "resolvable": abs(aa - 1) <= GOAL - 1,
                "call_us_median": round(call_us, 1),
                "step_ratio": round(step_ratio, 4),
                "step_ratio_trimmed_mean": round(calls["step_ratio_trimmed_mean"], 4),
                "step_cost_ratio": round(step_ratio + python_us * spe / call_us, 4),
                "step_aa_ratio": round(calls["step_aa_ratio"], 4),
                "recording": calls["recording"],
                "tap_only_ratio": _round(calls["tap_only_ratio"]),
                "tap_only_cost_ratio": _round(
                    calls["tap_only_ratio"] and calls["tap_only_ratio"] + python_us * spe / call_us
                ),
                "dispatch_only_ratio": _round(calls["dispatch_only_ratio"]),
                "record_us_per_batch": round(record_us, 2),
                "python_us_per_step": round(python_us, 2),
                "fit_setup_ms": round(1e3 * Tracked.spent["setup"] / args.rounds, 2),
            }
        )

    print(
        json.dumps(
            {
                "benchmark": "signature_tracking_overhead",
                "machine": {
                    "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(),
                    "tensorflow": tf.__version__,
                    "keras": keras.__version__,
                },
                "jit_compile": not args.no_jit,
                "hidden_width": args.width,
                "steps_per_epoch": args.batches,
                "rounds": args.rounds,
                "goal_ratio": GOAL,
                "variants": variants,
                "meets_goal_measured": all(v["ratio"] <= GOAL for v in variants),
                "meets_goal_step": all(v["step_cost_ratio"] <= GOAL for v in variants),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
