# Generated from proto/controller.proto by `./dev proto`. DO NOT EDIT.
from proto import common_pb2 as _common_pb2
from proto import metadata_pb2 as _metadata_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("broker_id", "incarnation_id", "endpoints", "rack", "cluster_id")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    incarnation_id: str
    endpoints: _containers.RepeatedCompositeFieldContainer[_metadata_pb2.Endpoint]
    rack: str
    cluster_id: str
    def __init__(self, broker_id: _Optional[int] = ..., incarnation_id: _Optional[str] = ..., endpoints: _Optional[_Iterable[_Union[_metadata_pb2.Endpoint, _Mapping]]] = ..., rack: _Optional[str] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("error", "broker_epoch")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    broker_epoch: int
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class BrokerHeartbeatRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "current_metadata_offset", "want_fence", "want_shut_down")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CURRENT_METADATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WANT_FENCE_FIELD_NUMBER: _ClassVar[int]
    WANT_SHUT_DOWN_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., current_metadata_offset: _Optional[int] = ..., want_fence: _Optional[bool] = ..., want_shut_down: _Optional[bool] = ...) -> None: ...

class BrokerHeartbeatResponse(_message.Message):
    __slots__ = ("error", "is_caught_up", "is_fenced", "should_shut_down")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    IS_CAUGHT_UP_FIELD_NUMBER: _ClassVar[int]
    IS_FENCED_FIELD_NUMBER: _ClassVar[int]
    SHOULD_SHUT_DOWN_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., is_caught_up: _Optional[bool] = ..., is_fenced: _Optional[bool] = ..., should_shut_down: _Optional[bool] = ...) -> None: ...

class AlterPartitionRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "partitions")
    class PartitionState(_message.Message):
        __slots__ = ("topic_id", "partition", "leader_epoch", "partition_epoch", "new_isr_with_epochs")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
        NEW_ISR_WITH_EPOCHS_FIELD_NUMBER: _ClassVar[int]
        topic_id: str
        partition: int
        leader_epoch: int
        partition_epoch: int
        new_isr_with_epochs: _containers.RepeatedCompositeFieldContainer[AlterPartitionRequest.BrokerState]
        def __init__(self, topic_id: _Optional[str] = ..., partition: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., new_isr_with_epochs: _Optional[_Iterable[_Union[AlterPartitionRequest.BrokerState, _Mapping]]] = ...) -> None: ...
    class BrokerState(_message.Message):
        __slots__ = ("broker_id", "broker_epoch")
        BROKER_ID_FIELD_NUMBER: _ClassVar[int]
        BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        broker_id: int
        broker_epoch: int
        def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[AlterPartitionRequest.PartitionState]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[AlterPartitionRequest.PartitionState, _Mapping]]] = ...) -> None: ...

class AlterPartitionResponse(_message.Message):
    __slots__ = ("error", "partitions")
    class PartitionResult(_message.Message):
        __slots__ = ("topic_id", "partition", "error", "leader", "isr", "leader_epoch", "partition_epoch")
        TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
        PARTITION_FIELD_NUMBER: _ClassVar[int]
        ERROR_FIELD_NUMBER: _ClassVar[int]
        LEADER_FIELD_NUMBER: _ClassVar[int]
        ISR_FIELD_NUMBER: _ClassVar[int]
        LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
        PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
        topic_id: str
        partition: int
        error: _common_pb2.Error
        leader: int
        isr: _containers.RepeatedScalarFieldContainer[int]
        leader_epoch: int
        partition_epoch: int
        def __init__(self, topic_id: _Optional[str] = ..., partition: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., leader: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ...) -> None: ...
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    partitions: _containers.RepeatedCompositeFieldContainer[AlterPartitionResponse.PartitionResult]
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[AlterPartitionResponse.PartitionResult, _Mapping]]] = ...) -> None: ...

class AllocateProducerIdsRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class AllocateProducerIdsResponse(_message.Message):
    __slots__ = ("error", "producer_id_start", "producer_id_len")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_START_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_LEN_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    producer_id_start: int
    producer_id_len: int
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., producer_id_start: _Optional[int] = ..., producer_id_len: _Optional[int] = ...) -> None: ...

class FetchMetadataRequest(_message.Message):
    __slots__ = ("from_offset", "broker_id")
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    from_offset: int
    broker_id: int
    def __init__(self, from_offset: _Optional[int] = ..., broker_id: _Optional[int] = ...) -> None: ...

class MetadataEntry(_message.Message):
    __slots__ = ("offset", "batch")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    batch: bytes
    def __init__(self, offset: _Optional[int] = ..., batch: _Optional[bytes] = ...) -> None: ...

class FetchMetadataResponse(_message.Message):
    __slots__ = ("snapshot", "entries")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    snapshot: bytes
    entries: _containers.RepeatedCompositeFieldContainer[MetadataEntry]
    def __init__(self, snapshot: _Optional[bytes] = ..., entries: _Optional[_Iterable[_Union[MetadataEntry, _Mapping]]] = ...) -> None: ...
