"""Is `compare`'s verdict right? Two CPU models, compared and then trained in full.

For each model and each of `--rounds` rounds, `keras_xla_guard.compare`
(modes plain and jit_compile, `--steps` batches) projects the planned run;
then the whole planned run is trained with `model.fit` in every mode (the
order alternated by round), from the same initial weights on the same data,
and timed on the wall clock. Medians over rounds, of the projections and of
the measured runs, are compared side by side: `compare`'s `best_mode` (in
every round) must be the mode with the shortest measured run, and its
projected jit/plain ratio within 25 % of the measured one. Rounds put
`compare` and the full runs under the same machine load.

* ``xla_pays``: a deep MLP whose residual blocks hold many elementwise ops
  (Dense, then `--ops` times g*sigmoid(g) + 0.1*tanh(g)), on 64 features in
  batches of `--batch-size`, for `--epochs` epochs: XLA fuses the
  elementwise chains; its one compilation is repaid over the long run.
* ``xla_does_not_pay``: a small sequence regressor (Embedding, two Dense,
  GlobalAveragePooling1D, Dense) over batches of many distinct sequence
  lengths (`--lengths` of them over `--seq-batches` batches per epoch) in
  a short run (`--seq-epochs` epochs): XLA compiles once per length, which
  the faster steps never repay.

`compare`'s own cost is reported too: its wall time over (the wall time of
a `fit` of `--steps` plain steps on a fresh model + the compile time
`compare` measured); the goal is < 3.

Usage: python benchmarks/bench_compare.py [--rounds 3] [--steps 50]
       tiny smoke run: --rounds 1 --steps 4 --epochs 1 --mlp-batches 8
                       --seq-batches 6 --lengths 3 --width 32 --layers 1 --seq-width 16
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
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RATIO_TOLERANCE = 0.25
COST_GOAL = 3.0
MODES = ("plain", "jit_compile")


def mlp(args: argparse.Namespace, jit_compile: bool = False) -> Any:
    """The deep, elementwise-heavy MLP (same initial weights every call)."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((64,))
    h = keras.layers.Dense(args.width)(inputs)
    for _ in range(args.layers):
        g = keras.layers.Dense(args.width)(h)
        for _ in range(args.ops):
            g = g * keras.ops.sigmoid(g) + 0.1 * keras.ops.tanh(g)
        h = h + g
    model = keras.Model(inputs, keras.layers.Dense(1)(h))
    model.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    return model


def mlp_data(args: argparse.Namespace) -> Any:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.mlp_batches * args.batch_size, 64)).astype("float32")
    y = (np.tanh(x[:, :4]).sum(axis=1, keepdims=True) * 0.5).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size)


