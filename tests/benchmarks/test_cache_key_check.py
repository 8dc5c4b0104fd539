"""Smoke run of cache_key_check: when TensorFlow's persistent XLA cache hits."""

from __future__ import annotations

import pytest
from _helpers import BENCH, run_script, script_json

pytestmark = pytest.mark.slow


def test_cache_key_check_pins_when_tensorflow_s_persistent_cache_hits():
    """TF's XLA cache: a rerun adds no file; tracing other functions first misses (2 new files)."""
    doc = script_json(run_script(BENCH / "cache_key_check.py"))
    assert doc["benchmark"] == "cache_key_check"
    assert doc["files_added"] == {
        "first": doc["jit_programs"],
        "same_program": 0,
        "other_functions_traced_first": doc["jit_programs"],
        "autoclustering_first": 2,
        "autoclustering_second": 0,
    }
    assert doc["jit_programs"] == 2
