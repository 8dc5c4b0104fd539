"""The package's own XSpace bindings (`trace/_proto.py`).

They must read real traces without TensorFlow, equal TensorFlow's own
`xplane_pb2` field for field, and live beside it in one process in either
import order. `make test-no-tf` runs the tests not marked `tf` with the
oldest protobuf setup.cfg declares (`tests/test_packaging.py` checks it
installs exactly that one).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
from _helpers import run_python

from keras_xla_guard.trace._proto import (
    _PLANE_HEAD_FILE,
    XPLANE_PROTO_FILE,
    _message_class,
    file_descriptor_proto,
    plane_head,
    xplane_pb2,
)
from keras_xla_guard.trace.xplane import open_xspace, read_line_chunks

DATA = Path(__file__).resolve().parent / "data"
TRACES = sorted(DATA.glob("*.xplane.pb.gz"))


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name.split(".")[0])
def test_bindings_hold_every_event_the_wire_framing_finds(tmp_path, trace):
    """Each stored trace parses to the events its raw framing holds: same count, same metadata ids."""
    data = gzip.decompress(trace.read_bytes())
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(data)
    parsed = xplane_pb2().XSpace.FromString(data)
    lazy = open_xspace(path)
    assert [p.name for p in parsed.planes] == [p.name for p in lazy.planes]
    framed = parsed_count = 0
    for plane, lazy_plane in zip(parsed.planes, lazy.planes):
        for line, span in zip(plane.lines, lazy_plane.line_spans):
            heads = [len(h) for _, h in read_line_chunks(lazy_plane, span, [], str(path))]
            framed += sum(heads)
            parsed_count += len(line.events)
            assert sum(heads) == len(line.events)
    assert parsed_count == framed > 1000


def test_round_trip_keeps_every_field():
    """A message with every field set survives serialization through the bindings unchanged."""
    pb = xplane_pb2()
    space = pb.XSpace(errors=["e"], warnings=["w"], hostnames=["h"])
    plane = space.planes.add(id=3, name="/device:GPU:0")
    plane.event_metadata[7].CopyFrom(
        pb.XEventMetadata(id=7, name="k", display_name="K", metadata=b"\x01", child_id=[8, 9])
    )
    plane.event_metadata[7].stats.add(metadata_id=1, bytes_value=b"x")
    plane.stat_metadata[1].CopyFrom(pb.XStatMetadata(id=1, name="hlo_module", description="d"))
    plane.stats.add(metadata_id=1, ref_value=1)
    line = plane.lines.add(
        id=1, display_id=2, name="Stream #1", display_name="s", timestamp_ns=5, duration_ps=6
    )
    event = line.events.add(metadata_id=7, offset_ps=10, duration_ps=20)
    event.stats.add(metadata_id=1, double_value=0.5)
    event.stats.add(metadata_id=1, uint64_value=1 << 63)
    event.stats.add(metadata_id=1, int64_value=-1)
    event.stats.add(metadata_id=1, str_value="m")
    line.events.add(metadata_id=7, num_occurrences=4)
    again = pb.XSpace.FromString(space.SerializeToString())
    assert again == space
    assert again.planes[0].lines[0].events[1].WhichOneof("data") == "num_occurrences"
    assert [s.WhichOneof("value") for s in again.planes[0].lines[0].events[0].stats] == [
        "double_value",
        "uint64_value",
        "int64_value",
        "str_value",
    ]
    assert again.planes[0].event_metadata[7].child_id == [8, 9]


def test_bindings_stay_out_of_protobufs_default_pool():
    """Building the bindings registers nothing in protobuf's default pool, where TensorFlow registers its own."""
    result = run_python(f"""
        import json
        from google.protobuf import descriptor_pool
        from keras_xla_guard.trace._proto import xplane_pb2
        assert xplane_pb2().XSpace.DESCRIPTOR.full_name == "tensorflow.profiler.XSpace"
        try:
            descriptor_pool.Default().FindFileByName({XPLANE_PROTO_FILE!r})
            found = True
        except KeyError:
            found = False
        print(json.dumps({{"in_default_pool": found}}))
    """)
    assert result == {"in_default_pool": False}


