"""Smoke run of bench_doctor: the doctor command's cost."""

from __future__ import annotations

import os

import pytest
from _helpers import BENCH, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_bench_doctor_runs_the_command_both_ways():
    """bench_doctor runs `doctor --json` with and without the probe and reports the probe's cost."""
    doc = script_json(run_script(BENCH / "bench_doctor.py", "--rounds", "1"))
    assert (doc["rounds"], doc["cpus"]) == (1, os.cpu_count())
    assert all_positive(
        doc["doctor_wall_s_median"], doc["no_probe_wall_s_median"], doc["probe_child_s_median"]
    )
