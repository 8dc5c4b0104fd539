"""Shared test helpers: tiny real Keras models, a guarded fit, a fresh interpreter.

Imported by test modules (`from _helpers import ...`; `tests/` is on
pytest's `pythonpath`); `conftest.py` only holds fixtures built on them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"


@dataclass
class Fit:
    """A finished `model.fit` run with an `XlaGuardCallback`."""

    model: Any
    callback: Any
    log_dir: Path
    history: Any


def make_data(n: int = 512, features: int = 16, seed: int = 0) -> tuple[Any, Any]:
    """Returns a small deterministic regression data set."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype("float32")
    y = (x[:, :1] * 0.3 + 0.1).astype("float32")
    return x, y


def make_model(jit_compile: bool | str, features: int = 16, seed: int = 0) -> Any:
    """Builds and compiles a small MLP with fixed initial weights."""
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((features,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    return model


def make_dataset(batch_size: int = 32) -> Any:
    """A tf.data pipeline over `make_data()` (16 batches)."""
    import tensorflow as tf

    x, y = make_data()
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)


def fit_with_guard(jit_compile: bool | str, log_dir: Path, epochs: int = 3, **guard_kwargs: Any) -> Fit:
    """Trains `make_model(jit_compile)` on `make_dataset()` with a guard."""
    from keras_xla_guard import XlaGuardCallback

    model = make_model(jit_compile)
    guard_kwargs.setdefault("verbose", 0)
    callback = XlaGuardCallback(log_dir=log_dir, **guard_kwargs)
    history = model.fit(make_dataset(), epochs=epochs, callbacks=[callback], verbose=0)
    return Fit(model, callback, Path(log_dir), history)


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 300) -> dict[str, Any]:
    """Runs `code` in a fresh interpreter and returns the JSON it prints last.

    Used where TensorFlow must start with a different environment (flags
    read once at import, another Keras backend).
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=str(REPO),
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"subprocess failed (rc={proc.returncode}):\nstdout:\n{proc.stdout[-3000:]}\n"
            f"stderr:\n{proc.stderr[-5000:]}"
        )
    return json.loads(lines[-1])


def assert_consistent(report: Any, *, steps: int | None = None, programs: int | None = None) -> None:
    """Fails unless a report's figures agree with each other (issue 29's consistency check).

    - the compile table's compilation rows add up to `compile_time_s` and
      number `compilations`;
    - `compile_time_s` (wall-clock) is at most the window (times the hosts
      of a combined report) and at most the thread-summed compile time;
    - the XLA share is `xla / (xla + plain ops)` of the report's own times,
      and no time is negative;
    - a device transfer figure exactly when times are device times, and
      per-program figures only then: their runs and times at most the
      report's launches and XLA time;
    - on device traces, the devices' figures add up to the totals, each
      device's share is its own, the runs' span is at least the busy time,
      and totals of several devices or hosts carry their label;
    - with `steps` and `programs` (XLA programs run per step) known:
      `xla_executions == steps * programs`.

    Args:
        report: An ok `CoverageReport`.
        steps: Steps the trace holds, when known. Defaults to `None`.
        programs: XLA programs each step runs, when known. Defaults to `None`.
    """
    assert report.status == "ok", report.reason
    compiled = [row for row in report.compile_table if not row.cache_hit]
    assert len(compiled) == report.compilations
    assert sum(row.compile_s for row in compiled) == _approx(report.compile_time_s)
    if report.window_wall_s is not None:
        assert report.compile_time_s <= report.window_wall_s * max(1, len(report.hosts))
    assert report.compile_time_s <= report.compile_thread_time_s * (1 + 1e-9)
    times = (
        report.xla_time_s,
        report.non_xla_op_time_s,
        report.compile_time_s,
        report.compile_thread_time_s,
        report.input_pipeline_time_s,
        report.eager_overhead_s,
        report.tracing_time_s,
        report.guard_op_time_s,
    )
    assert min(times) >= 0
    assert 0 <= report.eager_op_time_s <= report.eager_overhead_s * (1 + 1e-9)
    total = report.xla_time_s + report.non_xla_op_time_s
    assert report.xla_time_fraction == _approx(report.xla_time_s / total if total else 0.0)
    assert (report.transfer_time_s is not None) == (report.time_base == "device")
    if report.time_base == "host":
        assert report.programs == ()
    assert sum(p.runs for p in report.programs) <= report.xla_executions
    assert sum(p.time_s for p in report.programs) <= report.xla_time_s * (1 + 1e-9) + 1e-12
    assert all(p.runs > 0 and p.time_s > 0 for p in report.programs)
    # Device reports: each device's figures add up to the totals, its share is its own, and the runs'
    # span holds the busy time (issue 56).
    assert (report.xla_run_span_s is not None) == (report.time_base == "device")
    if report.devices:
        assert sum(d.xla_time_s for d in report.devices) == _approx(report.xla_time_s)
        assert sum(d.non_xla_op_time_s for d in report.devices) == _approx(report.non_xla_op_time_s)
        assert sum(d.launches for d in report.devices) == report.xla_executions
        assert sum(d.transfer_time_s for d in report.devices) == _approx(report.transfer_time_s)
        for d in report.devices:
            total = d.xla_time_s + d.non_xla_op_time_s
            assert d.xla_time_fraction == _approx(d.xla_time_s / total if total else 0.0)
        assert report.xla_run_span_s >= report.xla_time_s * (1 - 1e-9)
    assert (report.totals_label is not None) == (len(report.devices) > 1 or len(set(report.hosts)) > 1)
    if steps is not None and programs is not None:
        assert report.xla_executions == steps * programs


def _approx(value: float) -> Any:
    import pytest

    return pytest.approx(value, rel=1e-9, abs=1e-12)


def run_script(*argv: Any, timeout: float = 300) -> str:
    """Runs a script (or `-m module`) with this interpreter, the checkout's package first; returns stdout.

    The benchmark smoke tests (`tests/benchmarks/`) run each script with tiny
    arguments and pin only what such a run fixes by construction (steps, arms,
    compile counts, keys); timing ratios of tiny runs mean nothing and are
    only checked to be positive numbers (`all_positive`).
    """
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc.stdout


def script_json(stdout: str) -> dict[str, Any]:
    """The last JSON object a benchmark script printed (as `benchmarks/save_result.py` finds it)."""
    sys.path.insert(0, str(BENCH))
    from save_result import last_json_object

    return last_json_object(stdout)


def all_positive(*values: Any) -> bool:
    """Whether every value is a float above 0 (a timing of a tiny run: only its sign means anything)."""
    return all(isinstance(v, float) and v > 0 for v in values)