@pytest.mark.tf
def test_descriptor_equals_tensorflows():
    """The descriptor built in code is TensorFlow's generated xplane.proto descriptor, byte for byte."""
    from google.protobuf import descriptor_pb2
    from tensorflow.tsl.profiler.protobuf import xplane_pb2 as tf_xplane_pb2

    theirs = descriptor_pb2.FileDescriptorProto()
    tf_xplane_pb2.DESCRIPTOR.CopyToProto(theirs)
    assert file_descriptor_proto() == theirs
    assert file_descriptor_proto().SerializeToString() == theirs.SerializeToString()


_BOTH = """
    import gzip, json
    {first}
    {second}
    data = gzip.decompress(open({trace!r}, "rb").read())
    ours = xplane_pb2().XSpace.FromString(data)
    theirs = tf_xplane_pb2.XSpace.FromString(data)
    print(json.dumps({{
        "same": tf_xplane_pb2.XSpace.FromString(ours.SerializeToString()) == theirs,
        "back": xplane_pb2().XSpace.FromString(theirs.SerializeToString()) == ours,
        "events": sum(len(l.events) for p in ours.planes for l in p.lines),
        "tf_version": tf.__version__,
    }}))
"""
_OURS = "from keras_xla_guard.trace._proto import xplane_pb2; xplane_pb2()"
_TF = "import tensorflow as tf; from tensorflow.tsl.profiler.protobuf import xplane_pb2 as tf_xplane_pb2"


@pytest.mark.tf
@pytest.mark.parametrize("order", ["ours_first", "tensorflow_first"])
def test_bindings_live_beside_tensorflows_in_either_import_order(order):
    """With TensorFlow imported after or before them, both bindings read a trace to equal messages."""
    first, second = (_OURS, _TF) if order == "ours_first" else (_TF, _OURS)
    result = run_python(_BOTH.format(first=first, second=second, trace=str(DATA / "jit.xplane.pb.gz")))
    assert result["same"] and result["back"]
    assert result["events"] > 1000


class _Factory:
    """Stands in for protobuf's `MessageFactory`, recording the pool and descriptors it is given."""

    made: list[tuple[Any, str]] = []

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def GetPrototype(self, descriptor: Any) -> Any:
        _Factory.made.append((self.pool, descriptor.full_name))
        return _Factory


def test_message_classes_come_from_get_message_class_when_protobuf_has_it(monkeypatch):
    """protobuf >= 4.22: `GetMessageClass` builds the class; the factory is not touched."""
    from google.protobuf import message_factory

    descriptor = xplane_pb2().XSpace.DESCRIPTOR
    asked = []
    _Factory.made = []
    monkeypatch.setattr(
        message_factory, "GetMessageClass", lambda d: asked.append(d.full_name) or dict, raising=False
    )
    monkeypatch.setattr(message_factory, "MessageFactory", _Factory)
    assert _message_class(descriptor) is dict
    assert (asked, _Factory.made) == (["tensorflow.profiler.XSpace"], [])


def test_message_classes_come_from_the_factory_of_the_descriptors_pool_on_old_protobuf(monkeypatch):
    """protobuf < 4.22 (no `GetMessageClass`): the factory of the descriptor's pool gives the class."""
    from google.protobuf import message_factory

    descriptor = xplane_pb2().XSpace.DESCRIPTOR
    _Factory.made = []
    monkeypatch.delattr(message_factory, "GetMessageClass", raising=False)
    monkeypatch.setattr(message_factory, "MessageFactory", _Factory)
    assert _message_class(descriptor) is _Factory
    assert _Factory.made == [(descriptor.file.pool, "tensorflow.profiler.XSpace")]


def test_plane_head_reads_an_xplanes_id_name_and_raw_lines_in_a_file_of_its_own():
    """PlaneHead: id and name with presence, each line's bytes whole, other fields unread; its own .proto file."""
    pb = xplane_pb2()
    line = pb.XLine(id=1, name="Stream #1", timestamp_ns=5)
    plane = pb.XPlane(id=3, name="/device:GPU:0", lines=[line, pb.XLine(id=2)])
    plane.event_metadata[1].name = "k"
    head = plane_head().FromString(plane.SerializeToString())
    assert (head.HasField("id"), head.id, head.HasField("name"), head.name) == (
        True,
        3,
        True,
        b"/device:GPU:0",
    )
    assert list(head.lines) == [line.SerializeToString(), pb.XLine(id=2).SerializeToString()]
    assert not plane_head()().HasField("id")
    assert pb.DESCRIPTOR.pool.FindFileByName(_PLANE_HEAD_FILE).package == "keras_xla_guard.trace"
