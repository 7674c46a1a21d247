"""netcapture.records.positional_maker builds the same objects as the dataclasses' own __init__."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from netcapture.grpc import GrpcMessage
from netcapture.http2 import Http2Frame, RawFrame
from netcapture.records import positional_maker
from netcapture.streams import DataFrameEvent, StreamRecord
from netcapture.tcp import ConnectionId

CONNECTION = ConnectionId("10.0.0.1", 40000, "10.0.0.2", 2222, 1)


def _values(cls) -> tuple:
    """A distinct value for every field (so that a field set from another's argument shows)."""
    return tuple(CONNECTION if field.name == "connection" else f"{field.name}-{i}"
                 for i, field in enumerate(dataclasses.fields(cls)))


@pytest.mark.parametrize("cls", [Http2Frame, RawFrame, GrpcMessage, DataFrameEvent, StreamRecord])
def test_a_made_record_is_the_record_init_makes(cls):
    values = _values(cls)
    made, built = positional_maker(cls)(*values), cls(*values)
    assert type(made) is cls
    assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
    assert pickle.loads(pickle.dumps(made)) == built
    assert [getattr(made, f.name) for f in dataclasses.fields(cls)] == list(values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, dataclasses.fields(cls)[0].name, None)


def test_a_made_frame_keeps_its_properties():
    frame = positional_maker(Http2Frame)(7, 1_500_000_000, CONNECTION, True, 0, 1, 3, 100, 100, None, None, None,
                                         None, None, None, (), False)
    assert frame.end_stream and frame.type_name == "DATA" and frame.time_s == 1.5


def test_classes_a_maker_cannot_build_are_refused():
    @dataclasses.dataclass(frozen=True)
    class Checked:
        size: int

        def __post_init__(self):
            if self.size < 0:
                raise ValueError(self.size)

    @dataclasses.dataclass(frozen=True)
    class Derived:
        size: int
        double: int = dataclasses.field(init=False, default=0)

    with pytest.raises(TypeError, match="__post_init__"):
        positional_maker(Checked)
    with pytest.raises(TypeError, match="fields a maker cannot set"):
        positional_maker(Derived)
    with pytest.raises(TypeError, match="not a dataclass"):
        positional_maker(dict)
