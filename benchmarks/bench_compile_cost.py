"""Compile cost ahead of time: warm-up and TensorFlow's persistent XLA cache, measured.

A bucketed variable-length model (`jit_compile=True`, 4 bucket shapes) is
fitted for 3 epochs in fresh processes, one mode each:

- `plain`: no warm-up, no cache;
- `warm_up`: `keras_xla_guard.warm_up(model, dataset)` before `fit`;
- `cache_first`: persistent cache on, empty directory (fills it);
- `cache_second`: the same fit again in a new process, same directory;
- `warm_up_cache_first`, `warm_up_cache_second`: the same pair with
  `warm_up` before `fit` (a directory of their own: the cache key holds
  the traced function's unique name, e.g. `__inference_one_step_on_data_805`,
  which a warm-up before `fit` changes).

Each child prints first-epoch time, whole-run time, warm-up time, and the
guard's compile count in the training window (epoch 0 profiled from its
first step); the parent counts the files each cached mode added to the
cache directory (one per fresh compilation: TensorFlow writes a program
only after compiling it). `--rounds N` repeats the five modes N times,
alternated, each round with an empty cache directory; medians are
reported. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np, tensorflow as tf, keras
from keras_xla_guard import XlaGuardCallback, pad_to_buckets, warm_up
keras.utils.set_random_seed(0)
tokens = keras.Input((None,), dtype="int32", name="tokens")
h = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(100, 16)(tokens))
model = keras.Model({"tokens": tokens}, keras.layers.Dense(1)(h))
model.compile("adam", "mse", jit_compile=True)
rng = np.random.default_rng(0)
rows = [rng.integers(1, 100, n).astype("int32") for n in rng.integers(4, 40, 256)]
ds = tf.data.Dataset.from_generator(lambda: iter(rows), output_signature=tf.TensorSpec((None,), tf.int32))
ds = ds.map(lambda t: ({"tokens": t}, tf.cast(tf.size(t), tf.float32)[None]))
train = pad_to_buckets(ds, boundaries=(10, 20, 30, 40), batch_size=16, drop_remainder=True)
t0 = time.perf_counter()
warm = warm_up(model, train).seconds if sys.argv[1] == "1" else 0.0
times = []
class T(keras.callbacks.Callback):
    def on_epoch_begin(self, e, logs=None): self.t = time.perf_counter()
    def on_epoch_end(self, e, logs=None): times.append(time.perf_counter() - self.t)
guard = XlaGuardCallback(log_dir=sys.argv[2], profile_epochs=(0,), skip_steps=0, verbose=0, async_analysis=False)
model.fit(train, epochs=3, verbose=0, callbacks=[T(), guard])
r = guard.reports[0]
print(json.dumps({"first_epoch_s": times[0], "run_s": sum(times), "warm_up_s": warm,
                  "total_s": time.perf_counter() - t0, "window_compilations": r.compilations,
                  "window_compile_s": sum(c.compile_s or 0 for c in r.compile_table),
                  "cache_hits": r.cache_hits, "persistent_cache": r.persistent_cache}))
"""


def _child(warm: bool, log_dir: str, cache: str | None) -> dict:
    env = dict(os.environ)
    env.pop("TF_XLA_FLAGS", None)
    if cache is not None:
        env["TF_XLA_FLAGS"] = f"--tf_xla_persistent_cache_directory={cache}"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, "1" if warm else "0", log_dir],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


_MODES = (  # name, warm-up, the round's cache directory it uses (or None)
    ("plain", False, None),
    ("warm_up", True, None),
    ("cache_first", False, "fit"),
    ("cache_second", False, "fit"),
    ("warm_up_cache_first", True, "warm"),
    ("warm_up_cache_second", True, "warm"),
)


def _entries(cache: str) -> int:
    return len(os.listdir(cache)) if os.path.isdir(cache) else 0


def _round(tmp: str, index: int) -> dict:
    out = {}
    for name, warm, cached in _MODES:
        cache = os.path.join(tmp, f"xla_cache_{cached}{index}") if cached else None
        before = _entries(cache) if cache else 0
        out[name] = _child(warm, os.path.join(tmp, f"{name}{index}"), cache)
        if cache:
            out[name]["cache_files_added"] = _entries(cache) - before
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rounds = [_round(tmp, i) for i in range(args.rounds)]
    keys = ("first_epoch_s", "run_s", "warm_up_s", "total_s", "window_compilations", "window_compile_s")
    medians = {
        name: {key: statistics.median(r[name][key] for r in rounds) for key in keys} for name, _, _ in _MODES
    }
    for name, _, cached in _MODES:
        if cached:
            medians[name]["cache_files_added"] = statistics.median(
                r[name]["cache_files_added"] for r in rounds
            )
    plain = medians["plain"]
    print(
        json.dumps(
            {
                "benchmark": "bench_compile_cost",
                "epochs": 3,
                "bucket_shapes": 4,
                "rounds": rounds,
                "medians": medians,
                "first_epoch_ratio_vs_plain": {
                    n: m["first_epoch_s"] / plain["first_epoch_s"] for n, m in medians.items()
                },
                "total_ratio_vs_plain": {n: m["total_s"] / plain["total_s"] for n, m in medians.items()},
                "cache_second_vs_first_compile_s": medians["cache_second"]["window_compile_s"]
                / max(medians["cache_first"]["window_compile_s"], 1e-9),
                "warm_up_cache_second_vs_first_warm_up_s": medians["warm_up_cache_second"]["warm_up_s"]
                / max(medians["warm_up_cache_first"]["warm_up_s"], 1e-9),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
