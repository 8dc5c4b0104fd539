"""keras-xla-guard's own `XSpace` protobuf bindings: no TensorFlow, no protoc.

The schema is `xplane.proto`, package `tensorflow.profiler`: in the OpenXLA
sources `xla/tsl/profiler/protobuf/xplane.proto` (openxla/xla; TensorFlow
vendors it under `third_party/xla/`, and its wheels register it as
`tsl/profiler/protobuf/xplane.proto`). Copyright The TensorFlow Authors,
licensed under the Apache License, Version 2.0 (the same license as this
package). The table below restates its messages, field names and numbers,
transcribed from the file descriptor that TensorFlow 2.21.0's generated
`tensorflow/tsl/profiler/protobuf/xplane_pb2.py` embeds;
`tests/trace/test_proto.py` checks the two descriptors are equal.

Why not generated code: a `_pb2.py` from protoc is tied to a range of
protobuf runtimes (new ones refuse old code, old ones refuse new code),
and shipping one would need protoc when it is regenerated. Building the
`FileDescriptorProto` here and asking the running protobuf for message
classes works on every protobuf the package declares.

Why a private `DescriptorPool`: TensorFlow registers the same file name in
protobuf's default pool when it is imported. Two registrations of one name
with different bytes fail, whichever comes first; a private pool never
meets TensorFlow's, so both bindings live in one process in any import
order (pinned by the tests). Messages of either parse the other's bytes.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

__all__ = ["XPLANE_PROTO_FILE", "XPLANE_PROTO_PACKAGE", "XSpaceBindings", "plane_head", "xplane_pb2"]

XPLANE_PROTO_FILE = "tsl/profiler/protobuf/xplane.proto"
XPLANE_PROTO_PACKAGE = "tensorflow.profiler"

# (field name, number, type, repeated, message type or "", oneof name or "").
_Field = tuple[str, int, str, bool, str, str]

_MESSAGES: tuple[tuple[str, tuple[_Field, ...]], ...] = (
    (
        "XSpace",
        (
            ("planes", 1, "message", True, "XPlane", ""),
            ("errors", 2, "string", True, "", ""),
            ("warnings", 3, "string", True, "", ""),
            ("hostnames", 4, "string", True, "", ""),
        ),
    ),
    (
        "XPlane",
        (
            ("id", 1, "int64", False, "", ""),
            ("name", 2, "string", False, "", ""),
            ("lines", 3, "message", True, "XLine", ""),
            ("event_metadata", 4, "message", True, "XPlane.EventMetadataEntry", ""),
            ("stat_metadata", 5, "message", True, "XPlane.StatMetadataEntry", ""),
            ("stats", 6, "message", True, "XStat", ""),
        ),
    ),
    (
        "XLine",
        (
            ("id", 1, "int64", False, "", ""),
            ("display_id", 10, "int64", False, "", ""),
            ("name", 2, "string", False, "", ""),
            ("display_name", 11, "string", False, "", ""),
            ("timestamp_ns", 3, "int64", False, "", ""),
            ("duration_ps", 9, "int64", False, "", ""),
            ("events", 4, "message", True, "XEvent", ""),
        ),
    ),
    (
        "XEvent",
        (
            ("metadata_id", 1, "int64", False, "", ""),
            ("offset_ps", 2, "int64", False, "", "data"),
            ("num_occurrences", 5, "int64", False, "", "data"),
            ("duration_ps", 3, "int64", False, "", ""),
            ("stats", 4, "message", True, "XStat", ""),
        ),
    ),
    (
        "XStat",
        (
            ("metadata_id", 1, "int64", False, "", ""),
            ("double_value", 2, "double", False, "", "value"),
            ("uint64_value", 3, "uint64", False, "", "value"),
            ("int64_value", 4, "int64", False, "", "value"),
            ("str_value", 5, "string", False, "", "value"),
            ("bytes_value", 6, "bytes", False, "", "value"),
            ("ref_value", 7, "uint64", False, "", "value"),
        ),
    ),
    (
        "XEventMetadata",
        (
            ("id", 1, "int64", False, "", ""),
            ("name", 2, "string", False, "", ""),
            ("display_name", 4, "string", False, "", ""),
            ("metadata", 3, "bytes", False, "", ""),
            ("stats", 5, "message", True, "XStat", ""),
            ("child_id", 6, "int64", True, "", ""),
        ),
    ),
    (
        "XStatMetadata",
        (
            ("id", 1, "int64", False, "", ""),
            ("name", 2, "string", False, "", ""),
            ("description", 3, "string", False, "", ""),
        ),
    ),
)
# XPlane's two maps: (entry message, value message).
_MAP_ENTRIES = (("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata"))
# XLine field numbers retired upstream (`reserved 5, 6, 7, 8;`).
_XLINE_RESERVED = (5, 6, 7, 8)


class XSpaceBindings(NamedTuple):
    """The message classes of `xplane.proto`, as a generated `xplane_pb2` names them."""

    XSpace: Any
    XPlane: Any
    XLine: Any
    XEvent: Any
    XStat: Any
    XEventMetadata: Any
    XStatMetadata: Any
    DESCRIPTOR: Any


def file_descriptor_proto() -> Any:
    """Builds `xplane.proto`'s `FileDescriptorProto` from the table above.

    Returns:
        A `google.protobuf.descriptor_pb2.FileDescriptorProto`.
    """
    from google.protobuf import descriptor_pb2

    field_proto = descriptor_pb2.FieldDescriptorProto
    types = {
        "int64": field_proto.TYPE_INT64,
        "uint64": field_proto.TYPE_UINT64,
        "double": field_proto.TYPE_DOUBLE,
        "string": field_proto.TYPE_STRING,
        "bytes": field_proto.TYPE_BYTES,
        "message": field_proto.TYPE_MESSAGE,
    }
    prefix = f".{XPLANE_PROTO_PACKAGE}."

    def add_field(message: Any, spec: _Field, oneofs: list[str]) -> None:
        name, number, kind, repeated, type_name, oneof = spec
        field = message.field.add(name=name, number=number, type=types[kind])
        field.label = field_proto.LABEL_REPEATED if repeated else field_proto.LABEL_OPTIONAL
        if type_name:
            field.type_name = prefix + type_name
        if oneof:
            if oneof not in oneofs:
                oneofs.append(oneof)
                message.oneof_decl.add(name=oneof)
            field.oneof_index = oneofs.index(oneof)

    proto = descriptor_pb2.FileDescriptorProto(
        name=XPLANE_PROTO_FILE, package=XPLANE_PROTO_PACKAGE, syntax="proto3"
    )
    proto.options.cc_enable_arenas = True
    for name, fields in _MESSAGES:
        message = proto.message_type.add(name=name)
        oneofs: list[str] = []
        for spec in fields:
            add_field(message, spec, oneofs)
        if name == "XPlane":
            for entry_name, value in _MAP_ENTRIES:
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                add_field(entry, ("key", 1, "int64", False, "", ""), [])
                add_field(entry, ("value", 2, "message", False, value, ""), [])
        elif name == "XLine":
            for number in _XLINE_RESERVED:
                message.reserved_range.add(start=number, end=number + 1)
    return proto


def _message_class(descriptor: Any) -> Any:
    from google.protobuf import message_factory

    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is not None:
        return get_class(descriptor)
    # protobuf releases before 4.22 have only the factory's (later removed) method.
    return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)


_lock = threading.Lock()
_bindings: XSpaceBindings | None = None


def xplane_pb2() -> XSpaceBindings:
    """Returns the `XSpace` message classes, built on first use.

    Returns:
        An `XSpaceBindings` whose attributes (`XSpace`, `XPlane`, `XLine`,
        `XEvent`, `XStat`, `XEventMetadata`, `XStatMetadata`, `DESCRIPTOR`)
        are used like those of a generated `xplane_pb2` module.

    Example:

    ```python
    from keras_xla_guard.trace._proto import xplane_pb2

    space = xplane_pb2().XSpace()
    space.planes.add(name="/host:CPU")
    assert xplane_pb2().XSpace.FromString(space.SerializeToString()) == space
    ```
    """
    global _bindings
    if _bindings is not None:
        return _bindings
    with _lock:
        if _bindings is None:
            from google.protobuf import descriptor_pool

            pool = descriptor_pool.DescriptorPool()
            pool.AddSerializedFile(file_descriptor_proto().SerializeToString())
            file = pool.FindFileByName(XPLANE_PROTO_FILE)
            classes = {
                name: _message_class(pool.FindMessageTypeByName(f"{XPLANE_PROTO_PACKAGE}.{name}"))
                for name, _ in _MESSAGES
            }
            _bindings = XSpaceBindings(**classes, DESCRIPTOR=file)
    return _bindings


_PLANE_HEAD_FILE = "keras_xla_guard/trace/plane_head.proto"
_plane_head: Any = None


def plane_head() -> Any:
    """The message class `PlaneHead`: an `XPlane` seen through its fields 1-3 only.

    `id` (1) and `name` (2) with presence (proto2), `lines` (3) as raw
    bytes; every other field is left unparsed. The trace reader parses a
    plane's metadata with it to learn, in one pass in C, that no id, name
    or line hides among thousands of metadata fields. Built in the
    bindings' private pool, in a file of its own.

    Returns:
        The message class.
    """
    global _plane_head
    if _plane_head is not None:
        return _plane_head
    pool = xplane_pb2().DESCRIPTOR.pool
    with _lock:
        if _plane_head is None:
            from google.protobuf import descriptor_pb2

            field = descriptor_pb2.FieldDescriptorProto
            proto = descriptor_pb2.FileDescriptorProto(
                name=_PLANE_HEAD_FILE, package="keras_xla_guard.trace", syntax="proto2"
            )
            message = proto.message_type.add(name="PlaneHead")
            for name, number, kind, label in (
                ("id", 1, field.TYPE_INT64, field.LABEL_OPTIONAL),
                ("name", 2, field.TYPE_BYTES, field.LABEL_OPTIONAL),
                ("lines", 3, field.TYPE_BYTES, field.LABEL_REPEATED),
            ):
                message.field.add(name=name, number=number, type=kind, label=label)
            pool.AddSerializedFile(proto.SerializeToString())
            _plane_head = _message_class(pool.FindMessageTypeByName("keras_xla_guard.trace.PlaneHead"))
    return _plane_head
