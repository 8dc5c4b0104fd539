"""Smoke run of bench_compile_cost: warm-up and the persistent cache against window compiles."""

from __future__ import annotations

import pytest
from _helpers import BENCH, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_bench_compile_cost_one_round_shows_warm_up_and_cache_removing_window_compiles():
    """One round: 4 bucket shapes compile 4 programs plain, 0 after warm_up, 0 from a filled cache."""
    doc = script_json(run_script(BENCH / "bench_compile_cost.py", "--rounds", "1"))
    assert (doc["benchmark"], doc["epochs"], doc["bucket_shapes"]) == ("bench_compile_cost", 3, 4)
    (round_,) = doc["rounds"]
    assert (round_["plain"]["window_compilations"], round_["plain"]["cache_hits"]) == (4, 0)
    assert (round_["warm_up"]["window_compilations"], round_["warm_up"]["cache_hits"]) == (0, 4)
    assert (round_["cache_first"]["window_compilations"], round_["cache_first"]["cache_files_added"]) == (
        4,
        4,
    )
    assert (
        round_["cache_second"]["window_compilations"],
        round_["cache_second"]["cache_files_added"],
        round_["cache_second"]["cache_hits"],
    ) == (0, 0, 4)
    assert round_["cache_second"]["persistent_cache"] == round_["cache_first"]["persistent_cache"]
    assert round_["warm_up_cache_second"]["window_compilations"] == 0
    assert round_["plain"]["persistent_cache"] is None
    assert all_positive(
        round_["plain"]["first_epoch_s"], round_["warm_up"]["warm_up_s"], round_["plain"]["window_compile_s"]
    )
