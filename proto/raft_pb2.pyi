# Generated from proto/raft.proto by `./dev proto`. DO NOT EDIT.
from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EntryKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NORMAL: _ClassVar[EntryKind]
    NOOP: _ClassVar[EntryKind]
NORMAL: EntryKind
NOOP: EntryKind

class Entry(_message.Message):
    __slots__ = ("term", "index", "data", "kind")
    TERM_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    term: int
    index: int
    data: bytes
    kind: EntryKind
    def __init__(self, term: _Optional[int] = ..., index: _Optional[int] = ..., data: _Optional[bytes] = ..., kind: _Optional[_Union[EntryKind, str, int]] = ...) -> None: ...

class SnapshotMeta(_message.Message):
    __slots__ = ("last_index", "last_term")
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_TERM_FIELD_NUMBER: _ClassVar[int]
    last_index: int
    last_term: int
    def __init__(self, last_index: _Optional[int] = ..., last_term: _Optional[int] = ...) -> None: ...

class RequestVoteRequest(_message.Message):
    __slots__ = ("src", "dst", "term", "last_log_index", "last_log_term", "pre_vote", "leadership_transfer")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_LOG_TERM_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    LEADERSHIP_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    src: int
    dst: int
    term: int
    last_log_index: int
    last_log_term: int
    pre_vote: bool
    leadership_transfer: bool
    def __init__(self, src: _Optional[int] = ..., dst: _Optional[int] = ..., term: _Optional[int] = ..., last_log_index: _Optional[int] = ..., last_log_term: _Optional[int] = ..., pre_vote: _Optional[bool] = ..., leadership_transfer: _Optional[bool] = ...) -> None: ...

class RequestVoteResponse(_message.Message):
    __slots__ = ("src", "dst", "term", "granted", "pre_vote")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    src: int
    dst: int
    term: int
    granted: bool
    pre_vote: bool
    def __init__(self, src: _Optional[int] = ..., dst: _Optional[int] = ..., term: _Optional[int] = ..., granted: _Optional[bool] = ..., pre_vote: _Optional[bool] = ...) -> None: ...

class RequestVoteReply(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: RequestVoteResponse
    def __init__(self, response: _Optional[_Union[RequestVoteResponse, _Mapping]] = ...) -> None: ...

class AppendEntriesRequest(_message.Message):
    __slots__ = ("src", "dst", "term", "prev_log_index", "prev_log_term", "leader_commit", "read_context", "packed_entries")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    PREV_LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    PREV_LOG_TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_COMMIT_FIELD_NUMBER: _ClassVar[int]
    READ_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PACKED_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    src: int
    dst: int
    term: int
    prev_log_index: int
    prev_log_term: int
    leader_commit: int
    read_context: int
    packed_entries: bytes
    def __init__(self, src: _Optional[int] = ..., dst: _Optional[int] = ..., term: _Optional[int] = ..., prev_log_index: _Optional[int] = ..., prev_log_term: _Optional[int] = ..., leader_commit: _Optional[int] = ..., read_context: _Optional[int] = ..., packed_entries: _Optional[bytes] = ...) -> None: ...

class AppendEntriesResponse(_message.Message):
    __slots__ = ("src", "dst", "term", "success", "match_index", "conflict_term", "conflict_index", "read_context")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_TERM_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_INDEX_FIELD_NUMBER: _ClassVar[int]
    READ_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    src: int
    dst: int
    term: int
    success: bool
    match_index: int
    conflict_term: int
    conflict_index: int
    read_context: int
    def __init__(self, src: _Optional[int] = ..., dst: _Optional[int] = ..., term: _Optional[int] = ..., success: _Optional[bool] = ..., match_index: _Optional[int] = ..., conflict_term: _Optional[int] = ..., conflict_index: _Optional[int] = ..., read_context: _Optional[int] = ...) -> None: ...

class AppendEntriesReply(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: AppendEntriesResponse
    def __init__(self, response: _Optional[_Union[AppendEntriesResponse, _Mapping]] = ...) -> None: ...

class InstallSnapshotChunk(_message.Message):
    __slots__ = ("src", "dst", "term", "meta", "offset", "chunk", "done")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    src: int
    dst: int
    term: int
    meta: SnapshotMeta
    offset: int
    chunk: bytes
    done: bool
    def __init__(self, src: _Optional[int] = ..., dst: _Optional[int] = ..., term: _Optional[int] = ..., meta: _Optional[_Union[SnapshotMeta, _Mapping]] = ..., offset: _Optional[int] = ..., chunk: _Optional[bytes] = ..., done: _Optional[bool] = ...) -> None: ...

class InstallSnapshotResponse(_message.Message):
    __slots__ = ("src", "dst", "term", "meta", "next_offset", "done", "success")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    src: int
    dst: int
    term: int
    meta: SnapshotMeta
    next_offset: int
    done: bool
    success: bool
    def __init__(self, src: _Optional[int] = ..., dst: _Optional[int] = ..., term: _Optional[int] = ..., meta: _Optional[_Union[SnapshotMeta, _Mapping]] = ..., next_offset: _Optional[int] = ..., done: _Optional[bool] = ..., success: _Optional[bool] = ...) -> None: ...

class InstallSnapshotReply(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: InstallSnapshotResponse
    def __init__(self, response: _Optional[_Union[InstallSnapshotResponse, _Mapping]] = ...) -> None: ...

class TimeoutNowRequest(_message.Message):
    __slots__ = ("src", "dst", "term")
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    src: int
    dst: int
    term: int
    def __init__(self, src: _Optional[int] = ..., dst: _Optional[int] = ..., term: _Optional[int] = ...) -> None: ...

class TimeoutNowReply(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LeaderHint(_message.Message):
    __slots__ = ("leader_id", "leader_address")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    leader_id: int
    leader_address: str
    def __init__(self, leader_id: _Optional[int] = ..., leader_address: _Optional[str] = ...) -> None: ...

class ProposeRequest(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, entries: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ProposeResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader", "first_index", "last_index")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    FIRST_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_INDEX_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    leader: LeaderHint
    first_index: int
    last_index: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str, int]] = ..., error_message: _Optional[str] = ..., leader: _Optional[_Union[LeaderHint, _Mapping]] = ..., first_index: _Optional[int] = ..., last_index: _Optional[int] = ...) -> None: ...

class ReadIndexRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReadIndexResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader", "index")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    leader: LeaderHint
    index: int
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str, int]] = ..., error_message: _Optional[str] = ..., leader: _Optional[_Union[LeaderHint, _Mapping]] = ..., index: _Optional[int] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("from_index", "max_entries")
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    from_index: int
    max_entries: int
    def __init__(self, from_index: _Optional[int] = ..., max_entries: _Optional[int] = ...) -> None: ...

