"""Smoke run of bench_compare: compare's projection against full runs."""

from __future__ import annotations

import pytest
from _helpers import BENCH, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_bench_compare_projects_and_trains_both_cases_in_full():
    """bench_compare runs compare and the full runs of both cases; compile counts are 1 and 2 by construction."""
    doc = script_json(
        run_script(
            BENCH / "bench_compare.py",
            "--rounds",
            "1",
            "--steps",
            "3",
            "--epochs",
            "1",
            "--mlp-batches",
            "4",
            "--seq-batches",
            "4",
            "--lengths",
            "2",
            "--seq-epochs",
            "1",
            "--width",
            "16",
            "--layers",
            "1",
            "--seq-width",
            "16",
        )
    )
    assert (doc["benchmark"], doc["rounds"], doc["steps"]) == ("compare_verdict", 1, 3)
    cases = {c["case"]: c for c in doc["cases"]}
    assert set(cases) == {"xla_pays", "xla_does_not_pay"}
    # One batch shape in the MLP's data; two sequence lengths in the other.
    for name, signatures, steps in (("xla_pays", 1, 4), ("xla_does_not_pay", 2, 4)):
        compared = cases[name]["compare"]
        assert (compared["planned_steps"], compared["planned_signatures"]) == (steps, signatures)
        assert compared["modes"]["plain"]["compilations"] == 0
        assert compared["modes"]["jit_compile"]["compilations"] == signatures
        assert compared["best_mode"] in ("plain", "jit_compile")
        case = cases[name]
        assert all(len(case["full_run_s"][m]) == 1 for m in ("plain", "jit_compile"))
        assert case["best_mode_compare"] == compared["best_mode"]
        assert all_positive(
            case["projected_jit_over_plain"], case["measured_jit_over_plain"], case["compare_cost_ratio"]
        )
        assert isinstance(case["ratio_within_tolerance"], bool)
    assert (doc["ratio_tolerance"], doc["cost_goal"]) == (0.25, 3.0)
