"""Smoke run of bench_fix: the fix-pays benchmark, through save_result."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _helpers import BENCH, REPO, all_positive, run_script

pytestmark = pytest.mark.slow


def test_bench_fix_counts_each_arms_compilations_in_traces(tmp_path):
    """bench_fix (via save_result): traced compiles 4 / len(boundaries) / 0, as the guard predicts."""
    saved = Path(
        run_script(
            BENCH / "save_result.py",
            "--results-dir",
            tmp_path,
            BENCH / "bench_fix.py",
            "--rounds",
            "1",
            "--epochs",
            "1",
            "--examples",
            "256",
            "--batch-size",
            "64",
        ).strip()
    )
    assert saved.parent == tmp_path and saved.name.startswith("bench_fix-")
    doc = json.loads(saved.read_text())
    assert set(doc["machine"]) >= {
        "cpus",
        "load_avg_1min_before",
        "load_avg_1min_after",
        "tensorflow",
        "keras",
        "python",
    }
    assert doc["args"][:2] == ["--rounds", "1"]

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True, check=True).stdout

    # The code the result belongs to: the commit, and what was changed on top.
    assert doc["code"] == {
        "commit": git("rev-parse", "--short", "HEAD").strip(),
        "changed_files": sorted(
            line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
        ),
    }
    result = doc["result"]
    assert (result["benchmark"], result["rounds"], result["epochs"]) == ("fix_pays", 1, 1)
    arms = result["arms"]
    assert set(arms) == {"xla_unfixed", "xla_bucketed", "no_xla"}
    # 256 examples in batches of 64: 4 batches, each its own length (sorted
    # uniform lengths 64..128), so 4 XLA compiles; no XLA, no compiles.
    unfixed, bucketed, plain = arms["xla_unfixed"], arms["xla_bucketed"], arms["no_xla"]
    assert (unfixed["steps_per_epoch"], unfixed["distinct_shapes"]) == (4, 4)
    assert unfixed["xla_compiles"] == unfixed["guard_expected_compilations"] == 4
    assert (plain["xla_compiles"], plain["guard_expected_compilations"]) == (0, None)
    # The guard's advice, applied: one compile per bucket it recommended.
    assert result["guard_advice"].startswith("fix: pad input x dim 1 to ")
    boundaries = result["recommended_boundaries"]
    assert 1 <= len(boundaries) < 4 and boundaries[-1] == 128
    assert bucketed["xla_compiles"] == bucketed["distinct_shapes"] == len(boundaries)
    assert bucketed["guard_expected_compilations"] == len(boundaries)
    for arm in arms.values():
        assert len(arm["total_s_rounds"]) == 1 and all_positive(arm["step_ms_median"])
