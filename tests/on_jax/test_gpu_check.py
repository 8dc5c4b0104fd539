"""benchmarks/gpu_check.py, the GPU machine's prepared script, run on this CPU so it cannot rot."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest
from _helpers import REPO

pytestmark = pytest.mark.slow
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def _run(*args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_without_a_gpu_it_says_so_trains_nothing_and_exits_0():
    """No GPU and no --dry-run: gpu=false JSON naming why, nothing trained, exit 0, TensorFlow not needed."""
    rc, doc = _run()
    assert rc == 0
    assert (doc["benchmark"], doc["gpu"], doc["ran"], doc["ok"], doc["gpus"]) == (
        "gpu_check",
        False,
        False,
        True,
        [],
    )
    assert "no GPU" in doc["reason"] and "windows" not in doc
    assert doc["machine"]["tensorflow_importable"] is False


def test_the_dry_run_checks_every_host_figure_against_xprof_and_jax_monitoring(tmp_path):
    """--dry-run on CPU: both windows agree with xprof and jax.monitoring; device checks null; saved JSON and trace."""
    golden = tmp_path / "jax_cpu.xplane.pb.gz"
    rc, doc = _run("--dry-run", "--steps", "3", "--save", "--results", str(tmp_path), "--golden", str(golden))
    assert rc == 0 and doc["ok"] and doc["dry_run"]
    # Two new signatures; Keras 3.10 on JAX 0.6 compiles the step again when the state's placement changes.
    counted = doc["train_compilations"]
    assert counted["guard"] == counted["jax_monitoring"] >= 2
    for window in doc["windows"].values():
        checks = window["checks"]
        assert {k: v for k, v in checks.items() if v is not None} == {
            "report_ok": True,
            "steps_match_xprof": True,
            "launches_match_xprof": True,
            "compilations_match_xprof": True,
            "compilations_match_monitoring": True,
            "steps_are_the_windows_markers": True,
        }
        # The device checks (XLA time vs hlo_stats, kernel time vs kernel_stats, launches vs the host's
        # executions) run on a GPU only; test_gpu_check_device.py runs them on stored GPU traces.
        assert {k for k, v in checks.items() if v is None} == {
            "device_time_base",
            "xla_time_matches_hlo_stats",
            "kernel_time_matches_kernel_stats",
            "launches_match_host_executions",
            "xla_time_within_run_spans",
        }
        assert window["steps_profiled"] == 4
    assert doc["windows"]["0"]["compilations"] >= 2
    (saved,) = tmp_path.glob("gpu_check-*.json")
    assert json.loads(saved.read_text())["windows"] == doc["windows"]
    assert gzip.decompress(golden.read_bytes())[:2]
