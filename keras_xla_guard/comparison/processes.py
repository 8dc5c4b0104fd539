"""`compare` with each mode in its own fresh process (the CLI's way).

A fresh process per mode keeps each mode's memory figure its own and lets
auto-clustering on CPU start TensorFlow with `TF_XLA_FLAGS` set. Nothing
here imports TensorFlow except the final TensorBoard write.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from keras_xla_guard._checks import check_int
from keras_xla_guard.comparison.core import build_report, validate_modes
from keras_xla_guard.comparison.measure import AUTOCLUSTERING_CPU_FLAG
from keras_xla_guard.comparison.report import CompareReport, ModeFigures
from keras_xla_guard.output.compare_summaries import COMPARE_SUBDIR, write_summaries
from keras_xla_guard.runtime.config import DEFAULT_LOG_DIR

__all__ = ["DEFAULT_TIMEOUT_S", "compare_in_processes"]

DEFAULT_TIMEOUT_S = 3600.0
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def _env(mode: str) -> dict[str, str]:
    env = dict(os.environ)
    # The worker must import this very copy of the package.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    flags = env.get("TF_XLA_FLAGS", "")
    if mode == "autoclustering" and AUTOCLUSTERING_CPU_FLAG not in flags.split():
        env["TF_XLA_FLAGS"] = f"{flags} {AUTOCLUSTERING_CPU_FLAG}".strip()
    return env


def compare_in_processes(
    target: str,
    *,
    modes: Sequence[str] = ("plain", "jit_compile"),
    steps: int = 50,
    batch_size: int | None = None,
    planned_epochs: int | None = None,
    planned_steps_per_epoch: int | None = None,
    log_dir: str | os.PathLike[str] = DEFAULT_LOG_DIR,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> CompareReport:
    """Runs `compare` on `module_or_file:function`, each mode in a fresh process.

    Args:
        target: `module_or_file:function`; the function returns
            `(model, data)`, data being anything `fit` takes as `x` or a
            `(x, y)` tuple of arrays.
        modes: The modes, as `compare` takes them. Defaults to
            `("plain", "jit_compile")`.
        steps: Batches each mode trains on. Defaults to `50`.
        batch_size: Batch size for array data. Defaults to `None` (32).
        planned_epochs: Epochs of the run to project. Defaults to `None` (1).
        planned_steps_per_epoch: Steps per epoch of that run. Defaults to
            `None` (the data's length).
        log_dir: The guard's log dir; traces and summaries go under
            `<log_dir>/compare/`. Defaults to `"logs/xla_guard"`.
        timeout_s: Time limit of each mode's process. Defaults to 3600.

    Returns:
        The `CompareReport`, its summaries written to TensorBoard.

    Raises:
        ValueError: On a bad argument, or when a mode's process failed
            (the message holds its error). `timeout_s` must be a positive,
            finite number.
    """
    from keras_xla_guard.comparison._worker import parse_target

    started = time.perf_counter()
    modes = validate_modes(modes)
    parse_target(target)
    check_int("steps", steps, minimum=1)
    for name, value in (
        ("batch_size", batch_size),
        ("planned_epochs", planned_epochs),
        ("planned_steps_per_epoch", planned_steps_per_epoch),
    ):
        check_int(name, value, minimum=1, allow_none=True)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < math.inf:
        raise ValueError(
            f"`timeout_s` must be a positive number of seconds. Received: timeout_s={timeout_s!r}"
        )
    figures, planned, model = [], None, None
    with tempfile.TemporaryDirectory(prefix="kxg-compare-") as work:
        for mode in modes:
            argv = [
                sys.executable,
                "-m",
                "keras_xla_guard.comparison._worker",
                target,
                mode,
                work,
                str(Path(log_dir) / COMPARE_SUBDIR),
                "--steps",
                str(steps),
            ]
            for flag, value in (
                ("--batch-size", batch_size),
                ("--planned-epochs", planned_epochs),
                ("--planned-steps-per-epoch", planned_steps_per_epoch),
            ):
                if value is not None:
                    argv += [flag, str(value)]
            try:
                proc = subprocess.run(
                    argv, env=_env(mode), capture_output=True, text=True, timeout=timeout_s, check=False
                )
            except subprocess.TimeoutExpired:
                raise ValueError(
                    f"mode {mode!r} did not finish within {timeout_s:g} s. Received: target={target!r}"
                ) from None
            out = Path(work) / f"{mode}.json"
            if not out.is_file():
                last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise ValueError(f"mode {mode!r} failed (exit {proc.returncode}): {last}")
            doc = json.loads(out.read_text())
            if "error" in doc:
                raise ValueError(f"mode {mode!r} failed: {doc['error']}")
            figures.append(ModeFigures.from_dict(doc["figures"]))
            planned = planned or doc["planned"]
            model = doc.get("model")
    assert planned is not None
    report = build_report(
        figures, planned_steps=planned[0], planned_signatures=planned[1], signatures_counted_from=planned[2]
    )
    report = dataclasses.replace(report, wall_s=time.perf_counter() - started, model=model)
    write_summaries(report, log_dir)
    return report
