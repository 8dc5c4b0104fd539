"""benchmarks/gpu_check.py on this CPU-only machine: JSON saying there is no GPU, exit 0."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _helpers import REPO


@pytest.mark.slow
def test_gpu_check_without_a_gpu_says_so_and_exits_0():
    """With no GPU visible, the script trains nothing, prints gpu=false JSON and exits 0."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py")],
                          capture_output=True, text=True, timeout=300, cwd=str(REPO), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert (doc["benchmark"], doc["gpu"], doc["ran"], doc["ok"], doc["gpus"]) == (
        "gpu_check", False, False, True, [])
    assert "no GPU" in doc["reason"]
    assert "modes" not in doc
    assert set(doc["machine"]) == {"cpus", "python", "tensorflow", "keras", "load_avg_1min"}


@pytest.mark.slow
def test_gpu_checks_on_cpu_traces_fail_where_a_device_plane_is_needed(tmp_path):
    """The GPU path's checks run on real CPU traces: host-only figures pass, device ones fail."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    plain = gpu_check.check_mode("plain", gpu_check.train("plain", 3, str(tmp_path / "p")), 3)
    assert plain["checks"]["report_ok"] and plain["checks"]["steps_profiled"]
    assert plain["checks"]["no_xla"] and plain["checks"]["executions_match_xprof"]
    # A CPU trace has no device plane: no device rows in xprof, host time base.
    assert plain["xprof_device_rows"] == 0
    assert not plain["checks"]["device_time_base"] and not plain["checks"]["top_ops_match_xprof"]
    jit = gpu_check.check_mode("jit", gpu_check.train("jit", 3, str(tmp_path / "j")), 3)
    # 3 XLA runs on the host, none on an "XLA Modules" device line.
    assert (jit["xla_executions"], jit["xprof_xla_module_runs"]) == (3, 0)
    assert not jit["checks"]["executions_match_xprof"] and jit["checks"]["coverage_at_least_0.9"]
