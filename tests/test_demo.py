"""The demo (`python -m keras_xla_guard.demo`, what `make demo` runs), in a short run of its own."""

from __future__ import annotations

import json

import pytest
from _helpers import run_script

pytestmark = pytest.mark.slow


def test_demo_json_reports_both_runs(tmp_path):
    """The demo's --json line: Keras' default is 0% XLA on CPU, jit_compile=True one run per step."""
    stdout = run_script(
        "-m", "keras_xla_guard.demo", "--epochs", "2", "--log-dir", tmp_path / "demo", "--json"
    )
    doc = json.loads(stdout.strip().splitlines()[-1])
    assert doc["epochs"] == 2
    assert set(doc["runs"]) == {"keras_default", "jit_compile"}
    # Epoch 1 is the one profiled; 4096 rows in batches of 64 is 64 steps,
    # of which the defaults (skip 2, at most 20) profile 20.
    default, jit = doc["runs"]["keras_default"]["1"], doc["runs"]["jit_compile"]["1"]
    # jit_compile="auto" resolves to False on a CPU-only machine.
    assert (default["xla_time_fraction"], default["xla_executions"]) == (0.0, 0)
    assert (jit["steps_profiled"], jit["xla_executions"], jit["compilations"]) == (20, 20, 0)
    assert default["steps_profiled"] == 20
