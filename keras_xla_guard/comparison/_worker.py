"""Runs one `compare` mode in its own process (used by `keras-xla-guard compare`).

Usage: python -m keras_xla_guard.comparison._worker TARGET MODE WORK_DIR LOG_DIR
       --steps N [--batch-size B] [--planned-epochs E] [--planned-steps-per-epoch S]

`TARGET` is `module_or_file:function`; the function returns `(model, data)`.
The first mode's process takes the compared batches and the model's
initial weights and leaves them in `WORK_DIR`; every later mode loads both,
so all modes train from the same weights on the same batches. The result
(or a one-line error) goes to `WORK_DIR/<MODE>.json`; the exit code is 0 on
success, 2 on an error.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

__all__ = ["load_target", "parse_target", "split_data"]

BATCHES_FILE = "batches.pkl"
WEIGHTS_FILE = "initial.weights.h5"


def parse_target(target: str) -> tuple[str, str]:
    """Splits `module_or_file:function`, checking its form (not importing it).

    Args:
        target: E.g. `"train.py:build"` or `"mypkg.models:build"`.

    Returns:
        `(module_or_file, function)`.

    Raises:
        ValueError: If it is not of that form, or names a `.py` file that
            does not exist.
    """
    module, sep, function = target.rpartition(":")
    if not sep or not module or not function.isidentifier():
        raise ValueError(
            "the target must be `module_or_file:function`, the function returning "
            f"(model, data). Received: target={target!r}"
        )
    if module.endswith(".py") and not Path(module).is_file():
        raise ValueError(f"no such file {module!r}. Received: target={target!r}")
    return module, function


def load_target(target: str) -> Any:
    """Imports the function `module_or_file:function` names.

    Args:
        target: As `parse_target` takes it; a module is looked up from the
            current directory first.

    Returns:
        The function.

    Raises:
        ValueError: If the module or the function cannot be found.
    """
    module_name, function = parse_target(target)
    if module_name.endswith(".py"):
        spec = importlib.util.spec_from_file_location("_compare_target", module_name)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"cannot import {module_name!r} ({e}). Received: target={target!r}") from None
    found = getattr(module, function, None)
    if not callable(found):
        # A bad target is bad input (exit 2), whatever its type.
        raise ValueError(f"{module_name!r} has no function {function!r}. Received: target={target!r}")
    return found


def split_data(data: Any) -> tuple[Any, Any]:
    """`(x, y)` of what the target returned as data: a `(x, y)` tuple of arrays, or `x`."""
    if isinstance(data, tuple) and len(data) == 2:
        return data[0], data[1]
    return data, None


def _run(args: argparse.Namespace) -> dict[str, Any]:
    from keras_xla_guard.comparison.batches import Batches, planned_run, take_batches
    from keras_xla_guard.comparison.measure import measure_mode
    from keras_xla_guard.comparison.report import describe_model

    built = load_target(args.target)()
    if not isinstance(built, tuple) or len(built) != 2:
        raise ValueError(f"{args.target} must return (model, data). Received: {type(built).__name__}")
    model, data = built
    work = Path(args.work_dir)
    if (work / BATCHES_FILE).is_file():
        with open(work / BATCHES_FILE, "rb") as f:
            batches: Batches = pickle.load(f)
        model.load_weights(work / WEIGHTS_FILE)
    else:
        x, y = split_data(data)
        batches = take_batches(x, y, batch_size=args.batch_size, steps=args.steps)
        model.save_weights(work / WEIGHTS_FILE)
        with open(work / BATCHES_FILE, "wb") as f:
            pickle.dump(batches, f)
    figures = measure_mode(model, batches.batches, args.mode, Path(args.log_dir) / args.mode)
    planned = planned_run(batches, args.steps, args.planned_epochs, args.planned_steps_per_epoch)
    return {"figures": figures.to_dict(), "planned": list(planned), "model": describe_model(model)}


def main(argv: list[str] | None = None) -> int:
    """Runs one mode; writes `WORK_DIR/<MODE>.json`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="keras_xla_guard.comparison._worker")
    parser.add_argument("target")
    parser.add_argument("mode")
    parser.add_argument("work_dir")
    parser.add_argument("log_dir")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--planned-epochs", type=int)
    parser.add_argument("--planned-steps-per-epoch", type=int)
    args = parser.parse_args(argv)
    out = Path(args.work_dir) / f"{args.mode}.json"
    try:
        doc = _run(args)
    except Exception as e:  # noqa: BLE001 - the user's function may raise anything
        # The parent turns this into its one-line error.
        out.write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 2
    out.write_text(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