def seq_model(args: argparse.Namespace, jit_compile: bool = False) -> Any:
    """The small sequence regressor (same initial weights every call)."""
    import keras

    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((None,), dtype="int32"),
            keras.layers.Embedding(500, 64),
            keras.layers.Dense(args.seq_width, activation="gelu"),
            keras.layers.Dense(64, activation="gelu"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    return model


def seq_data(args: argparse.Namespace) -> Any:
    """`--seq-batches` batches of 64 sequences, their lengths cycling through `--lengths` values, shuffled."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(1)
    choices = 32 + 8 * np.arange(args.lengths)
    lengths = [int(choices[i % args.lengths]) for i in range(args.seq_batches)]
    rng.shuffle(lengths)
    batches = []
    for length in lengths:
        x = rng.integers(1, 500, size=(64, length)).astype("int32")
        y = (x % 7).mean(axis=1, keepdims=True).astype("float32") / 7
        batches.append((x, y))
    spec = (tf.TensorSpec((64, None), tf.int32), tf.TensorSpec((64, 1), tf.float32))
    return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec).apply(
        tf.data.experimental.assert_cardinality(len(batches))
    )


def timed_fit(build: Any, data: Any, jit_compile: bool, epochs: int, steps: int | None = None) -> float:
    """Wall seconds of `fit` on a fresh model, as a user's run would take."""
    model = build(jit_compile)
    # The previous run's model is freed here, not inside this run.
    gc.collect()
    start = time.perf_counter()
    model.fit(data if steps is None else data.take(steps), epochs=epochs, verbose=0)
    return time.perf_counter() - start


def run_case(name: str, build: Any, data: Any, args: argparse.Namespace, epochs: int) -> dict[str, Any]:
    """Per round: compare, then the full run in each mode (order alternated); medians over rounds."""
    from keras_xla_guard import compare

    reports, full = [], {m: [] for m in MODES}
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as logs:
            reports.append(
                compare(
                    build(False), data, steps=args.steps, modes=MODES, planned_epochs=epochs, log_dir=logs
                )
            )
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            full[mode].append(timed_fit(build, data, mode == "jit_compile", epochs))
    projected = {m: statistics.median(rep.projected_run_s[m] for rep in reports) for m in MODES}
    measured = {m: statistics.median(t) for m, t in full.items()}
    plain_steps_s = timed_fit(build, data.repeat(), False, 1, steps=args.steps)
    report = reports[-1]
    compile_s = sum(f.compile_time_s for f in report.modes.values())
    best_projected = min(projected, key=projected.get)
    projected_ratio = projected["jit_compile"] / projected["plain"]
    measured_ratio = measured["jit_compile"] / measured["plain"]
    best_measured = min(measured, key=measured.get)
    cost_ratio = report.wall_s / (plain_steps_s + compile_s)
    return {
        "case": name,
        "compare": report.to_dict()
        | {
            "modes": {
                m: {k: v for k, v in f.to_dict().items() if k not in ("step_times_s", "losses")}
                for m, f in report.modes.items()
            }
        },
        "compare_rounds": [
            {
                "best_mode": rep.best_mode,
                "projected_run_s": dict(rep.projected_run_s),
                "verdict": rep.verdict,
                "wall_s": rep.wall_s,
            }
            for rep in reports
        ],
        "planned_epochs": epochs,
        "projected_run_s_median": projected,
        "full_run_s": full,
        "full_run_s_median": measured,
        "best_mode_compare": best_projected,
        "best_mode_compare_every_round": [rep.best_mode for rep in reports],
        "best_mode_measured": best_measured,
        "best_mode_matches": best_projected == best_measured
        and all(rep.best_mode == best_measured for rep in reports),
        "projected_jit_over_plain": round(projected_ratio, 3),
        "measured_jit_over_plain": round(measured_ratio, 3),
        "ratio_error": round(abs(projected_ratio / measured_ratio - 1), 3),
        "ratio_within_tolerance": abs(projected_ratio / measured_ratio - 1) <= RATIO_TOLERANCE,
        "compare_wall_s": round(report.wall_s, 2),
        "plain_steps_fit_s": round(plain_steps_s, 2),
        "compare_compile_s": round(compile_s, 2),
        "compare_cost_ratio": round(cost_ratio, 2),
        "compare_cost_within_goal": cost_ratio < COST_GOAL,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50, help="compare's steps per mode")
    parser.add_argument("--epochs", type=int, default=6, help="planned epochs of the MLP run")
    parser.add_argument("--mlp-batches", type=int, default=50, help="MLP batches per epoch")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--ops", type=int, default=4)
    parser.add_argument("--seq-batches", type=int, default=48, help="sequence batches per epoch")
    parser.add_argument("--lengths", type=int, default=16, help="distinct sequence lengths")
    parser.add_argument("--seq-width", type=int, default=128)
    parser.add_argument("--seq-epochs", type=int, default=2)
    args = parser.parse_args(argv)

    import keras
    import tensorflow as tf

    cases = [
        run_case("xla_pays", lambda jit: mlp(args, jit), mlp_data(args), args, args.epochs),
        run_case("xla_does_not_pay", lambda jit: seq_model(args, jit), seq_data(args), args, args.seq_epochs),
    ]
    doc = {
        "benchmark": "compare_verdict",
        "rounds": args.rounds,
        "steps": args.steps,
        "ratio_tolerance": RATIO_TOLERANCE,
        "cost_goal": COST_GOAL,
        "cases": cases,
        "all_verdicts_right": all(c["best_mode_matches"] and c["ratio_within_tolerance"] for c in cases),
        "compare_cost_ratio_max": max(c["compare_cost_ratio"] for c in cases),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1min": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
        },
    }
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
