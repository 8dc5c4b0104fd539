"""Smoke run of bench_overhead: the guard's overhead with its A/A controls."""

from __future__ import annotations

import pytest
from _helpers import BENCH, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_bench_overhead_has_aa_controls_for_both_ratios():
    """bench_overhead prints both ratios, each beside its A/A control."""
    doc = script_json(
        run_script(BENCH / "bench_overhead.py", "--pairs", "1", "--steps", "2", "--batches", "8")
    )
    assert (doc["benchmark"], doc["pairs"], doc["steps_per_epoch"]) == ("callback_overhead", 1, 8)
    assert doc["track_signatures"] is True
    unprofiled, profiled = doc["unprofiled"], doc["profiled_vs_keras_tensorboard"]
    assert all_positive(unprofiled["ratio_median"], unprofiled["aa_ratio"])
    assert all_positive(profiled["ratio_median"], profiled["aa_ratio"])
    assert (profiled["profiled_steps"], profiled["goal"], unprofiled["goal"]) == (2, 1.10, 1.01)
    assert set(doc["machine"]) >= {"cpus", "tensorflow", "keras", "load_avg_1min"}
