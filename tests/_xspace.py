"""Builds small synthetic XSpace protos for edge-case unit tests.

Real traces from real training are the main test input; these only add
shapes that are hard to provoke on a CPU-only machine (device planes,
overlapping events, odd stats).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from keras_xla_guard.trace.xplane import xplane_pb2

Event = tuple  # (name, start_us, duration_us[, {stat_name: value}])


def build_space(
    lines: dict[str, Iterable[Event]],
    plane_name: str = "/host:CPU",
    extra_planes: dict[str, dict[str, Iterable[Event]]] | None = None,
) -> Any:
    """Returns an XSpace with one plane per entry, events given in microseconds."""
    pb = xplane_pb2()
    space = pb.XSpace()
    planes = {plane_name: lines, **(extra_planes or {})}
    for pid, (pname, plines) in enumerate(planes.items()):
        plane = space.planes.add(id=pid, name=pname)
        names: dict[str, int] = {}
        stat_names: dict[str, int] = {}

        def meta(name: str, names: dict[str, int] = names, plane: Any = plane) -> int:
            if name not in names:
                mid = len(names) + 1
                names[name] = mid
                plane.event_metadata[mid].id = mid
                plane.event_metadata[mid].name = name
            return names[name]

        def stat_meta(name: str, stat_names: dict[str, int] = stat_names, plane: Any = plane) -> int:
            if name not in stat_names:
                sid = len(stat_names) + 1
                stat_names[name] = sid
                plane.stat_metadata[sid].id = sid
                plane.stat_metadata[sid].name = name
            return stat_names[name]

        for lid, (lname, events) in enumerate(plines.items()):
            line = plane.lines.add(id=lid, name=lname, timestamp_ns=1000)
            for ev in events:
                name, start_us, dur_us = ev[0], ev[1], ev[2]
                stats = ev[3] if len(ev) > 3 else {}
                e = line.events.add(
                    metadata_id=meta(name),
                    offset_ps=int(start_us * 1_000_000),
                    duration_ps=int(dur_us * 1_000_000),
                )
                for key, value in stats.items():
                    s = e.stats.add(metadata_id=stat_meta(key))
                    if isinstance(value, str):
                        s.str_value = value
                    elif isinstance(value, float):
                        s.double_value = value
                    else:
                        s.int64_value = int(value)
    return space


def varint(value: int) -> bytes:
    """`value` as a protobuf varint."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def pb_field(tag: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: its tag byte, `payload`'s length and `payload`."""
    return bytes([tag]) + varint(len(payload)) + payload
