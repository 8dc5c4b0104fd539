"""Smoke run of complete_params_threads: where CompleteParams events end."""

from __future__ import annotations

import pytest
from _helpers import BENCH, run_script, script_json

pytestmark = pytest.mark.slow


def test_complete_params_events_end_on_grpc_threads_only_on_the_non_chief():
    """complete_params_threads: worker 1's CompleteParams events end on gRPC threads, the chief's never."""
    doc = script_json(run_script(BENCH / "complete_params_threads.py"))
    assert (doc["benchmark"], doc["event"]) == ("complete_params_threads", "CompleteParams")
    assert sorted(doc["workers"]) == ["worker_0", "worker_1"]
    for worker, windows in doc["workers"].items():
        assert sorted(windows) == ["epoch0", "epoch2"]
        for threads in windows.values():
            assert sum(threads.values()) > 0
            grpc = {t for t in threads if t.startswith("tf_Grpc")}
            assert grpc == (set(threads) if worker == "worker_1" else set())
