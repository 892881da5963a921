from . import commands_pb2 as _commands_pb2
from . import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatchEventsRequest(_message.Message):
    __slots__ = ("after_cursor", "kinds", "agent_id")
    AFTER_CURSOR_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    after_cursor: int
    kinds: _containers.RepeatedScalarFieldContainer[str]
    agent_id: str
    def __init__(self, after_cursor: _Optional[int] = ..., kinds: _Optional[_Iterable[str]] = ..., agent_id: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("cursor", "log_index", "agent_ids", "effect")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    AGENT_IDS_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    log_index: int
    agent_ids: _containers.RepeatedScalarFieldContainer[str]
    effect: _types_pb2.Effect
    def __init__(self, cursor: _Optional[int] = ..., log_index: _Optional[int] = ..., agent_ids: _Optional[_Iterable[str]] = ..., effect: _Optional[_Union[_types_pb2.Effect, _Mapping]] = ...) -> None: ...

class WatchPosition(_message.Message):
    __slots__ = ("cursor", "horizon")
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    cursor: int
    horizon: int
    def __init__(self, cursor: _Optional[int] = ..., horizon: _Optional[int] = ...) -> None: ...

class WatchEventsResponse(_message.Message):
    __slots__ = ("event", "started", "progress")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    event: Event
    started: WatchPosition
    progress: WatchPosition
    def __init__(self, event: _Optional[_Union[Event, _Mapping]] = ..., started: _Optional[_Union[WatchPosition, _Mapping]] = ..., progress: _Optional[_Union[WatchPosition, _Mapping]] = ...) -> None: ...
