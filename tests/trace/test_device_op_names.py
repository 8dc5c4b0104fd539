"""How a device kernel's op is named (`_xla_op_key`, `_op_key`), on one
hand-built device plane whose annotation strings are stat references, as
the profiler interns them, and whose first stat is one the names must not read."""

from __future__ import annotations

from _gpu_trace import _Plane

from keras_xla_guard.trace._device import COMMAND_BUFFER, _Ids, _op_key, _xla_op_key
from keras_xla_guard.trace.xplane import xplane_pb2


class _Device:
    """A device plane; `kernel(kernel, **stats)` adds an event whose string stats are references."""

    def __init__(self, *stat_names: str) -> None:
        space = xplane_pb2().XSpace()
        self.builder = _Plane(space, "/device:GPU:0", 1)
        # Stat id 1 is a string every kernel carries and no name is read from.
        self.builder.stat_id("context_id")
        for name in stat_names:
            self.builder.stat_id(name)
        self.plane = self.builder.plane
        self.line = self.builder.line(1, "Stream #1(Kernel)")

    def kernel(self, kernel: str, /, **stats: str):
        event = self.line.events.add(metadata_id=self.builder.event_id(kernel), offset_ps=0, duration_ps=1)
        for key, value in {"context_id": "$$1", **stats}.items():
            stat = event.stats.add(metadata_id=self.builder.stat_id(key))
            stat.ref_value = self.builder.stat_id(value)
        return event

    def ids(self) -> _Ids:
        return _Ids.of(self.plane)


def test_an_xla_kernel_is_named_by_the_richest_annotation():
    """op_type/op_name first; else prefix/name (or name alone); else the HLO instruction; '?' at the end."""
    device = _Device("op_type", "op_name", "name", "prefix", "hlo_op")
    ids = device.ids()
    detailed = device.kernel("k1", op_type="MatMul", op_name="dense/MatMul")
    scoped = device.kernel("k2", name="dense/add", prefix="model")
    bare_name = device.kernel("k3", name="relu")
    nothing = device.kernel("k4")
    plane = device.plane
    assert _xla_op_key(plane, detailed, ids, "mod::fusion.3", False, "m", 1) == ("MatMul", "dense/MatMul")
    assert _xla_op_key(plane, scoped, ids, "mod::fusion.3", False, "m", 1) == ("fusion", "model/dense/add")
    assert _xla_op_key(plane, bare_name, ids, "dot", False, "m", 1) == ("dot", "relu")
    assert _xla_op_key(plane, nothing, ids, "mod::copy.12", False, "m", 1) == ("copy", "copy.12")
    assert _xla_op_key(plane, nothing, ids, "", False, "m", 1) == ("?", "k4")
    assert _xla_op_key(plane, detailed, ids, "dot", True, "m", 7) == (COMMAND_BUFFER, "m(7)")


def test_a_plane_without_the_annotation_stats_names_by_the_instruction():
    """No op_type, op_name, name or prefix stat on the plane: the HLO instruction names the op."""
    device = _Device("hlo_op")
    event = device.kernel("k", hlo_op="fusion.1")
    assert _xla_op_key(device.plane, event, device.ids(), "fusion.1", False, "m", 1) == ("fusion", "fusion.1")


def test_a_plain_kernel_is_named_by_its_tf_op_else_its_label_else_the_kernel():
    """'dense/MatMul:MatMul' splits; a label that is no TF op name, the kernel name, then '?' are device kernels."""
    device = _Device("tf_op")
    tf_op = device.ids().tf_op
    plane = device.plane
    assert _op_key(plane, device.kernel("k1", tf_op="dense/MatMul:MatMul"), tf_op) == (
        "MatMul",
        "dense/MatMul",
    )
    assert _op_key(plane, device.kernel("k2", tf_op="no op here"), tf_op) == ("(device kernel)", "no op here")
    assert _op_key(plane, device.kernel("volta_sgemm"), tf_op) == ("(device kernel)", "volta_sgemm")
    unnamed = device.line.events.add(metadata_id=999, offset_ps=0, duration_ps=1)
    assert _op_key(plane, unnamed, tf_op) == ("(device kernel)", "?")
    assert _op_key(plane, unnamed, -1) == ("(device kernel)", "?")
