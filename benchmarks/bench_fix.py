"""Does the guard's advice pay? Variable-length training before/after bucketing.

A small token model (embedding, residual LayerNorm/GELU blocks, average
pooling) trains on variable-length sequences that are batched the common
way: sorted by length, then `padded_batch`, so almost every batch has its
own length. Three configurations train the same steps from the same
initial weights:

* ``xla_unfixed``: `jit_compile=True` on those batches: XLA compiles one
  program per distinct length (the recompilation storm the guard reports);
* ``xla_bucketed``: `jit_compile=True` on the same examples batched with
  `keras_xla_guard.data.pad_to_buckets` and the boundaries the guard
  recommends (`keras_xla_guard.signatures.recommend_buckets` over the
  observed batch lengths);
* ``no_xla``: `jit_compile=False` on the unfixed batches.

Each configuration's wall time covers the whole run, compilations included,
because that is what the user pays. Runs alternate the configuration order
over `--rounds` rounds; the JSON holds medians and the speedups.

Usage: python benchmarks/bench_fix.py [--rounds 3] [--epochs 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--examples", type=int, default=2560)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    import warnings

    warnings.filterwarnings("ignore")
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard.data import pad_to_buckets
    from keras_xla_guard.signatures import recommend_buckets

    rng = np.random.default_rng(0)
    lengths = np.sort(rng.integers(8, 129, size=args.examples))
    tokens = [rng.integers(1, 1000, size=n).astype("int32") for n in lengths]
    labels = (lengths / 128.0).astype("float32")
    spec = (tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.float32))
    examples = tf.data.Dataset.from_generator(lambda: zip(tokens, labels), output_signature=spec).cache()
    list(examples)  # fill the cache so no configuration pays for generating data
    batches = list(examples.padded_batch(args.batch_size, drop_remainder=True))
    batch_lengths = [int(x.shape[1]) for x, _ in batches]
    # Length-sorted batches in shuffled order: little padding, many shapes.
    order = np.random.default_rng(1).permutation(len(batches))
    unfixed = tf.data.Dataset.from_generator(
        lambda: (batches[i] for i in order),
        output_signature=(tf.TensorSpec([args.batch_size, None], tf.int32),
                          tf.TensorSpec([args.batch_size], tf.float32)),
    ).cache()
    list(unfixed)
    boundaries = recommend_buckets(batch_lengths)
    bucketed = pad_to_buckets(examples.shuffle(args.examples, seed=1), boundaries, args.batch_size).cache()
    list(bucketed)

    def build(jit: bool) -> keras.Model:
        keras.utils.set_random_seed(0)
        inp = keras.Input((None,), dtype="int32")
        h = keras.layers.Embedding(1000, 32, mask_zero=True)(inp)
        for _ in range(3):
            z = keras.layers.LayerNormalization()(h)
            z = keras.layers.Dense(64, activation="gelu")(z)
            h = keras.layers.Add()([h, keras.layers.Dense(32)(z)])
        out = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(h))
        model = keras.Model(inp, out)
        model.compile("adam", "mse", jit_compile=jit)
        return model

    configs = {"xla_unfixed": (True, unfixed), "xla_bucketed": (True, bucketed), "no_xla": (False, unfixed)}
    steps = {name: sum(1 for _ in ds) * args.epochs for name, (_, ds) in configs.items()}
    totals: dict[str, list[float]] = {name: [] for name in configs}
    for r in range(args.rounds):
        names = list(configs)
        names = names[r % len(names):] + names[: r % len(names)]
        for name in names:
            jit, ds = configs[name]
            model = build(jit)
            t0 = time.perf_counter()
            model.fit(ds, epochs=args.epochs, verbose=0)
            totals[name].append(time.perf_counter() - t0)

    med = {name: statistics.median(v) for name, v in totals.items()}
    print(json.dumps({
        "benchmark": "fix_pays",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "tensorflow": tf.__version__, "keras": keras.__version__},
        "rounds": args.rounds,
        "epochs": args.epochs,
        "distinct_batch_lengths_unfixed": len(set(batch_lengths)),
        "recommended_boundaries": list(boundaries),
        "steps": steps,
        "total_s_median": med,
        "step_ms_median": {name: 1e3 * med[name] / steps[name] for name in med},
        "speedup_bucketed_vs_unfixed_xla": med["xla_unfixed"] / med["xla_bucketed"],
        "speedup_bucketed_vs_no_xla": med["no_xla"] / med["xla_bucketed"],
        "goal": "xla_bucketed fastest, >= 1.3x over xla_unfixed",
    }, indent=2))


if __name__ == "__main__":
    main()
