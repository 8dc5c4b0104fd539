"""`benchmarks/gpu_check.py`'s device checks on real GPU traces, here on the CPU: the checks the GPU
machine runs (XLA time against xprof's hlo_stats, kernel time against kernel_stats, launches against
the host's program executions) hold on the stored AMD MI300X traces, and catch a drifted figure.

JAX's venv has xprof and no TensorFlow, as the GPU machine; the traces are
`tests/trace/data/rocm/` (see its README)."""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
from pathlib import Path

import pytest
from _helpers import REPO

from keras_xla_guard import analyze_trace

ROCM = REPO / "tests" / "trace" / "data" / "rocm"


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gpu_check():
    pytest.importorskip("xprof")
    return _gpu_check()


def _trace(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.xplane.pb"
    path.write_bytes(gzip.decompress((ROCM / f"{name}.xplane.pb.gz").read_bytes()))
    return path


@pytest.mark.parametrize("name", ["jax_conv_minimal_08", "jax08_gemm", "jax_te_fused_attn"])
def test_every_device_check_holds_on_a_real_gpu_trace(gpu_check, tmp_path, name):
    """The report of a real ROCm trace passes every device check, with xprof's figures beside its own."""
    path = _trace(tmp_path, name)
    figures, checks = gpu_check.device_checks(analyze_trace(path), str(path))
    assert checks == dict.fromkeys(checks, True), figures
    assert figures["xla_time_s"] == pytest.approx(figures["hlo_stats_xla_s"], rel=0.01)
    assert figures["xla_executions"] == figures["host_executions"] > 0


def test_the_device_checks_catch_a_span_taken_for_xla_time(gpu_check, tmp_path):
    """The 8-GPU trace with its runs' span as XLA time (the rule before issue 56, 28.6x the kernels):
    the hlo_stats check fails; launches read from xprof's derived lines (8) fail the executions check."""
    path = _trace(tmp_path, "jax_conv_minimal_08")
    report = analyze_trace(path)
    old = dataclasses.replace(report, xla_time_s=report.xla_run_span_s, xla_executions=8)
    _, checks = gpu_check.device_checks(old, str(path))
    assert checks["xla_time_matches_hlo_stats"] is False
    assert checks["launches_match_host_executions"] is False
