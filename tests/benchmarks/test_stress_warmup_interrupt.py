"""Smoke run of stress_warmup_interrupt's guarded-fit scenario (its warm_up scenario runs in tests/test_warmup.py)."""

from __future__ import annotations

import pytest
from _helpers import BENCH, run_script, script_json

pytestmark = pytest.mark.slow


def test_guarded_fits_hit_by_real_sigints_leave_nothing_behind():
    """6 guarded fits, each hit by a real SIGINT (every 2nd by two): no profiler, session or wrapper left."""
    doc = script_json(
        run_script(
            BENCH / "stress_warmup_interrupt.py", "--scenario", "fit", "--trials", "6", "--double-every", "2"
        )
    )
    assert (doc["scenario"], doc["backend"], doc["trials"], doc["double_signal_trials"]) == (
        "fit",
        "tensorflow",
        6,
        3,
    )
    assert sum(doc["outcomes"].values()) == 6 and doc["errors"] == [], doc
    assert (doc["leaked_profilers"], doc["guard_sessions_left"], doc["trials_with_leftover_wrappers"]) == (
        0,
        0,
        0,
    ), doc
    assert doc["run_files_unreadable"] == 0, doc
