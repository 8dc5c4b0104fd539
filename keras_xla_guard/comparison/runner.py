"""`compare`: is XLA worth it for this model and data, measured mode by mode.

The orchestration of the in-process comparison: the arguments are checked,
the batches taken once (`batches.py`), every mode measured on them
(`measure.py`), the planned run projected (`core.py`) and the result
written beside the guard's runs (`output/compare_summaries.py`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keras_xla_guard._checks import check_int
from keras_xla_guard.comparison.batches import planned_run, take_batches
from keras_xla_guard.comparison.core import build_report, validate_modes
from keras_xla_guard.comparison.measure import (
    autoclustering_ready,
    autoclustering_refusal,
    measure_side_by_side,
)
from keras_xla_guard.comparison.report import CompareReport, describe_model
from keras_xla_guard.output.compare_summaries import COMPARE_SUBDIR, write_summaries

__all__ = ["compare"]


def compare(
    model: Any,
    x: Any,
    y: Any = None,
    *,
    batch_size: int | None = None,
    steps: int = 50,
    modes: Sequence[str] = ("plain", "jit_compile"),
    planned_epochs: int | None = None,
    planned_steps_per_epoch: int | None = None,
    log_dir: str | os.PathLike[str] | None = None,
) -> CompareReport:
    """Measures whether XLA pays for this model and data, mode by mode.

    Each mode trains its own clone of `model` (same initial weights, same
    optimizer configuration, loss and metrics) on the same `steps` batches,
    taken once from `x`. Compilations are counted in a real profiler trace;
    step times are the steady-state median of unprofiled steps. `model`
    itself is not trained and its `jit_compile` is not changed.

    Args:
        model: A compiled Keras 3 model (TensorFlow backend).
        x: Anything `fit` takes: arrays (with `y`), a `tf.data.Dataset`,
            a `keras.utils.PyDataset`, a generator.
        y: Targets for array inputs. Defaults to `None`.
        batch_size: Batch size for array inputs. Defaults to `32` there.
        steps: Batches each mode trains on. Defaults to `50`.
        modes: At least two of `"plain"`, `"jit_compile"`,
            `"autoclustering"`. Defaults to `("plain", "jit_compile")`.
            `"autoclustering"` on a CPU-only machine needs
            `TF_XLA_FLAGS=--tf_xla_cpu_global_jit` before TensorFlow starts
            (use the `keras-xla-guard compare` CLI, which runs each mode in
            its own process).
        planned_epochs: Epochs of the run to project. Defaults to `1`.
        planned_steps_per_epoch: Steps per epoch of that run. Defaults to
            the data's length (or `steps` when the data has no known end).
        log_dir: The guard's log dir: the compile passes' traces and the
            TensorBoard summaries go under `<log_dir>/compare/`. Defaults
            to `"logs/xla_guard"`.

    Returns:
        A `CompareReport`.

    Raises:
        ValueError: On a bad argument, an uncompiled model, or
            `"autoclustering"` where it cannot run (see `modes`).
        ProfilerBusyError: If another profiler is running.

    Example:

    ```python
    report = keras_xla_guard.compare(model, x_train, y_train, batch_size=64,
                                     planned_epochs=10)
    print(report.verdict)
    ```
    """
    started = time.perf_counter()
    modes = validate_modes(modes)
    check_int("steps", steps, minimum=1)
    check_int("planned_epochs", planned_epochs, minimum=1, allow_none=True)
    check_int("planned_steps_per_epoch", planned_steps_per_epoch, minimum=1, allow_none=True)
    check_int("batch_size", batch_size, minimum=1, allow_none=True)
    if log_dir is None:
        from keras_xla_guard.runtime.config import DEFAULT_LOG_DIR

        log_dir = DEFAULT_LOG_DIR
    import tensorflow as tf

    if "autoclustering" in modes and not autoclustering_ready(tf):
        raise autoclustering_refusal()
    data = take_batches(x, y, batch_size=batch_size, steps=steps)
    figures = measure_side_by_side(model, data.batches, modes, Path(log_dir) / COMPARE_SUBDIR)
    planned_steps, planned_signatures, counted_from = planned_run(
        data, steps, planned_epochs, planned_steps_per_epoch
    )
    report = build_report(
        figures,
        planned_steps=planned_steps,
        planned_signatures=planned_signatures,
        signatures_counted_from=counted_from,
    )
    report = dataclasses.replace(report, wall_s=time.perf_counter() - started, model=describe_model(model))
    write_summaries(report, log_dir)
    return report
