"""The JAX benchmark scripts run (tiny smoke runs) and print what their docs promise."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _helpers import REPO

pytestmark = pytest.mark.slow


def test_bench_jax_overhead_has_an_aa_control():
    """A smoke run prints the guarded/bare ratio, the A/A ratio and an epoch per arm and round."""
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_jax_overhead.py"),
            "--rounds",
            "1",
            "--batches",
            "4",
            "--epochs",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["benchmark"] == "bench_jax_overhead" and doc["epochs_per_arm"] == 1
    assert set(doc["median_epoch_s"]) == {"bare", "guard", "bare_again"}
    assert doc["ratio"] == doc["median_epoch_s"]["guard"] / doc["median_epoch_s"]["bare"]
    assert doc["aa_ratio"] == doc["median_epoch_s"]["bare_again"] / doc["median_epoch_s"]["bare"]
