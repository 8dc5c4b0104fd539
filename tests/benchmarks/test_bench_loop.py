"""Smoke run of bench_loop: the custom-loop guard's cost per step."""

from __future__ import annotations

import pytest
from _helpers import BENCH, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_bench_loop_has_an_aa_control():
    """bench_loop times the watched, bare and bare-again arms, prints the A/A ratio and the guard's own cost per call."""
    doc = script_json(run_script(BENCH / "bench_loop.py", "--rounds", "1", "--batches", "4", "--width", "16"))
    assert (doc["benchmark"], doc["rounds"], doc["steps_per_epoch"], doc["hidden_units"]) == (
        "custom_loop_watch_overhead",
        1,
        4,
        16,
    )
    assert set(doc["epoch_ms_median"]) == {"watched", "bare", "bare_again"}
    assert all_positive(doc["ratio"], doc["aa_ratio"], doc["cpu_ratio"])
    assert set(doc["machine"]) >= {"cpus", "tensorflow", "keras", "load_avg_1m"}
    assert isinstance(doc["guard_us_per_call"], float)
    assert doc["guard_share_of_bare_step"] == pytest.approx(
        doc["guard_us_per_call"] / doc["step_us_median"]["bare"], rel=0.01, abs=2e-4
    )
    assert doc["epoch_scope_ms"] > 0
    # Both rounded: the milliseconds to 0.01 (1.25 us a step of 4), the microseconds to 0.1.
    assert doc["epoch_scope_us_per_step"] == pytest.approx(1e3 * doc["epoch_scope_ms"] / 4, abs=1.3)
