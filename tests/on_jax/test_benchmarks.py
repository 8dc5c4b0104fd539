"""The JAX benchmark scripts run (tiny smoke runs) and print what their docs promise."""

from __future__ import annotations

import json

import pytest
from _helpers import BENCH, run_script

pytestmark = pytest.mark.slow


def test_bench_jax_overhead_has_an_aa_control():
    """A smoke run prints the guarded/bare ratio, the A/A ratio and an epoch per arm and round."""
    stdout = run_script(
        BENCH / "bench_jax_overhead.py", "--rounds", "1", "--batches", "4", "--epochs", "1", timeout=600
    )
    doc = json.loads(stdout)
    assert doc["benchmark"] == "bench_jax_overhead" and doc["epochs_per_arm"] == 1
    assert set(doc["median_epoch_s"]) == {"bare", "guard", "bare_again"}
    assert doc["ratio"] == doc["median_epoch_s"]["guard"] / doc["median_epoch_s"]["bare"]
    assert doc["aa_ratio"] == doc["median_epoch_s"]["bare_again"] / doc["median_epoch_s"]["bare"]


def test_stress_of_guarded_fits_runs_on_jax():
    """stress_warmup_interrupt.py --scenario fit on Keras on JAX: 4 fits hit by real SIGINTs leave nothing."""
    stdout = run_script(
        BENCH / "stress_warmup_interrupt.py",
        "--scenario",
        "fit",
        "--trials",
        "4",
        "--double-every",
        "2",
        timeout=600,
    )
    doc = json.loads(stdout)
    assert (doc["scenario"], doc["backend"], doc["trials"]) == ("fit", "jax", 4)
    assert sum(doc["outcomes"].values()) == 4 and doc["errors"] == [], doc
    assert (doc["leaked_profilers"], doc["guard_sessions_left"], doc["trials_with_leftover_wrappers"]) == (
        0,
        0,
        0,
    ), doc


def test_bench_jax_loop_has_an_aa_control_and_times_the_guards_own_call():
    """A smoke run of the JAX custom-loop benchmark: three arms, the A/A ratio, the guard's cost per call."""
    doc = json.loads(
        run_script(BENCH / "bench_jax_loop.py", "--rounds", "1", "--batches", "4", "--width", "16")
    )
    assert doc["benchmark"] == "jax_custom_loop_watch_overhead" and doc["steps_per_epoch"] == 4
    assert set(doc["epoch_ms_median"]) == {"watched", "bare", "bare_again"}
    # The ratio is of the unrounded medians; the printed ones are rounded to 0.01 ms.
    assert doc["ratio"] == pytest.approx(
        doc["epoch_ms_median"]["watched"] / doc["epoch_ms_median"]["bare"], rel=0.05
    )
    # Everything was compiled before the measurement: the guard counted no compilation.
    assert doc["compilations_counted"] == 0
    assert isinstance(doc["guard_us_per_call"], float) and doc["noop_us_per_call"] > 0
