"""Does TensorFlow's persistent XLA cache hit when a process traces other functions first?

Three fresh processes share one cache directory and fit the same jit_compile
sequence model on two batch lengths (2 programs): the first fills the
cache, the second is the same program (should load both), the third traces
three unrelated `tf.function`s before `fit`. Prints the files each added
(one per fresh compilation) as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = r'''
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np, tensorflow as tf, keras
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
'''


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TF_XLA_FLAGS=f"--tf_xla_persistent_cache_directory={cache}")
        added = {}
        for name, arg in (("first", "0"), ("same_program", "0"), ("other_functions_traced_first", "1")):
            before = len(os.listdir(cache))
            subprocess.run([sys.executable, "-c", CHILD, arg], env=env, check=True, capture_output=True)
            added[name] = len(os.listdir(cache)) - before
    print(json.dumps({"benchmark": "cache_key_check", "programs": 2, "files_added": added}, indent=2))


if __name__ == "__main__":
    main()
