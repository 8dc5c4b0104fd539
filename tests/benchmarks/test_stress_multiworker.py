"""Smoke run of stress_multiworker: crash counting of multi-worker runs."""

from __future__ import annotations

import pytest
from _helpers import BENCH, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_stress_multiworker_counts_one_unprofiled_pair():
    """stress_multiworker with one run of the unprofiled loop: one pair, trained, counted ok."""
    doc = script_json(
        run_script(BENCH / "stress_multiworker.py", "--runs", "1", "--modes", "none", "--scenarios", "loop")
    )
    assert (doc["benchmark"], doc["runs_per_mode"]) == ("stress_multiworker", 1)
    assert (doc["epochs"], doc["steps_per_epoch"], doc["profiled_epochs"]) == (3, 6, [0, 1, 2])
    assert list(doc["summary"]) == ["none/loop"]
    summary = doc["summary"]["none/loop"]
    assert (summary["runs"], summary["ok"], summary["crash"], summary["error"]) == (1, 1, 0, 0)
    assert summary["crashed_workers"] == []
    (run,) = [r for r in doc["runs"] if r["outcome"] != "port"]
    assert (run["mode"], run["scenario"]) == ("none", "loop")
    assert run["report_statuses"] == [{}, {}]  # no guard, no reports
    assert run["traces"] == [0, 0]  # no profiler
    assert all_positive(run["wall_s"])
