"""Smoke run of bench_signatures: signature tracking's cost, both variants."""

from __future__ import annotations

import pytest
from _helpers import BENCH, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_bench_signatures_runs_both_variants():
    """bench_signatures measures the dynamic and the static input; the static one records nothing."""
    doc = script_json(
        run_script(
            BENCH / "bench_signatures.py",
            "--rounds",
            "1",
            "--batches",
            "8",
            "--steps",
            "40",
            "--spe",
            "1",
            "--width",
            "16",
        )
    )
    assert (doc["benchmark"], doc["rounds"], doc["steps_per_epoch"]) == ("signature_tracking_overhead", 1, 8)
    variants = {v["variant"]: v for v in doc["variants"]}
    assert set(variants) == {"dynamic_spe1", "static_spe1"}
    # A fully static element_spec needs no recording (docs/signatures.md, "How batches are observed").
    assert variants["static_spe1"]["record_us_per_batch"] == 0.0
    for v in variants.values():
        assert v["steps_per_execution"] == 1
        assert set(v["step_us_median"]) == {"tracked", "untracked", "untracked_again"}
        assert all_positive(v["ratio"], v["aa_ratio"])
