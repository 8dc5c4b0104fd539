"""Every stored real trace, and the synthetic GPU traces, give reports whose figures agree.

The steps and XLA programs per step are known by construction: the guard's
`train` markers or the calls of the Keras step function in each trace
(`tests/trace/_golden.py` says how each was made).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from _gpu_trace import jit_fit
from _helpers import assert_consistent

from keras_xla_guard import analyze_trace

DATA = Path(__file__).resolve().parent / "data"
# Trace -> (steps, XLA programs per step).
KNOWN = {
    "jit": (6, 1),
    "plain": (6, 0),
    "mlp": (8, 0),
    "eager_loop": (40, 0),
    "tf220_async_launch": (16, 1),
    "tf220_lost_split_launch": (10, 1),
    "py_function": (8, 0),
    # Keras on JAX: two small eager programs and jit_train_step a step.
    "jax_cpu": (4, 3),
}


def test_every_stored_trace_has_known_counts():
    """The table covers exactly the traces kept under data/."""
    assert sorted(KNOWN) == sorted(p.name.split(".")[0] for p in DATA.glob("*.xplane.pb.gz"))


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_stored_trace_figures_agree(tmp_path, name):
    """Compile table = headline compile time <= window; launches = steps x programs; fraction from its parts."""
    path = tmp_path / f"{name}.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / f"{name}.xplane.pb.gz").read_bytes()))
    steps, programs = KNOWN[name]
    assert_consistent(analyze_trace(path), steps=steps, programs=programs)


def test_gpu_trace_figures_agree(tmp_path):
    """The synthetic raw GPU trace (6 steps, one program each) passes the same check."""
    assert_consistent(analyze_trace(jit_fit(6).write(tmp_path / "gpu.xplane.pb")), steps=6, programs=1)


def test_the_check_catches_a_thread_summed_headline(tmp_path):
    """A report whose compile_time_s sums threads (as before issue 29) fails the check."""
    import dataclasses

    path = tmp_path / "jit.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / "jit.xplane.pb.gz").read_bytes()))
    report = analyze_trace(path)
    summed = dataclasses.replace(report, compile_time_s=report.compile_thread_time_s)
    with pytest.raises(AssertionError):
        assert_consistent(summed, steps=6, programs=1)


@pytest.mark.slow
def test_real_fit_figures_agree(jit_fit, plain_fit):
    """The guard's own reports of real fits (jit: one program per step; plain: none) pass the check."""
    for fit, programs in ((jit_fit, 1), (plain_fit, 0)):
        report = fit.callback.reports[1]
        assert report.steps_profiled
        assert_consistent(report, steps=report.steps_profiled, programs=programs)
