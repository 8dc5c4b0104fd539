"""Does the guard's advice pay? Variable-length training before/after bucketing.

A token regressor over variable-length sequences (Embedding(1000, 32,
mask_zero=True), one residual block LayerNormalization -> Dense(64, gelu)
-> Dense(32), masked GlobalAveragePooling1D, Dense(1); Adam, MSE) trains
for `--epochs` epochs on `--examples` sequences of uniform random length
64..128. The common batching, sorted by length then `padded_batch`, gives
batches in shuffled order that almost all have their own length. Three
configurations train from the same initial weights on the same examples:

* ``xla_unfixed``: `jit_compile=True` on those batches: XLA compiles one
  program per distinct length (the recompilation storm the guard reports);
* ``xla_bucketed``: `jit_compile=True` on the same examples batched with
  `keras_xla_guard.signatures.data.pad_to_buckets` and the boundaries the guard itself
  recommends: an `XlaGuardCallback` watches a first ``xla_unfixed`` fit and
  its "fix: pad ... to N bucket length(s) (...)" advice is parsed and
  applied; like `pad_to_buckets` by default, it drops each bucket's last
  short batch, so it runs slightly fewer steps;
* ``no_xla``: `jit_compile=False` on the unfixed batches.

Before the timed rounds, each configuration trains once more with the guard
attached and every step of every epoch profiled: `xla_compiles` in the JSON
is the compilations counted in those traces (`CoverageReport.compilations`
summed over epochs), and `guard_expected_compilations` what the guard's
signature tracking predicted. The timed rounds run without the guard.

Step time is what the user pays: the whole `fit` wall time, tracing and
compilations included, divided by the steps run. Speedups and `meets_goal`
come from those step times (goal: ``xla_bucketed`` the fastest of the
three and >= 1.3x over ``xla_unfixed``). The per-epoch mean step times show
where the time goes: the first epoch holds the tracing and XLA compilations,
the later ones the steady state. Each of `--rounds` rounds trains all three
configurations, the order rotated each round; the JSON holds the medians
over rounds and the padding share (padding tokens / all tokens) of each
configuration's batches.

Why these defaults (measured on 2 CPU cores): an XLA:CPU compilation of
this training step takes about 2-2.5 s per batch shape (a second residual
block adds about 1 s), so the unfixed run's 40 compilations dominate its
run time, and the two compilations the guard's recommendation keeps must be
repaid by faster steady-state steps. XLA's per-step gain comes from fusing
the small ops (LayerNorm, GELU, masking, Adam) and grows with the batch:
the non-XLA steady step over the XLA one measured about 1.0x at batch 16,
1.6x at 64 and 2x at 256. Lengths 64..128 give 40 distinct batch lengths
in 40 batches and need only two buckets within the default 15 % padding
(the padding costs ``xla_bucketed`` some of that gain), and by the 5th
epoch the saved time exceeds the compilations' cost with some margin. The
default run spends most of its time in the unfixed XLA runs (the guarded
fits before the timed rounds add one more run of each configuration).

Usage: python benchmarks/bench_fix.py [--rounds 3] [--epochs 5]
           [--examples 10240] [--batch-size 256]
       tiny smoke run: --rounds 1 --epochs 1 --examples 256 --batch-size 64
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MIN_LENGTH, MAX_LENGTH = 64, 128
GOAL_SPEEDUP = 1.3


def guard_advice(explanations: list) -> tuple[int, ...] | None:
    """The bucket boundaries of the guard's first bucketing fix, if it gave one."""
    return explanations[0].values if explanations else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--examples", type=int, default=10240)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    import warnings

    warnings.filterwarnings("ignore")
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard import XlaGuardCallback
    from keras_xla_guard.signatures.data import pad_to_buckets

    rng = np.random.default_rng(0)
    lengths = np.sort(rng.integers(MIN_LENGTH, MAX_LENGTH + 1, size=args.examples))
    tokens = [rng.integers(1, 1000, size=n).astype("int32") for n in lengths]
    labels = (lengths / MAX_LENGTH).astype("float32")
    spec = (tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32))
    examples = tf.data.Dataset.from_generator(lambda: zip(tokens, labels), output_signature=spec)
    padded = list(examples.padded_batch(args.batch_size, drop_remainder=True))
    batch_lengths = [int(x.shape[1]) for x, _ in padded]
    # Length-sorted batches in shuffled order: little padding, many shapes.
    unfixed = [padded[i] for i in np.random.default_rng(1).permutation(len(padded))]

    def serve(batches: list) -> tf.data.Dataset:
        # Every configuration replays batches already in memory, in the same
        # fixed order each epoch, so none pays for input; `from_generator`
        # would stall for seconds at some epoch starts and blur the comparison.
        ds = tf.data.Dataset.from_tensors(batches[0])
        for batch in batches[1:]:
            ds = ds.concatenate(tf.data.Dataset.from_tensors(batch))
        return ds

    def build(jit: bool) -> keras.Model:
        keras.utils.set_random_seed(0)
        inp = keras.Input((None,), dtype="int32")
        h = keras.layers.Embedding(1000, 32, mask_zero=True)(inp)
        z = keras.layers.LayerNormalization()(h)
        z = keras.layers.Dense(64, activation="gelu")(z)
        h = keras.layers.Add()([h, keras.layers.Dense(32)(z)])
        out = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h))
        model = keras.Model(inp, out)
        model.compile("adam", "mse", jit_compile=jit)
        return model

    class EpochTimes(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.seconds: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self.start)

    def guarded_fit(jit: bool, batches: list) -> tuple[XlaGuardCallback, int]:
        """One fit with the guard profiling every step; returns it and the traced compilations."""
        log_dir = tempfile.mkdtemp(prefix="bench_fix_")
        guard = XlaGuardCallback(
            log_dir=log_dir,
            profile_epochs=tuple(range(args.epochs)),
            skip_steps=0,
            max_steps=None,
            write_summaries=False,
            verbose=0,
        )
        build(jit).fit(serve(batches), epochs=args.epochs, verbose=0, callbacks=[guard])
        failed = [r.reason for r in guard.reports.values() if r.status != "ok"]
        if failed or len(guard.reports) != args.epochs:
            raise SystemExit(f"bench_fix: a guarded window failed: {failed or guard.reports}")
        return guard, sum(r.compilations for r in guard.reports.values())

    # The guard watches the unfixed XLA run; its advice makes the bucketed arm.
    unfixed_guard, unfixed_compiles = guarded_fit(True, unfixed)
    advice = [
        finding
        for e in sorted(unfixed_guard.signatures)
        for finding in unfixed_guard.signatures[e].explanations
        if finding.kind == "bucketing_fix"
    ]
    boundaries = guard_advice(advice)
    if boundaries is None:
        raise SystemExit("bench_fix: the guard gave no bucketing advice for the unfixed batches")
    bucketed = list(pad_to_buckets(examples.shuffle(args.examples, seed=1), boundaries, args.batch_size))

    configs = {"xla_unfixed": (True, unfixed), "xla_bucketed": (True, bucketed), "no_xla": (False, unfixed)}
    arms: dict[str, dict] = {}
    for name, (jit, batches) in configs.items():
        if name == "xla_unfixed":
            guard, compiles = unfixed_guard, unfixed_compiles
        else:
            guard, compiles = guarded_fit(jit, batches)
        expected = [s.expected_compilations for s in guard.signatures.values()]
        shapes = {tuple(x.shape) for x, _ in batches}
        tokens_padded = sum(int(tf.size(x)) for x, _ in batches)
        tokens_real = sum(int(tf.math.count_nonzero(x)) for x, _ in batches)  # token 0 is padding
        arms[name] = {
            "jit_compile": jit,
            "steps_per_epoch": len(batches),
            "steps": len(batches) * args.epochs,
            "distinct_shapes": len(shapes),
            "xla_compiles": compiles,
            "guard_expected_compilations": None if None in expected else sum(expected),
            "padding_share": round(1 - tokens_real / tokens_padded, 3),
        }

    # On a shared machine, other processes slow XLA:CPU steps more than
    # non-XLA ones, so the JSON records the load average (this benchmark's
    # own threads add about 1).
    load_before = os.getloadavg()[0]
    totals: dict[str, list[float]] = {name: [] for name in configs}
    epoch_ms: dict[str, list[list[float]]] = {name: [] for name in configs}
    for r in range(args.rounds):
        names = list(configs)
        names = names[r % len(names) :] + names[: r % len(names)]
        for name in names:
            jit, batches = configs[name]
            ds = serve(batches)
            model = build(jit)
            timer = EpochTimes()
            # Free the previous configuration's model and compiled programs
            # now, not inside this configuration's timed run.
            gc.collect()
            t0 = time.perf_counter()
            model.fit(ds, epochs=args.epochs, verbose=0, callbacks=[timer])
            totals[name].append(time.perf_counter() - t0)
            epoch_ms[name].append([1e3 * s / arms[name]["steps_per_epoch"] for s in timer.seconds])
            print(
                f"round {r + 1}/{args.rounds} {name}: {totals[name][-1]:.1f} s", file=sys.stderr, flush=True
            )

    for name, arm in arms.items():
        total = statistics.median(totals[name])
        arm["total_s_median"] = round(total, 2)
        arm["total_s_rounds"] = [round(t, 2) for t in totals[name]]
        arm["step_ms_median"] = round(1e3 * total / arm["steps"], 2)
        arm["epoch_step_ms_median"] = [
            round(statistics.median(rounds[e] for rounds in epoch_ms[name]), 1) for e in range(args.epochs)
        ]
    step = {name: arm["step_ms_median"] for name, arm in arms.items()}
    vs_unfixed = step["xla_unfixed"] / step["xla_bucketed"]
    vs_no_xla = step["no_xla"] / step["xla_bucketed"]
    print(
        json.dumps(
            {
                "benchmark": "fix_pays",
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "tensorflow": tf.__version__,
                    "keras": keras.__version__,
                    "load_avg_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                },
                "rounds": args.rounds,
                "epochs": args.epochs,
                "examples": args.examples,
                "batch_size": args.batch_size,
                "lengths": [MIN_LENGTH, MAX_LENGTH],
                "distinct_batch_lengths_unfixed": len(set(batch_lengths)),
                "recommended_boundaries": list(boundaries),
                "guard_advice": advice[0].message,
                "arms": arms,
                "speedup_bucketed_vs_unfixed_xla": round(vs_unfixed, 2),
                "speedup_bucketed_vs_no_xla": round(vs_no_xla, 2),
                "goal": f"xla_bucketed fastest of the three, >= {GOAL_SPEEDUP}x over xla_unfixed (step time)",
                "meets_goal": bool(vs_no_xla > 1 and vs_unfixed >= GOAL_SPEEDUP),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
