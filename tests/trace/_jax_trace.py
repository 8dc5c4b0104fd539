"""Writes `data/jax_cpu.xplane.pb.gz`: a real JAX CPU trace of 4 Keras steps, as a guard's window sees them.

Keras 3 on JAX (`KERAS_BACKEND=jax`) trains a small MLP for one epoch, then
`jax.profiler` traces 4 `train_on_batch` calls with the Python tracer off
(`ProfileOptions.python_tracer_level = 0`), each inside
`jax.profiler.StepTraceAnnotation("train", step_num=step)`. The first call
compiles `train_on_batch`'s own `jit_train_step` (step 0); each step then
launches 3 programs: two small eager ones that XLA:CPU runs inline on the
Python thread, and `jit_train_step`, which the Python thread launches and
the `XLAPjRtCpuClient` thread runs (`ThunkExecutor::Execute`).

Made with jax 0.10.2 and Keras 3.15.1 (the shared venv); regenerate with:

```
KERAS_BACKEND=jax .venv/bin/python tests/trace/_jax_trace.py
```
"""

from __future__ import annotations

import gzip
import os
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "jax_cpu.xplane.pb.gz"
STEPS = 4


def main() -> None:
    """Trains, traces and writes the gzipped trace."""
    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    x = np.random.default_rng(0).standard_normal((256, 16)).astype("float32")
    y = x[:, :1] * 0.3
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    with tempfile.TemporaryDirectory() as logdir:
        jax.profiler.start_trace(logdir, profiler_options=options)
        for step in range(STEPS):
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                model.train_on_batch(x[step * 32 : (step + 1) * 32], y[step * 32 : (step + 1) * 32])
        jax.profiler.stop_trace()
        (trace,) = Path(logdir).glob("plugins/profile/*/*.xplane.pb")
        OUT.write_bytes(gzip.compress(trace.read_bytes(), mtime=0))
    print(OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
