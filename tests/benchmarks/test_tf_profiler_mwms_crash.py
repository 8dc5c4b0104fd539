"""Smoke run of tf_profiler_mwms_crash: the TensorFlow crash reproducer."""

from __future__ import annotations

import pytest
from _helpers import BENCH, run_script, script_json

pytestmark = pytest.mark.slow


def test_tf_crash_reproducer_runs_two_workers_and_counts_signals():
    """tf_profiler_mwms_crash with one tiny attempt: two workers ran; a crash, if any, is a signal."""
    doc = script_json(
        run_script(BENCH / "tf_profiler_mwms_crash.py", "--attempts", "1", "--windows", "1", "--steps", "1")
    )
    assert (doc["benchmark"], doc["attempts"], doc["windows"], doc["steps"]) == (
        "tf_profiler_mwms_crash",
        1,
        1,
        1,
    )
    (attempt,) = doc["runs"]
    assert len(attempt["returncodes"]) == 2
    # The peer of a worker that died is killed (SIGKILL): not a crash of its own.
    assert attempt["crashed_tasks"] == [t for t, c in enumerate(attempt["returncodes"]) if c < 0 and c != -9]
    assert doc["crashed"] == int(bool(attempt["crashed_tasks"]))
    if not attempt["crashed_tasks"]:
        assert attempt["returncodes"] == [0, 0]
