"""Does `warm_up` change a deterministic fit? Arrays that differ from the same fit without it.

The case of issue 33: 80 rows, `Dataset.from_tensor_slices(...).shuffle(64,
seed=7).batch(16)`, a jit-compiled MLP with Adam, 3 epochs, every seed set
by `keras.utils.set_random_seed(1)` before building the model and the
pipeline. Four runs per Keras flavour (Keras 3 and tf_keras, each in its
own process): `plain` (no warm-up; the reference), `read_once` (the
pipeline iterated once before `fit`: what `warm_up` used to do), `warm_up`
(`warm_up(model, dataset)` before `fit`) and `callback`
(`XlaGuardCallback(warm_up=True)`). Prints JSON: for each run, how many of
the model's and optimizer's arrays differ from `plain`'s (bit for bit) and
the epoch losses.

Usage: python benchmarks/warmup_training_identity.py [--label TEXT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, tempfile
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np, tensorflow as tf
if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    import tf_keras as keras
else:
    import keras
from keras_xla_guard import XlaGuardCallback, seam, warm_up

rng = np.random.default_rng(0)
x = rng.standard_normal((80, 6)).astype("float32")
y = (x @ rng.standard_normal((6, 1))).astype("float32")


def run(mode):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(1e-2), "mse", jit_compile=True)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=7).batch(16)
    callbacks = []
    if mode == "read_once":
        for _ in dataset:
            pass
    elif mode == "warm_up":
        warm_up(model, dataset)
    elif mode == "callback":
        callbacks = [XlaGuardCallback(log_dir=tempfile.mkdtemp(), profile_epochs=(), verbose=0, warm_up=True)]
    history = model.fit(dataset, epochs=3, verbose=0, callbacks=callbacks)
    arrays = [np.array(v.numpy()) for v in seam.training_state(model)[0]]
    return arrays, [round(float(loss), 4) for loss in history.history["loss"]]


reference, losses = run("plain")
out = {"keras": f"{keras.__name__} {keras.__version__}", "arrays": len(reference), "plain_losses": losses}
for mode in ("read_once", "warm_up", "callback"):
    arrays, losses = run(mode)
    out[mode] = {"arrays_differing": sum(not np.array_equal(a, b) for a, b in zip(reference, arrays)),
                 "losses": losses}
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="", help="what code ran (e.g. a commit), echoed in the JSON")
    args = parser.parse_args()
    flavours = {}
    for name, legacy in (("keras3", "0"), ("tf_keras", "1")):
        env = dict(os.environ, TF_USE_LEGACY_KERAS=legacy)
        # Not in the checkout: `-c` puts the working directory first on the
        # path, and PYTHONPATH must pick the package under test.
        proc = subprocess.run(
            [sys.executable, "-c", CHILD],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
        flavours[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        json.dumps(
            {"benchmark": "warmup_training_identity", "label": args.label, "flavours": flavours}, indent=2
        )
    )


if __name__ == "__main__":
    main()
