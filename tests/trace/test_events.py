"""Tests for keras_xla_guard.trace._events: the plane's metadata looked up once, and what the
analysis of a trace costs before its first event (no imports, no numpy.ma)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _helpers import run_python
from _xspace import build_space

from keras_xla_guard import OpStat, analyze_trace, analyze_xspace
from keras_xla_guard.errors import TraceParseError
from keras_xla_guard.trace._events import PlaneCache, unique_ints
from keras_xla_guard.trace.classify import Category

DATA = Path(__file__).resolve().parent / "data"


def test_unique_ints_are_the_sorted_distinct_values():
    """Distinct values, sorted, for unsorted input with repeats, one value and none."""
    assert unique_ints(np, np.array([5, 1, 5, 3, 1, -2], dtype=np.int64)).tolist() == [-2, 1, 3, 5]
    assert unique_ints(np, np.array([7], dtype=np.int64)).tolist() == [7]
    assert unique_ints(np, np.array([], dtype=np.int64)).tolist() == []


def test_unique_ints_of_two_equal_values_is_one_value():
    """Two equal values (the shortest input that has a repeat) give the value once."""
    assert unique_ints(np, np.array([7, 7], dtype=np.int64)).tolist() == [7]
    assert unique_ints(np, np.array([9, 2], dtype=np.int64)).tolist() == [2, 9]


def test_plane_cache_reads_names_markers_and_kernels_from_the_metadata():
    """The compile markers, the async kernel starts and each id's category and op."""
    space = build_space(
        {
            "tf_Compute/1": [
                ("dense/MatMul:MatMul", 0, 10),
                ("CpuCompiler::RunBackend", 20, 10, {"name": "a_inference_f_1__.1"}),
                ("ExecutorState::ProcessAsync::Start", 40, 10, {"kernel_type": "MatMul"}),
                ("tf.function-graph_building", 60, 10),
            ]
        }
    )
    plane = next(p for p in space.planes if p.name.startswith("/host:"))
    cache = PlaneCache(plane)
    ids = {md.name: mid for mid, md in plane.event_metadata.items()}
    assert cache.markers == {ids["CpuCompiler::RunBackend"]}
    assert cache.with_stats == {ids["CpuCompiler::RunBackend"], ids["ExecutorState::ProcessAsync::Start"]}
    assert cache.info(ids["dense/MatMul:MatMul"])[:2] == (Category.KERNEL, (("MatMul", "dense/MatMul"), "op"))
    assert cache.info(ids["tf.function-graph_building"])[:2] == (Category.TRACING, None)
    assert cache.info(10**6) == (Category.NONE, None, 0)


def test_stat_ids_are_each_names_lowest_id_and_only_of_names_defined():
    """`find_stat_ids`: the asked names a plane defines (a name given twice: its lowest id, whatever
    the map's order), nothing for names it lacks; `PlaneCache` takes its five ids from it."""
    from keras_xla_guard.trace._events import find_stat_ids
    from keras_xla_guard.trace.xplane import xplane_pb2

    plane = xplane_pb2().XPlane(name="/host:CPU")
    for mid, name in [
        (900, "name"),
        (7, "kernel_type"),
        (3, "name"),
        (5000, "step_num"),
        (12, "_r"),
        (40, "x"),
    ]:
        plane.stat_metadata[mid].id = mid
        plane.stat_metadata[mid].name = name
    assert find_stat_ids(plane, {"name", "_r", "step_num", "hlo_module"}) == {
        "name": 3,
        "_r": 12,
        "step_num": 5000,
    }
    assert find_stat_ids(plane, {"x"}) == {"x": 40}
    assert find_stat_ids(plane, set()) == {}
    cache = PlaneCache(plane)
    assert (cache.name_id, cache.type_id, cache.hlo_id, cache.root_id, cache.step_id) == (3, 7, -1, 12, 5000)


