from rdq.v1 import envelope_pb2 as _envelope_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReportedOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPORTED_OUTCOME_UNSPECIFIED: _ClassVar[ReportedOutcome]
    REPORTED_SUCCESS: _ClassVar[ReportedOutcome]
    REPORTED_RETRYABLE_FAILURE: _ClassVar[ReportedOutcome]
    REPORTED_PERMANENT_FAILURE: _ClassVar[ReportedOutcome]
    REPORTED_FAILURE: _ClassVar[ReportedOutcome]
    REPORTED_DEFER: _ClassVar[ReportedOutcome]
    REPORTED_RELEASE: _ClassVar[ReportedOutcome]

class DeferThrottle(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEFER_THROTTLE_NONE: _ClassVar[DeferThrottle]
    DEFER_THROTTLE_KEY: _ClassVar[DeferThrottle]
    DEFER_THROTTLE_QUEUE: _ClassVar[DeferThrottle]
REPORTED_OUTCOME_UNSPECIFIED: ReportedOutcome
REPORTED_SUCCESS: ReportedOutcome
REPORTED_RETRYABLE_FAILURE: ReportedOutcome
REPORTED_PERMANENT_FAILURE: ReportedOutcome
REPORTED_FAILURE: ReportedOutcome
REPORTED_DEFER: ReportedOutcome
REPORTED_RELEASE: ReportedOutcome
DEFER_THROTTLE_NONE: DeferThrottle
DEFER_THROTTLE_KEY: DeferThrottle
DEFER_THROTTLE_QUEUE: DeferThrottle

class Problem(_message.Message):
    __slots__ = ("code", "detail", "http_status", "extensions_json")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    EXTENSIONS_JSON_FIELD_NUMBER: _ClassVar[int]
    code: str
    detail: str
    http_status: int
    extensions_json: str
    def __init__(self, code: _Optional[str] = ..., detail: _Optional[str] = ..., http_status: _Optional[int] = ..., extensions_json: _Optional[str] = ...) -> None: ...

class TaskResponse(_message.Message):
    __slots__ = ("envelope",)
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    envelope: _envelope_pb2.Envelope
    def __init__(self, envelope: _Optional[_Union[_envelope_pb2.Envelope, _Mapping]] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("queue", "handler_ref", "handler_version", "payload", "payload_content_type", "headers", "delay_ms", "priority", "idempotency_key", "flow_key", "unique")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    HANDLER_REF_FIELD_NUMBER: _ClassVar[int]
    HANDLER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FLOW_KEY_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    handler_ref: str
    handler_version: str
    payload: bytes
    payload_content_type: str
    headers: _containers.ScalarMap[str, str]
    delay_ms: int
    priority: int
    idempotency_key: str
    flow_key: str
    unique: UniqueOptions
    def __init__(self, queue: _Optional[str] = ..., handler_ref: _Optional[str] = ..., handler_version: _Optional[str] = ..., payload: _Optional[bytes] = ..., payload_content_type: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., delay_ms: _Optional[int] = ..., priority: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., flow_key: _Optional[str] = ..., unique: _Optional[_Union[UniqueOptions, _Mapping]] = ...) -> None: ...

class UniqueOptions(_message.Message):
    __slots__ = ("key", "key_from", "scope", "hold", "hold_ms", "on_conflict")
    KEY_FIELD_NUMBER: _ClassVar[int]
    KEY_FROM_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    HOLD_MS_FIELD_NUMBER: _ClassVar[int]
    ON_CONFLICT_FIELD_NUMBER: _ClassVar[int]
    key: str
    key_from: _containers.RepeatedScalarFieldContainer[str]
    scope: str
    hold: str
    hold_ms: int
    on_conflict: str
    def __init__(self, key: _Optional[str] = ..., key_from: _Optional[_Iterable[str]] = ..., scope: _Optional[str] = ..., hold: _Optional[str] = ..., hold_ms: _Optional[int] = ..., on_conflict: _Optional[str] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("envelope", "created")
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    envelope: _envelope_pb2.Envelope
    created: bool
    def __init__(self, envelope: _Optional[_Union[_envelope_pb2.Envelope, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class SubmitBatchRequest(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[SubmitRequest]
    def __init__(self, tasks: _Optional[_Iterable[_Union[SubmitRequest, _Mapping]]] = ...) -> None: ...

class SubmitItemResult(_message.Message):
    __slots__ = ("envelope", "created", "problem")
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    envelope: _envelope_pb2.Envelope
    created: bool
    problem: Problem
    def __init__(self, envelope: _Optional[_Union[_envelope_pb2.Envelope, _Mapping]] = ..., created: _Optional[bool] = ..., problem: _Optional[_Union[Problem, _Mapping]] = ...) -> None: ...

class SubmitBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SubmitItemResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SubmitItemResult, _Mapping]]] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteTaskRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteTaskResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class QueueRow(_message.Message):
    __slots__ = ("queue", "pending", "in_flight", "succeeded", "dead", "source")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    pending: int
    in_flight: int
    succeeded: int
    dead: int
    source: str
    def __init__(self, queue: _Optional[str] = ..., pending: _Optional[int] = ..., in_flight: _Optional[int] = ..., succeeded: _Optional[int] = ..., dead: _Optional[int] = ..., source: _Optional[str] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueRow]
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueRow, _Mapping]]] = ...) -> None: ...

