"""Smoke run of bench_jit_cpu: jit_compile against plain on one convnet on the CPU."""

from __future__ import annotations

import pytest
from _helpers import BENCH, run_script, script_json

pytestmark = pytest.mark.slow


def test_bench_jit_cpu_times_both_modes_of_one_mobilenet():
    """bench_jit_cpu: one MobileNetV2, plain and jit_compile, first step and the alternated blocks of each."""
    doc = script_json(
        run_script(
            BENCH / "bench_jit_cpu.py",
            "--rounds",
            "2",
            "--steps",
            "1",
            "--size",
            "32",
            "--alpha",
            "0.35",
            "--batch-size",
            "2",
        )
    )
    assert doc["benchmark"] == "jit_compile_on_cpu" and doc["devices"] == ["CPU"]
    assert doc["model"] == "MobileNetV2(alpha=0.35, input 32x32x3, 10 classes, weights=None)"
    assert set(doc["step_time_s"]) == set(doc["first_step_s"]) == {"plain", "jit_compile"}
    assert all(len(blocks) == 2 and min(blocks) > 0 for blocks in doc["step_time_blocks_s"].values())
    assert doc["jit_over_plain_step_ratio"] == doc["step_time_s"]["jit_compile"] / doc["step_time_s"]["plain"]
