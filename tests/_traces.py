"""Real traces for tests: tiny Keras fits under the real TF profiler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from keras_xla_guard.trace.xplane import find_trace_files


def tiny_model(jit_compile: bool) -> Any:
    """A small MLP with fixed initial weights."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    return model


def tiny_data(n: int = 48) -> tuple[Any, Any]:
    """`n` deterministic samples with 8 features and one target."""
    import numpy as np

    x = np.random.default_rng(0).standard_normal((n, 8)).astype("float32")
    return x, x[:, :1] * 0.5


def profiled_fit(log_dir: Path, jit_compile: bool, samples: int = 48) -> Path:
    """Fits `tiny_model` one epoch (batches of 8), all under the profiler.

    Returns:
        The trace file written under `log_dir`; with `jit_compile=True` it
        holds the XLA compilation of the first step.
    """
    import tensorflow as tf

    model = tiny_model(jit_compile)
    x, y = tiny_data(samples)
    before = set(log_dir.rglob("*.xplane.pb"))
    tf.profiler.experimental.start(str(log_dir))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    tf.profiler.experimental.stop()
    (trace,) = set(find_trace_files(log_dir, all_runs=True)) - before
    return trace


def step_markers(trace_path: Path | str) -> list[int]:
    """The `step_num` of every `train` step region in a trace, sorted."""
    from keras_xla_guard.trace.xplane import load_xspace

    steps = []
    for plane in load_xspace(trace_path).planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                if plane.event_metadata[event.metadata_id].name == "train":
                    stats = {names[s.metadata_id]: s for s in event.stats}
                    steps.append(stats["step_num"].int64_value or stats["step_num"].uint64_value)
    return sorted(steps)
