"""`python -m keras_xla_guard.demo`: see XLA coverage on a small model.

Trains the same small MLP twice on generated data for 3 epochs with
`XlaGuardCallback`: once with Keras' default `jit_compile="auto"` (which is
False on a CPU-only machine) and once with `jit_compile=True`, then prints
both coverage reports and the `tensorboard` command to view them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def _build_model(jit_compile: bool | str, features: int) -> Any:
    import keras

    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    return model


def main(argv: list[str] | None = None) -> int:
    """Runs the demo.

    Args:
        argv: Command-line arguments. Defaults to `sys.argv[1:]`.

    Returns:
        The process exit code.
    """
    parser = argparse.ArgumentParser(
        prog="python -m keras_xla_guard.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-dir",
        default=os.path.join("logs", "demo"),
        help="where traces and summaries go (default: %(default)s)",
    )
    parser.add_argument("--epochs", type=int, default=3, help="epochs per run (default: %(default)s)")
    parser.add_argument(
        "--json", action="store_true", help="end with one JSON line: every report of both runs"
    )
    args = parser.parse_args(argv)
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1. Received: {args.epochs}")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import warnings

    # Keras warns that shuffle is ignored for tf.data input; not news here.
    warnings.filterwarnings("ignore", message="`shuffle=True` was passed")
    import numpy as np
    import tensorflow as tf

    from keras_xla_guard import XlaGuardCallback

    features = 64
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, features)).astype("float32")
    y = (x[:, :1] * 0.5 + rng.standard_normal((4096, 1)) * 0.1).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).prefetch(2)

    log_dir = Path(args.log_dir)
    runs: list[tuple[str, bool | str]] = [("keras_default", "auto"), ("jit_compile", True)]
    reports = {}
    for run_name, jit in runs:
        print(f"\n== training with jit_compile={jit!r} ({args.epochs} epochs) ==", flush=True)
        model = _build_model(jit, features)
        guard = XlaGuardCallback(log_dir=log_dir / run_name, profile_epochs=range(1, args.epochs), verbose=0)
        model.fit(dataset, epochs=args.epochs, callbacks=[guard], verbose=2)
        reports[run_name] = guard.reports
        for report in guard.reports.values():
            print(report, flush=True)

    print("\nSummary (coverage = share of op time inside XLA executables):")
    for run_name, by_epoch in reports.items():
        figures = ", ".join(
            f"epoch {e}: {r.xla_time_fraction:.0%}" if r.ok else f"epoch {e}: {r.status}"
            for e, r in by_epoch.items()
        )
        print(f"  {run_name:<14} {figures}")
    print("\nView the coverage panels (Custom Scalars, Text, Profile tabs) with:")
    print(f"  tensorboard --logdir {log_dir}")
    if args.json:
        import json

        print(
            json.dumps(
                {
                    "epochs": args.epochs,
                    "runs": {
                        name: {str(e): r.to_dict() for e, r in by_epoch.items()}
                        for name, by_epoch in reports.items()
                    },
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
