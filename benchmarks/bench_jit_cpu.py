"""Does `jit_compile=True` pay on this CPU? A MobileNetV2-like convnet, plain vs XLA, side by side.

The figures the guard's advice cites for its CPU caveat (docs/diagnosis.md,
"Advice that never slows or breaks a run"). `keras.applications.MobileNetV2`
(no pretrained weights, `--alpha` width, `--size` x `--size` RGB inputs,
10 classes) is built twice from the same initial weights, once compiled
plain and once with `jit_compile=True`. Each model's first `train_on_batch`
(trace and, for XLA, compile) is timed on its own; then blocks of
`--steps` steps alternate between the two models for `--rounds` rounds, so
both see the same machine load, and the median step time of each is
reported with their ratio.

Usage: python benchmarks/bench_jit_cpu.py [--rounds 5] [--steps 5]
       tiny smoke run: --rounds 1 --steps 1 --size 32 --alpha 0.35 --batch-size 2
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build(args: argparse.Namespace, jit_compile: bool) -> Any:
    """MobileNetV2 with the same initial weights every call."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(
        input_shape=(args.size, args.size, 3), alpha=args.alpha, weights=None, classes=10
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", jit_compile=jit_compile)
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed block")
    parser.add_argument("--size", type=int, default=96, help="input height and width")
    parser.add_argument("--alpha", type=float, default=0.35, help="MobileNetV2 width multiplier")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.random((args.batch_size, args.size, args.size, 3), dtype="float32")
    y = rng.integers(0, 10, (args.batch_size, 1))
    models = {"plain": build(args, False), "jit_compile": build(args, True)}
    first_step_s = {}
    for mode, model in models.items():
        gc.collect()
        start = time.perf_counter()
        model.train_on_batch(x, y)
        first_step_s[mode] = time.perf_counter() - start
    blocks: dict[str, list[float]] = {mode: [] for mode in models}
    for r in range(args.rounds):
        for mode in list(models) if r % 2 == 0 else list(models)[::-1]:
            model = models[mode]
            start = time.perf_counter()
            for _ in range(args.steps):
                model.train_on_batch(x, y)
            blocks[mode].append((time.perf_counter() - start) / args.steps)
    step_s = {mode: statistics.median(times) for mode, times in blocks.items()}
    doc = {
        "benchmark": "jit_compile_on_cpu",
        "model": f"MobileNetV2(alpha={args.alpha}, input {args.size}x{args.size}x3, 10 classes, weights=None)",
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "steps_per_block": args.steps,
        "params": int(models["plain"].count_params()),
        "first_step_s": first_step_s,
        "step_time_s": step_s,
        "step_time_blocks_s": blocks,
        "jit_over_plain_step_ratio": step_s["jit_compile"] / step_s["plain"],
        "devices": [d.device_type for d in tf.config.list_physical_devices()],
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
    raise SystemExit(main())