def test_analysis_imports_nothing_once_the_package_and_numpy_are_loaded():
    """Analysing every real trace of tests/trace/data loads no module: numpy 2's `np.unique` would
    import numpy.ma (tens of ms, 1 MB), more than the whole analysis of a small trace."""
    paths = sorted(str(p) for p in DATA.glob("*.xplane.pb.gz"))
    assert len(paths) >= 8
    out = run_python(
        f"""
        import gzip, json, sys, tempfile
        from pathlib import Path
        import numpy
        from keras_xla_guard import analyze_trace
        from keras_xla_guard.trace._proto import xplane_pb2
        xplane_pb2()
        folder = Path(tempfile.mkdtemp())
        files = []
        for path in {paths!r}:
            files.append(folder / Path(path).name[: -len(".gz")])
            files[-1].write_bytes(gzip.decompress(Path(path).read_bytes()))
        before = set(sys.modules)
        for path in files:
            analyze_trace(path)
        print(json.dumps({{"new": sorted(set(sys.modules) - before)}}))
        """
    )
    assert out["new"] == []


def test_a_one_picosecond_op_counts_and_an_instant_one_does_not(tmp_path):
    """The scan keeps every event with time, down to 1 ps, and leaves instants out of the op table."""
    space = build_space(
        {"t": [("dense/MatMul:MatMul", 0, 8), ("dense/Relu:Relu", 20, 1e-6), ("x/Add:Add", 30, 0)]}
    )
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    report = analyze_trace(path)
    assert [(o.op_type, o.op_name, o.count) for o in report.top_non_xla_ops] == [
        ("MatMul", "dense/MatMul", 1),
        ("Relu", "dense/Relu", 1),
    ]
    assert report.top_non_xla_ops[1] == OpStat("Relu", "dense/Relu", 1e-12, 1)
    assert report.non_xla_op_time_s == (8_000_000 + 1) * 1e-12


def test_a_first_event_naming_undefined_metadata_is_an_error_naming_the_file(tmp_path):
    """The scan checks a line's first event against the plane's metadata and names the file it read."""
    space = build_space({"t": [("dense/MatMul:MatMul", 0, 8), ("dense/Relu:Relu", 20, 1)]})
    space.planes[0].lines[0].events[0].metadata_id = 999
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    with pytest.raises(
        TraceParseError, match=f"^{path} is not a consistent XSpace trace: event metadata id 999"
    ):
        analyze_trace(path)


@pytest.mark.parametrize("value", ["dangling_ref", "int"])
def test_a_kernel_type_that_is_no_string_names_no_op(value, tmp_path):
    """An async kernel whose `kernel_type` is a reference to no stat metadata, or an integer, is no op:
    its time books no op on either read path, while a string type beside it does."""
    space = build_space(
        {
            "t": [
                ("ExecutorState::ProcessAsync::Start", 0, 10, {"kernel_type": 0}),
                ("ExecutorState::ProcessAsync::Start", 20, 5, {"kernel_type": "MatMul"}),
            ]
        }
    )
    plane = space.planes[0]
    stat = plane.lines[0].events[0].stats[0]
    if value == "dangling_ref":
        stat.ref_value = 999
        assert 999 not in plane.stat_metadata
    else:
        stat.int64_value = 7
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    for report in (analyze_xspace(space), analyze_trace(path)):
        assert [(o.op_type, o.op_name, o.count) for o in report.top_non_xla_ops] == [("MatMul", "MatMul", 1)]
        assert report.non_xla_op_time_s == 5_000_000 * 1e-12


def test_stats_a_plane_does_not_define_are_never_read_from_another_id(tmp_path):
    """No `kernel_type` and no `_r` stat in the plane while stat id 1 is `name`: an async kernel with a
    `name` names no op, and a `train` event with a `name` and a `step_num` is no step marker, on both
    read paths."""
    space = build_space(
        {
            "python": [
                ("train", 0, 100, {"name": "train_function", "step_num": 3}),
                ("CpuExecutable::ExecuteAsyncOnStream", 10, 20),
            ],
            "t": [
                ("ExecutorState::ProcessAsync::Start", 0, 10, {"name": "x/MatMul"}),
                ("dense/MatMul:MatMul", 20, 5),
            ],
        }
    )
    assert {md.id: md.name for md in space.planes[0].stat_metadata.values()} == {1: "name", 2: "step_num"}
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(space.SerializeToString())
    for report in (analyze_xspace(space), analyze_trace(path)):
        assert [(o.op_type, o.op_name, o.count) for o in report.top_non_xla_ops] == [
            ("MatMul", "dense/MatMul", 1)
        ]
        assert report.steps is None
