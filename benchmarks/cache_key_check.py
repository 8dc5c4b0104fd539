"""When does TensorFlow's persistent XLA cache hit? Files added per fresh process.

Three fresh processes share one cache directory and fit the same jit_compile
sequence model on two batch lengths (2 programs): the first fills the
cache, the second is the same program (should load both), the third traces
three unrelated `tf.function`s before `fit`. Two more share another
directory and fit a plain Keras MLP under auto-clustering
(`--tf_xla_cpu_global_jit` + `set_jit(True)`), first and second. Prints the
files each process added (one per fresh compilation: TensorFlow writes a
program only after compiling it) as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np, tensorflow as tf, keras
if sys.argv[1] == "cluster":
    tf.config.optimizer.set_jit(True)
    keras.utils.set_random_seed(0)
    mlp = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    mlp.compile("adam", "mse", jit_compile=False)
    x = np.random.default_rng(0).standard_normal((256, 16)).astype("float32")
    mlp.fit(x, x[:, :1], batch_size=32, epochs=1, verbose=0)
    sys.exit(0)
if sys.argv[1] == "1":
    for _ in range(3):
        tf.function(lambda x: x + 1)(tf.constant(1.0))
keras.utils.set_random_seed(0)
tokens = keras.Input((None,), dtype="int32")
model = keras.Sequential([tokens, keras.layers.Embedding(50, 8), keras.layers.GlobalAveragePooling1D(),
                          keras.layers.Dense(1)])
model.compile("adam", "mse", jit_compile=True)
batches = [(np.zeros((8, n), "int32"), np.zeros((8, 1), "float32")) for n in (5, 7)]
spec = (tf.TensorSpec((None, None), tf.int32), tf.TensorSpec((None, 1), tf.float32))
model.fit(tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec), epochs=1, verbose=0)
"""


def main() -> None:
    added = {}
    runs = (
        ("", (("first", "0"), ("same_program", "0"), ("other_functions_traced_first", "1"))),
        (
            "--tf_xla_cpu_global_jit ",
            (("autoclustering_first", "cluster"), ("autoclustering_second", "cluster")),
        ),
    )
    for flags, children in runs:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TF_XLA_FLAGS=f"{flags}--tf_xla_persistent_cache_directory={cache}")
            for name, arg in children:
                before = len(os.listdir(cache))
                subprocess.run([sys.executable, "-c", CHILD, arg], env=env, check=True, capture_output=True)
                added[name] = len(os.listdir(cache)) - before
    print(json.dumps({"benchmark": "cache_key_check", "jit_programs": 2, "files_added": added}, indent=2))


if __name__ == "__main__":
    main()