class GetConfigRequest(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class PutConfigRequest(_message.Message):
    __slots__ = ("queue", "patch_json")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PATCH_JSON_FIELD_NUMBER: _ClassVar[int]
    queue: str
    patch_json: str
    def __init__(self, queue: _Optional[str] = ..., patch_json: _Optional[str] = ...) -> None: ...

class QueueConfigResponse(_message.Message):
    __slots__ = ("policy_json", "process_scope")
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    PROCESS_SCOPE_FIELD_NUMBER: _ClassVar[int]
    policy_json: str
    process_scope: bool
    def __init__(self, policy_json: _Optional[str] = ..., process_scope: _Optional[bool] = ...) -> None: ...

class CapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CapabilitiesResponse(_message.Message):
    __slots__ = ("capabilities",)
    class CapabilitiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bool
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bool] = ...) -> None: ...
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    capabilities: _containers.ScalarMap[str, bool]
    def __init__(self, capabilities: _Optional[_Mapping[str, bool]] = ...) -> None: ...

class GetFlowRequest(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class ThrottleRequest(_message.Message):
    __slots__ = ("queue", "flow_key", "for_ms", "until")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    FLOW_KEY_FIELD_NUMBER: _ClassVar[int]
    FOR_MS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    queue: str
    flow_key: str
    for_ms: int
    until: str
    def __init__(self, queue: _Optional[str] = ..., flow_key: _Optional[str] = ..., for_ms: _Optional[int] = ..., until: _Optional[str] = ...) -> None: ...

class FlowKeyStatus(_message.Message):
    __slots__ = ("key", "in_flight", "tokens", "blocked_until")
    KEY_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    key: str
    in_flight: int
    tokens: float
    blocked_until: str
    def __init__(self, key: _Optional[str] = ..., in_flight: _Optional[int] = ..., tokens: _Optional[float] = ..., blocked_until: _Optional[str] = ...) -> None: ...

class FlowResponse(_message.Message):
    __slots__ = ("queue", "limits_json", "tokens", "blocked_until", "in_flight", "keys", "throttled_claims")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    LIMITS_JSON_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_CLAIMS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    limits_json: str
    tokens: float
    blocked_until: str
    in_flight: int
    keys: _containers.RepeatedCompositeFieldContainer[FlowKeyStatus]
    throttled_claims: int
    def __init__(self, queue: _Optional[str] = ..., limits_json: _Optional[str] = ..., tokens: _Optional[float] = ..., blocked_until: _Optional[str] = ..., in_flight: _Optional[int] = ..., keys: _Optional[_Iterable[_Union[FlowKeyStatus, _Mapping]]] = ..., throttled_claims: _Optional[int] = ...) -> None: ...

class DlqListRequest(_message.Message):
    __slots__ = ("queue", "limit", "cursor", "error_type", "reason")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    queue: str
    limit: int
    cursor: str
    error_type: str
    reason: str
    def __init__(self, queue: _Optional[str] = ..., limit: _Optional[int] = ..., cursor: _Optional[str] = ..., error_type: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DlqListResponse(_message.Message):
    __slots__ = ("items", "next_cursor")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[_envelope_pb2.Envelope]
    next_cursor: str
    def __init__(self, items: _Optional[_Iterable[_Union[_envelope_pb2.Envelope, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class DlqShowRequest(_message.Message):
    __slots__ = ("queue", "id")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    queue: str
    id: str
    def __init__(self, queue: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class RedriveRequest(_message.Message):
    __slots__ = ("queue", "ids", "error_type", "limit", "dry_run", "reason")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    queue: str
    ids: _containers.RepeatedScalarFieldContainer[str]
    error_type: str
    limit: int
    dry_run: bool
    reason: str
    def __init__(self, queue: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ..., error_type: _Optional[str] = ..., limit: _Optional[int] = ..., dry_run: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class RedriveResponse(_message.Message):
    __slots__ = ("queue", "dry_run", "count", "ids")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    dry_run: bool
    count: int
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, queue: _Optional[str] = ..., dry_run: _Optional[bool] = ..., count: _Optional[int] = ..., ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ExportRequest(_message.Message):
    __slots__ = ("queue", "error_type", "reason")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    queue: str
    error_type: str
    reason: str
    def __init__(self, queue: _Optional[str] = ..., error_type: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelTasksRequest(_message.Message):
    __slots__ = ("queue", "ids", "handler_ref", "headers", "older_than_ms", "limit", "dry_run", "message", "pending_only")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    HANDLER_REF_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PENDING_ONLY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    ids: _containers.RepeatedScalarFieldContainer[str]
    handler_ref: str
    headers: _containers.ScalarMap[str, str]
    older_than_ms: int
    limit: int
    dry_run: bool
    message: str
    pending_only: bool
    def __init__(self, queue: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ..., handler_ref: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., older_than_ms: _Optional[int] = ..., limit: _Optional[int] = ..., dry_run: _Optional[bool] = ..., message: _Optional[str] = ..., pending_only: _Optional[bool] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("queue", "status", "handler_ref", "headers", "limit", "cursor")
    class HeadersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    HANDLER_REF_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    queue: str
    status: _envelope_pb2.Status
    handler_ref: str
    headers: _containers.ScalarMap[str, str]
    limit: int
    cursor: str
    def __init__(self, queue: _Optional[str] = ..., status: _Optional[_Union[_envelope_pb2.Status, str]] = ..., handler_ref: _Optional[str] = ..., headers: _Optional[_Mapping[str, str]] = ..., limit: _Optional[int] = ..., cursor: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("items", "next_cursor")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[_envelope_pb2.Envelope]
    next_cursor: str
    def __init__(self, items: _Optional[_Iterable[_Union[_envelope_pb2.Envelope, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class CancelTasksResponse(_message.Message):
    __slots__ = ("queue", "dry_run", "count", "ids", "running")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    queue: str
    dry_run: bool
    count: int
    ids: _containers.RepeatedScalarFieldContainer[str]
    running: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, queue: _Optional[str] = ..., dry_run: _Optional[bool] = ..., count: _Optional[int] = ..., ids: _Optional[_Iterable[str]] = ..., running: _Optional[_Iterable[str]] = ...) -> None: ...

class DlqReasonsRequest(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: str
    def __init__(self, queue: _Optional[str] = ...) -> None: ...

class DlqReasonsResponse(_message.Message):
    __slots__ = ("queue", "reasons")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    reasons: _containers.RepeatedCompositeFieldContainer[ReasonCount]
    def __init__(self, queue: _Optional[str] = ..., reasons: _Optional[_Iterable[_Union[ReasonCount, _Mapping]]] = ...) -> None: ...

class ReasonCount(_message.Message):
    __slots__ = ("reason", "count")
    REASON_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    reason: str
    count: int
    def __init__(self, reason: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class ImportRequest(_message.Message):
    __slots__ = ("queue", "dry_run", "envelope", "envelope_json")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_JSON_FIELD_NUMBER: _ClassVar[int]
    queue: str
    dry_run: bool
    envelope: _envelope_pb2.Envelope
    envelope_json: bytes
    def __init__(self, queue: _Optional[str] = ..., dry_run: _Optional[bool] = ..., envelope: _Optional[_Union[_envelope_pb2.Envelope, _Mapping]] = ..., envelope_json: _Optional[bytes] = ...) -> None: ...

class ImportResponse(_message.Message):
    __slots__ = ("queue", "dry_run", "checked", "imported")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    IMPORTED_FIELD_NUMBER: _ClassVar[int]
    queue: str
    dry_run: bool
    checked: int
    imported: int
    def __init__(self, queue: _Optional[str] = ..., dry_run: _Optional[bool] = ..., checked: _Optional[int] = ..., imported: _Optional[int] = ...) -> None: ...

class PurgeRequest(_message.Message):
    __slots__ = ("queue", "dry_run")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    queue: str
    dry_run: bool
    def __init__(self, queue: _Optional[str] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class PurgeResponse(_message.Message):
    __slots__ = ("queue", "dry_run", "purged")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    queue: str
    dry_run: bool
    purged: int
    def __init__(self, queue: _Optional[str] = ..., dry_run: _Optional[bool] = ..., purged: _Optional[int] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ("queue", "max", "lease_ms")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    queue: str
    max: int
    lease_ms: int
    def __init__(self, queue: _Optional[str] = ..., max: _Optional[int] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class LeasedTask(_message.Message):
    __slots__ = ("id", "lease_token", "envelope")
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    id: str
    lease_token: str
    envelope: _envelope_pb2.Envelope
    def __init__(self, id: _Optional[str] = ..., lease_token: _Optional[str] = ..., envelope: _Optional[_Union[_envelope_pb2.Envelope, _Mapping]] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[LeasedTask]
    def __init__(self, tasks: _Optional[_Iterable[_Union[LeasedTask, _Mapping]]] = ...) -> None: ...

class ReportedError(_message.Message):
    __slots__ = ("type", "message", "detail_json", "stack")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_JSON_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    type: str
    message: str
    detail_json: str
    stack: str
    def __init__(self, type: _Optional[str] = ..., message: _Optional[str] = ..., detail_json: _Optional[str] = ..., stack: _Optional[str] = ...) -> None: ...

class SettleRequest(_message.Message):
    __slots__ = ("id", "lease_token", "outcome", "error", "defer_ms", "throttle")
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DEFER_MS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_FIELD_NUMBER: _ClassVar[int]
    id: str
    lease_token: str
    outcome: ReportedOutcome
    error: ReportedError
    defer_ms: int
    throttle: DeferThrottle
    def __init__(self, id: _Optional[str] = ..., lease_token: _Optional[str] = ..., outcome: _Optional[_Union[ReportedOutcome, str]] = ..., error: _Optional[_Union[ReportedError, _Mapping]] = ..., defer_ms: _Optional[int] = ..., throttle: _Optional[_Union[DeferThrottle, str]] = ...) -> None: ...

class SettleBatchRequest(_message.Message):
    __slots__ = ("settles",)
    SETTLES_FIELD_NUMBER: _ClassVar[int]
    settles: _containers.RepeatedCompositeFieldContainer[SettleRequest]
    def __init__(self, settles: _Optional[_Iterable[_Union[SettleRequest, _Mapping]]] = ...) -> None: ...

class SettleItemResult(_message.Message):
    __slots__ = ("id", "envelope", "problem", "cancel_requested")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    id: str
    envelope: _envelope_pb2.Envelope
    problem: Problem
    cancel_requested: bool
    def __init__(self, id: _Optional[str] = ..., envelope: _Optional[_Union[_envelope_pb2.Envelope, _Mapping]] = ..., problem: _Optional[_Union[Problem, _Mapping]] = ..., cancel_requested: _Optional[bool] = ...) -> None: ...

class SettleBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SettleItemResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SettleItemResult, _Mapping]]] = ...) -> None: ...

class ExtendLeaseRequest(_message.Message):
    __slots__ = ("id", "lease_token", "extend_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXTEND_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    lease_token: str
    extend_ms: int
    def __init__(self, id: _Optional[str] = ..., lease_token: _Optional[str] = ..., extend_ms: _Optional[int] = ...) -> None: ...

class WorkRequest(_message.Message):
    __slots__ = ("hello", "credit", "settle", "extend")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    SETTLE_FIELD_NUMBER: _ClassVar[int]
    EXTEND_FIELD_NUMBER: _ClassVar[int]
    hello: WorkHello
    credit: WorkCredit
    settle: WorkSettle
    extend: WorkExtend
    def __init__(self, hello: _Optional[_Union[WorkHello, _Mapping]] = ..., credit: _Optional[_Union[WorkCredit, _Mapping]] = ..., settle: _Optional[_Union[WorkSettle, _Mapping]] = ..., extend: _Optional[_Union[WorkExtend, _Mapping]] = ...) -> None: ...

class WorkHello(_message.Message):
    __slots__ = ("queues", "credits", "lease_ms", "bare_acks", "task_batches")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    BARE_ACKS_FIELD_NUMBER: _ClassVar[int]
    TASK_BATCHES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedScalarFieldContainer[str]
    credits: int
    lease_ms: int
    bare_acks: bool
    task_batches: bool
    def __init__(self, queues: _Optional[_Iterable[str]] = ..., credits: _Optional[int] = ..., lease_ms: _Optional[int] = ..., bare_acks: _Optional[bool] = ..., task_batches: _Optional[bool] = ...) -> None: ...

class WorkCredit(_message.Message):
    __slots__ = ("credits",)
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    credits: int
    def __init__(self, credits: _Optional[int] = ...) -> None: ...

class WorkSettle(_message.Message):
    __slots__ = ("seq", "settles")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SETTLES_FIELD_NUMBER: _ClassVar[int]
    seq: int
    settles: _containers.RepeatedCompositeFieldContainer[SettleRequest]
    def __init__(self, seq: _Optional[int] = ..., settles: _Optional[_Iterable[_Union[SettleRequest, _Mapping]]] = ...) -> None: ...

class WorkExtend(_message.Message):
    __slots__ = ("seq", "extend")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    EXTEND_FIELD_NUMBER: _ClassVar[int]
    seq: int
    extend: ExtendLeaseRequest
    def __init__(self, seq: _Optional[int] = ..., extend: _Optional[_Union[ExtendLeaseRequest, _Mapping]] = ...) -> None: ...

class WorkResponse(_message.Message):
    __slots__ = ("task", "ack", "cancel", "tasks")
    TASK_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    task: LeasedTask
    ack: WorkAck
    cancel: WorkCancel
    tasks: ClaimResponse
    def __init__(self, task: _Optional[_Union[LeasedTask, _Mapping]] = ..., ack: _Optional[_Union[WorkAck, _Mapping]] = ..., cancel: _Optional[_Union[WorkCancel, _Mapping]] = ..., tasks: _Optional[_Union[ClaimResponse, _Mapping]] = ...) -> None: ...

class WorkCancel(_message.Message):
    __slots__ = ("id", "lease_token", "request")
    ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    id: str
    lease_token: str
    request: _envelope_pb2.CancelRequest
    def __init__(self, id: _Optional[str] = ..., lease_token: _Optional[str] = ..., request: _Optional[_Union[_envelope_pb2.CancelRequest, _Mapping]] = ...) -> None: ...

class WorkAck(_message.Message):
    __slots__ = ("seq", "results")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    results: _containers.RepeatedCompositeFieldContainer[SettleItemResult]
    def __init__(self, seq: _Optional[int] = ..., results: _Optional[_Iterable[_Union[SettleItemResult, _Mapping]]] = ...) -> None: ...

class PutScheduleRequest(_message.Message):
    __slots__ = ("name", "schedule_json", "owner")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_JSON_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    name: str
    schedule_json: str
    owner: str
    def __init__(self, name: _Optional[str] = ..., schedule_json: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class PutScheduleResponse(_message.Message):
    __slots__ = ("schedule", "created")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    schedule: ScheduleResponse
    created: bool
    def __init__(self, schedule: _Optional[_Union[ScheduleResponse, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[ScheduleResponse]
    def __init__(self, schedules: _Optional[_Iterable[_Union[ScheduleResponse, _Mapping]]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RunScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class NextDueRequest(_message.Message):
    __slots__ = ("name", "count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class NextDueResponse(_message.Message):
    __slots__ = ("name", "due_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DUE_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    due_ms: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., due_ms: _Optional[_Iterable[int]] = ...) -> None: ...

class ScheduleResponse(_message.Message):
    __slots__ = ("name", "schedule_json", "owner", "created_at_ms", "updated_at_ms", "last_due_ms", "last_fire_at_ms", "last_fired_task", "next_due_ms", "fires", "skips")
    class SkipsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_JSON_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_DUE_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRE_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRED_TASK_FIELD_NUMBER: _ClassVar[int]
    NEXT_DUE_MS_FIELD_NUMBER: _ClassVar[int]
    FIRES_FIELD_NUMBER: _ClassVar[int]
    SKIPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    schedule_json: str
    owner: str
    created_at_ms: int
    updated_at_ms: int
    last_due_ms: int
    last_fire_at_ms: int
    last_fired_task: str
    next_due_ms: int
    fires: int
    skips: _containers.ScalarMap[str, int]
    def __init__(self, name: _Optional[str] = ..., schedule_json: _Optional[str] = ..., owner: _Optional[str] = ..., created_at_ms: _Optional[int] = ..., updated_at_ms: _Optional[int] = ..., last_due_ms: _Optional[int] = ..., last_fire_at_ms: _Optional[int] = ..., last_fired_task: _Optional[str] = ..., next_due_ms: _Optional[int] = ..., fires: _Optional[int] = ..., skips: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ListSourcesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSourcesResponse(_message.Message):
    __slots__ = ("sources",)
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[SourceResponse]
    def __init__(self, sources: _Optional[_Iterable[_Union[SourceResponse, _Mapping]]] = ...) -> None: ...

class GetSourceRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class SourceResponse(_message.Message):
    __slots__ = ("name", "kind", "queue", "state", "paused", "lag", "ingested", "dead", "duplicates", "rate", "last_error", "last_error_at_ms", "cursors_in_store", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    INGESTED_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CURSORS_IN_STORE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    queue: str
    state: str
    paused: bool
    lag: int
    ingested: int
    dead: int
    duplicates: int
    rate: float
    last_error: str
    last_error_at_ms: int
    cursors_in_store: bool
    partitions: _containers.RepeatedCompositeFieldContainer[SourcePartition]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., queue: _Optional[str] = ..., state: _Optional[str] = ..., paused: _Optional[bool] = ..., lag: _Optional[int] = ..., ingested: _Optional[int] = ..., dead: _Optional[int] = ..., duplicates: _Optional[int] = ..., rate: _Optional[float] = ..., last_error: _Optional[str] = ..., last_error_at_ms: _Optional[int] = ..., cursors_in_store: _Optional[bool] = ..., partitions: _Optional[_Iterable[_Union[SourcePartition, _Mapping]]] = ...) -> None: ...

class SourcePartition(_message.Message):
    __slots__ = ("partition", "cursor", "lag")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    partition: str
    cursor: int
    lag: int
    def __init__(self, partition: _Optional[str] = ..., cursor: _Optional[int] = ..., lag: _Optional[int] = ...) -> None: ...

class ResetSourceCursorsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResetSourceCursorsResponse(_message.Message):
    __slots__ = ("name", "deleted")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    name: str
    deleted: int
    def __init__(self, name: _Optional[str] = ..., deleted: _Optional[int] = ...) -> None: ...
