"""Smoke run of profiler_levels: XLA runs seen at every host tracer level."""

from __future__ import annotations

import pytest
from _helpers import BENCH, all_positive, run_script, script_json

pytestmark = pytest.mark.slow


def test_profiler_levels_sees_the_same_xla_runs_at_every_host_tracer_level():
    """profiler_levels: 6 profiled steps give 6 XLA executions and plain ops at levels 1, 2 and 3."""
    doc = script_json(run_script(BENCH / "profiler_levels.py"))
    assert (doc["benchmark"], doc["steps"]) == ("profiler_levels", 6)
    assert sorted(doc["levels"]) == ["1", "2", "3"]
    for level in doc["levels"].values():
        assert level["xla_executions"] == 6
        assert all_positive(level["xla_time_s"], level["non_xla_op_time_s"])
        assert "AssignVariableOp" in level["non_xla_op_types"]  # the optimizer update, outside XLA
