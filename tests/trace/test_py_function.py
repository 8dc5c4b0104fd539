"""A `tf.py_function`'s self time (`EagerPyFunc`) is what xprof reports.

`data/py_function.xplane.pb.gz` is a real TF 2.21 trace: a Keras model
`Dense -> Layer calling tf.py_function -> Dense`, fit for 8 steps under
`tf.profiler.experimental.start/stop`, whose Python function runs eager
TF ops (square, tanh, add). Its eager dispatch (`TFE_Py_FastPathExecute_C`,
`EagerExecute`, `convert_to_tensor`, ...) runs inside the `EagerPyFunc`
kernel; xprof takes only nested TF ops out of an op's self time, so that
dispatch is the op's own time, and the guard's too.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from _xspace import build_space

from keras_xla_guard import analyze_trace, analyze_xspace

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stored py_function trace, unpacked."""
    path = tmp_path_factory.mktemp("pyfunc") / "vm.xplane.pb"
    path.write_bytes(gzip.decompress((DATA / "py_function.xplane.pb.gz").read_bytes()))
    return path


def _py_functions(report) -> dict[str, tuple[int, float]]:
    return {o.op_name: (o.count, o.self_time_s) for o in report.top_non_xla_ops if o.op_type == "EagerPyFunc"}


@pytest.mark.tf
def test_eager_py_func_self_time_matches_xprof(trace):
    """Forward and gradient EagerPyFunc: xprof's occurrences and self time, within 5%."""
    from _oracle import xprof_op_rows

    ours = _py_functions(analyze_trace(trace, top_k=100))
    rows = {r["operation"]: r for r in xprof_op_rows(trace) if r["type"] == "EagerPyFunc"}
    assert sorted(ours) == sorted(rows) and len(ours) == 2
    for name, (count, self_s) in ours.items():
        assert count == rows[name]["occurrences"] == 8
        assert self_s * 1e6 == pytest.approx(rows[name]["total_self_time"], rel=0.05)


@pytest.mark.tf
def test_eager_py_func_self_time_is_its_whole_span(trace):
    """No TF op kernel runs inside these py_functions: their self time is their spans' total."""
    from _oracle import span_seconds

    for name, (_, self_s) in _py_functions(analyze_trace(trace, top_k=100)).items():
        assert self_s == pytest.approx(span_seconds(trace, f"{name}:EagerPyFunc"), rel=1e-9)


def test_eager_dispatch_inside_a_kernel_is_its_time_and_nested_ops_are_not():
    """Eager events inside a kernel stay its self time; a TF op kernel inside it is subtracted."""
    space = build_space(
        {
            "tf_Compute/1": [
                ("m/py/EagerPyFunc:EagerPyFunc", 0, 100),
                ("TFE_Py_FastPathExecute_C", 10, 30),
                ("EagerExecute", 12, 20),
                ("m/py/Tanh:Tanh", 50, 15),
            ]
        }
    )
    report = analyze_xspace(space)
    ops = {o.op_type: o.self_time_s for o in report.top_non_xla_ops}
    assert ops == {"EagerPyFunc": pytest.approx(85e-6), "Tanh": pytest.approx(15e-6)}
    assert report.eager_overhead_s == 0.0


def test_eager_dispatch_outside_kernels_stays_eager_overhead():
    """On the Python thread, outside any kernel, eager dispatch is eager overhead as before."""
    report = analyze_xspace(build_space({"python": [("EagerExecute", 0, 40), ("m/Tanh:Tanh", 5, 10)]}))
    assert report.eager_overhead_s == pytest.approx(30e-6)
    assert report.non_xla_op_time_s == pytest.approx(10e-6)
