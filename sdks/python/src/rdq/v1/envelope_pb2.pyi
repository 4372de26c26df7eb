from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_UNSPECIFIED: _ClassVar[Status]
    PENDING: _ClassVar[Status]
    IN_FLIGHT: _ClassVar[Status]
    SUCCEEDED: _ClassVar[Status]
    DEAD: _ClassVar[Status]

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    SUCCESS: _ClassVar[Outcome]
    RETRYABLE_FAILURE: _ClassVar[Outcome]
    PERMANENT_FAILURE: _ClassVar[Outcome]
    LEASE_EXPIRED: _ClassVar[Outcome]
STATUS_UNSPECIFIED: Status
PENDING: Status
IN_FLIGHT: Status
SUCCEEDED: Status
DEAD: Status
OUTCOME_UNSPECIFIED: Outcome
SUCCESS: Outcome
RETRYABLE_FAILURE: Outcome
PERMANENT_FAILURE: Outcome
LEASE_EXPIRED: Outcome

class Envelope(_message.Message):
    __slots__ = ("envelope_version", "id", "queue", "handler_ref", "handler_version", "payload", "payload_content_type", "payload_ref", "headers", "status", "priority", "deferral_count", "attempt_count", "redrive_count", "claim_count", "next_attempt_at", "lease_expires_at", "created_at", "attempts", "omitted", "unknown_json", "dead_reason", "cancel_requested")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ENVELOPE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    HANDLER_REF_FIELD_NUMBER: _ClassVar[int]
    HANDLER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_REF_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEFERRAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_COUNT_FIELD_NUMBER: _ClassVar[int]
    REDRIVE_COUNT_FIELD_NUMBER: _ClassVar[int]
    CLAIM_COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_JSON_FIELD_NUMBER: _ClassVar[int]
    DEAD_REASON_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    envelope_version: int
    id: str
    queue: str
    handler_ref: str
    handler_version: str
    payload: bytes
    payload_content_type: str
    payload_ref: str
    headers: _containers.ScalarMap[str, str]
    status: Status
    priority: int
    deferral_count: int
    attempt_count: int
    redrive_count: int
    claim_count: int
    next_attempt_at: str
    lease_expires_at: str
    created_at: str
    attempts: _containers.RepeatedCompositeFieldContainer[AttemptRecord]
    omitted: _containers.RepeatedScalarFieldContainer[str]
    unknown_json: str
    dead_reason: DeadReason
    cancel_requested: CancelRequest
    def __init__(self, envelope_version: _Optional[int] = ..., id: _Optional[str] = ..., queue: _Optional[str] = ..., handler_ref: _Optional[str] = ..., handler_version: _Optional[str] = ..., payload: _Optional[bytes] = ..., payload_content_type: _Optional[str] = ..., payload_ref: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., status: _Optional[_Union[Status, str]] = ..., priority: _Optional[int] = ..., deferral_count: _Optional[int] = ..., attempt_count: _Optional[int] = ..., redrive_count: _Optional[int] = ..., claim_count: _Optional[int] = ..., next_attempt_at: _Optional[str] = ..., lease_expires_at: _Optional[str] = ..., created_at: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[AttemptRecord, _Mapping]]] = ..., omitted: _Optional[_Iterable[str]] = ..., unknown_json: _Optional[str] = ..., dead_reason: _Optional[_Union[DeadReason, _Mapping]] = ..., cancel_requested: _Optional[_Union[CancelRequest, _Mapping]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("at", "by", "message", "omitted", "unknown_json")
    AT_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_JSON_FIELD_NUMBER: _ClassVar[int]
    at: str
    by: str
    message: str
    omitted: _containers.RepeatedScalarFieldContainer[str]
    unknown_json: str
    def __init__(self, at: _Optional[str] = ..., by: _Optional[str] = ..., message: _Optional[str] = ..., omitted: _Optional[_Iterable[str]] = ..., unknown_json: _Optional[str] = ...) -> None: ...

class DeadReason(_message.Message):
    __slots__ = ("code", "at", "by", "message", "omitted", "unknown_json")
    CODE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_JSON_FIELD_NUMBER: _ClassVar[int]
    code: str
    at: str
    by: str
    message: str
    omitted: _containers.RepeatedScalarFieldContainer[str]
    unknown_json: str
    def __init__(self, code: _Optional[str] = ..., at: _Optional[str] = ..., by: _Optional[str] = ..., message: _Optional[str] = ..., omitted: _Optional[_Iterable[str]] = ..., unknown_json: _Optional[str] = ...) -> None: ...

class AttemptRecord(_message.Message):
    __slots__ = ("attempt_no", "started_at", "finished_at", "outcome", "error", "omitted", "unknown_json")
    ATTEMPT_NO_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_JSON_FIELD_NUMBER: _ClassVar[int]
    attempt_no: int
    started_at: str
    finished_at: str
    outcome: Outcome
    error: ErrorInfo
    omitted: _containers.RepeatedScalarFieldContainer[str]
    unknown_json: str
    def __init__(self, attempt_no: _Optional[int] = ..., started_at: _Optional[str] = ..., finished_at: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., error: _Optional[_Union[ErrorInfo, _Mapping]] = ..., omitted: _Optional[_Iterable[str]] = ..., unknown_json: _Optional[str] = ...) -> None: ...

class ErrorInfo(_message.Message):
    __slots__ = ("type", "message", "detail_json", "stack", "omitted", "unknown_json")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_JSON_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_JSON_FIELD_NUMBER: _ClassVar[int]
    type: str
    message: str
    detail_json: str
    stack: str
    omitted: _containers.RepeatedScalarFieldContainer[str]
    unknown_json: str
    def __init__(self, type: _Optional[str] = ..., message: _Optional[str] = ..., detail_json: _Optional[str] = ..., stack: _Optional[str] = ..., omitted: _Optional[_Iterable[str]] = ..., unknown_json: _Optional[str] = ...) -> None: ...
