"""Figures the package quotes to its users equal the saved benchmark results they come from."""

from __future__ import annotations

import json

from _helpers import REPO

from keras_xla_guard.distributed import ALL_WORKERS_CRASHES


def test_all_workers_crash_rates_are_the_newest_guard_all_stress_result() -> None:
    """The rates `profile_workers="all"` warns with are the newest saved `guard-all` stress run's,
    per scenario, so a new run that measures otherwise cannot leave the warning behind."""
    runs = []
    for path in sorted((REPO / "benchmarks" / "results").glob("stress_multiworker-*.json")):
        doc = json.loads(path.read_text())
        if doc["args"][doc["args"].index("--modes") + 1] == "guard-all":
            runs.append(doc["result"]["summary"])
    assert runs
    newest = runs[-1]
    assert {
        key.split("/")[1]: (row["crash"], row["runs"]) for key, row in newest.items()
    } == ALL_WORKERS_CRASHES