class LogRecord(_message.Message):
    __slots__ = ("index", "data")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    index: int
    data: bytes
    def __init__(self, index: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("records", "applied_index")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[LogRecord]
    applied_index: int
    def __init__(self, records: _Optional[_Iterable[_Union[LogRecord, _Mapping]]] = ..., applied_index: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("node_id", "term", "leader_id", "is_leader", "commit_index", "applied_index")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    term: int
    leader_id: int
    is_leader: bool
    commit_index: int
    applied_index: int
    def __init__(self, node_id: _Optional[int] = ..., term: _Optional[int] = ..., leader_id: _Optional[int] = ..., is_leader: _Optional[bool] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ...) -> None: ...

class TransferLeadershipRequest(_message.Message):
    __slots__ = ("target_id",)
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    target_id: int
    def __init__(self, target_id: _Optional[int] = ...) -> None: ...

class TransferLeadershipResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    leader: LeaderHint
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str, int]] = ..., error_message: _Optional[str] = ..., leader: _Optional[_Union[LeaderHint, _Mapping]] = ...) -> None: ...

class SetPartitionRequest(_message.Message):
    __slots__ = ("blocked_peer_ids",)
    BLOCKED_PEER_IDS_FIELD_NUMBER: _ClassVar[int]
    blocked_peer_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, blocked_peer_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class SetPartitionResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str, int]] = ..., error_message: _Optional[str] = ...) -> None: ...

class MeasureCommitLatencyRequest(_message.Message):
    __slots__ = ("count", "entry_bytes")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ENTRY_BYTES_FIELD_NUMBER: _ClassVar[int]
    count: int
    entry_bytes: int
    def __init__(self, count: _Optional[int] = ..., entry_bytes: _Optional[int] = ...) -> None: ...

class MeasureCommitLatencyResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "leader", "latency_ms")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    error_code: _common_pb2.ErrorCode
    error_message: str
    leader: LeaderHint
    latency_ms: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, error_code: _Optional[_Union[_common_pb2.ErrorCode, str, int]] = ..., error_message: _Optional[str] = ..., leader: _Optional[_Union[LeaderHint, _Mapping]] = ..., latency_ms: _Optional[_Iterable[float]] = ...) -> None: ...
