"""Every call the clients make, written once: what to send over HTTP (and
over gRPC where the client prefers it) and how to read the answer.
`AsyncClient` and `Client` only carry a `Call`, so the async API and its
sync twin cannot drift apart."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx

from . import envelope
from ._grpc import problem_document
from ._proto import envelope_from_proto
from .answers import (
    CancelResult,
    DeadPage,
    LeasedTask,
    QueueCounts,
    ReasonCount,
    RedriveResult,
    SettleResult,
    SubmitResult,
    TaskPage,
)
from .envelope import Envelope, EnvelopeError, Status
from .envelope._json import Json, JsonSyntaxError, parse, to_python
from .envelope.codec import decode_value
from .errors import InvalidRequest, RdqError, ServerError, error_for
from .schedules import Schedule, ScheduleOwner, ScheduleState, check_schedule_name, instant
from .sources import SourceStatus, check_source_name
from .v1 import api_pb2, envelope_pb2

T = TypeVar("T")

Seconds = float | timedelta
Millis = int | timedelta

UNRECORDED = "UNRECORDED"
"""The reason filter of dead tasks with no reason recorded (they died
before rdq recorded reasons, or were imported so)."""


@dataclass(frozen=True)
class Rpc(Generic[T]):
    """The same call as a gRPC method (`Tasks/Submit`) and its reader."""

    service: str
    method: str
    request: Any
    read: Callable[[Any], T]


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reader of its answer; `rpc`, when set, is the
    same call over gRPC, which the clients prefer (see `client.py`). A call
    whose request a typed gRPC message cannot carry as given (a status name
    this SDK does not know, say) has no `rpc`: it goes over HTTP, and the
    server judges it, with the same code either way."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    body: object = None
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] | None = None
    content: bytes | None = None
    rpc: Rpc[T] | None = None


UniqueScope = Literal["queue", "handler"]
UniqueHold = Literal["until_started", "until_finished", "until_succeeded", "for", "forever"]
OnConflict = Literal["return", "replace", "debounce", "existing"]


@dataclass(frozen=True)
class Unique:
    """A submit's uniqueness (docs/uniqueness.md): one task at a time holds
    the key, for as long as `hold` says; a submit of a held key does what
    `on_conflict` says (by default it raises `UniqueHeld`, naming the
    holder, and nothing is written).

    Exactly one of `key` (1 to 512 bytes, no control characters) and
    `key_from` (up to 16 JSON pointers into the JSON payload, such as
    `/customer_id`, whose values the server derives the key from) is
    given. `scope` is `queue` (the server's default) or `handler`; `hold`
    is `until_started`, `until_finished` (default), `until_succeeded`,
    `for` (with `hold_ms`: milliseconds or a timedelta) or `forever`;
    `on_conflict` is `return` (default), `replace`, `debounce` or
    `existing` (the holder is answered as an idempotent repeat; with
    `hold="forever"` in the queue's scope, an idempotency key). None
    leaves a field to the server's default. The server judges every rule
    (`InvalidRequest` naming the field, such as `unique.key_from`), so the
    answer is the same on both transports."""

    key: str | None = None
    key_from: Sequence[str] | None = None
    scope: UniqueScope | None = None
    hold: UniqueHold | None = None
    hold_ms: Millis | None = None
    on_conflict: OnConflict | None = None

    def to_json(self) -> dict[str, object]:
        """The HTTP API's `unique` object."""
        body: dict[str, object] = {}
        if self.key is not None:
            body["key"] = self.key
        if self.key_from is not None:
            if isinstance(self.key_from, str):
                raise InvalidRequest(
                    "INVALID_ARGUMENT", "key_from is a list of JSON pointers", status=400, field="unique.key_from"
                )
            body["key_from"] = list(self.key_from)
        if self.scope is not None:
            body["scope"] = self.scope
        if self.hold is not None:
            body["hold"] = self.hold
        if self.hold_ms is not None:
            hold_ms = self.hold_ms
            body["hold_ms"] = round(hold_ms.total_seconds() * 1000) if isinstance(hold_ms, timedelta) else hold_ms
        if self.on_conflict is not None:
            body["on_conflict"] = self.on_conflict
        return body


_U64 = (1 << 64) - 1


def unique_options(body: Mapping[str, object]) -> api_pb2.UniqueOptions | None:
    """The `unique` object as gRPC's `UniqueOptions`, or None when the
    message cannot carry it as given (a `hold_ms` that is not an unsigned
    64-bit integer, a value of the wrong type): then the submit goes over
    HTTP and the server refuses it there."""
    opts = api_pb2.UniqueOptions()
    for name in ("key", "scope", "hold", "on_conflict"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            return None
        setattr(opts, name, value)
    key_from = body.get("key_from")
    if key_from is not None:
        if not isinstance(key_from, list) or not all(isinstance(p, str) for p in key_from):
            return None
        opts.key_from.extend(key_from)
    hold_ms = body.get("hold_ms")
    if hold_ms is not None:
        if isinstance(hold_ms, bool) or not isinstance(hold_ms, int) or not 0 <= hold_ms <= _U64:
            return None
        opts.hold_ms = hold_ms
    return opts


@dataclass(frozen=True)
class Submit:
    """One task to submit (the client subset of the envelope).

    `payload` is sent as opaque bytes when it is `bytes`, otherwise as JSON:
    any JSON-able value, a dataclass or a pydantic model. Headers must not
    use the `rdq.` prefix (`RESERVED_HEADER`, refused before any request)."""

    queue: str
    handler: str
    payload: object = None
    delay: Seconds | None = None
    priority: int | None = None
    idempotency_key: str | None = None
    flow_key: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    handler_version: str | None = None
    content_type: str | None = None
    unique: Unique | None = None


def milliseconds(value: Seconds) -> int:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise InvalidRequest("INVALID_FIELD", "a delay must not be negative", field="delay_ms")
    return round(seconds * 1000)


def _segment(value: str) -> str:
    return quote(value, safe="")


# -- reading answers ---------------------------------------------------------


def _refusal(resp: httpx.Response) -> RdqError:
    try:
        problem = resp.json()
    except ValueError:
        problem = None
    if isinstance(problem, dict) and isinstance(problem.get("code"), str):
        return error_for(resp.status_code, problem["code"], str(problem.get("detail") or ""), problem)
    code = "INTERNAL" if resp.status_code >= 500 else "HTTP_" + str(resp.status_code)
    return error_for(resp.status_code, code, resp.text[:500])


def _document(resp: httpx.Response) -> Json:
    """The answer as exact JSON (numbers kept as written), or the refusal."""
    if resp.status_code >= 400:
        raise _refusal(resp)
    try:
        return parse(resp.content)
    except JsonSyntaxError as err:
        raise ServerError("INTERNAL", f"the server answered something that is not JSON: {err}") from None


def _envelope(value: Json) -> Envelope:
    try:
        return decode_value(value)
    except EnvelopeError as err:
        raise ServerError(err.code.value, f"the server answered an envelope this SDK refuses: {err}") from None


def _obj(value: Json) -> dict[str, Json]:
    if not isinstance(value, dict):
        raise ServerError("INTERNAL", "the server answered JSON of an unexpected shape")
    return value


def _list(value: Json) -> list[Json]:
    if not isinstance(value, list):
        raise ServerError("INTERNAL", "the server answered JSON of an unexpected shape")
    return value


def _opt_str(value: Json) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Json) -> int:
    if isinstance(value, envelope.JsonNumber) and value.is_integer_text():
        return int(value.text)
    return 0


def read_envelope(resp: httpx.Response) -> Envelope:
    return _envelope(_document(resp))


def read_plain(resp: httpx.Response) -> Any:
    if resp.status_code >= 400:
        raise _refusal(resp)
    return resp.json()


def read_nothing(resp: httpx.Response) -> None:
    if resp.status_code >= 400:
        raise _refusal(resp)


# -- building requests -------------------------------------------------------


def payload_fields(payload: object, content_type: str | None) -> dict[str, object]:
    if isinstance(payload, (bytes, bytearray, memoryview)):
        body: dict[str, object] = {"payload": base64.b64encode(bytes(payload)).decode("ascii")}
    elif payload is None:
        body = {}
    else:
        body = {"payload_json": to_jsonable(payload)}
    if content_type is not None:
        body["payload_content_type"] = content_type
    return body


def to_jsonable(value: object) -> object:
    """A pydantic model or a dataclass as JSON data; anything else as is."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def submit_body(s: Submit) -> dict[str, object]:
    """The body of one submit, checked as far as it can be without asking."""
    try:
        envelope.check_queue_name(s.queue)
        envelope.check_handler_ref(s.handler)
        envelope.check_user_headers(s.headers)
    except EnvelopeError as err:
        raise InvalidRequest(err.code.value, err.message, status=400, field=err.path) from None
    if s.flow_key is not None and not envelope.is_valid_flow_key(s.flow_key):
        raise InvalidRequest(
            "INVALID_FIELD", "a flow key is 1 to 128 bytes of [A-Za-z0-9._:/@=+-]", status=400, field="flow_key"
        )
    body: dict[str, object] = {"queue": s.queue, "handler_ref": s.handler}
    body.update(payload_fields(s.payload, s.content_type))
    if s.headers:
        body["headers"] = dict(s.headers)
    if s.delay is not None:
        body["delay_ms"] = milliseconds(s.delay)
    if s.priority is not None:
        body["priority"] = s.priority
    if s.idempotency_key is not None:
        body["idempotency_key"] = s.idempotency_key
    if s.flow_key is not None:
        body["flow_key"] = s.flow_key
    if s.handler_version is not None:
        body["handler_version"] = s.handler_version
    if s.unique is not None:
        body["unique"] = s.unique.to_json()
    return body


def submit_request(s: Submit, body: dict[str, object]) -> api_pb2.SubmitRequest | None:
    """The submit whose HTTP body is `body` as gRPC's `SubmitRequest` (JSON
    payloads encoded here, compact, as the HTTP route stores `payload_json`),
    or None when the message cannot carry it (see `unique_options`)."""
    payload = s.payload
    if isinstance(payload, (bytes, bytearray, memoryview)):
        raw, content_type = bytes(payload), "application/octet-stream"
    elif payload is None:
        raw, content_type = b"", "application/octet-stream"
    else:
        raw, content_type = encode_body(body["payload_json"]), "application/json"
    req = api_pb2.SubmitRequest(
        queue=s.queue,
        handler_ref=s.handler,
        payload=raw,
        payload_content_type=s.content_type or content_type,
        headers=dict(s.headers),
    )
    if "delay_ms" in body:
        req.delay_ms = int(str(body["delay_ms"]))
    if s.priority is not None:
        if not 0 <= s.priority <= 0xFFFFFFFF:  # the server refuses what is above 255
            raise InvalidRequest("INVALID_FIELD", "priority is 0 to 255", status=400, field="priority")
        req.priority = s.priority
    if s.idempotency_key is not None:
        req.idempotency_key = s.idempotency_key
    if s.flow_key is not None:
        req.flow_key = s.flow_key
    if s.handler_version is not None:
        req.handler_version = s.handler_version
    unique = body.get("unique")
    if isinstance(unique, dict):
        opts = unique_options(unique)
        if opts is None:
            return None
        req.unique.CopyFrom(opts)
    return req


def _envelope_of(msg: Any) -> Envelope:
    try:
        return envelope_from_proto(msg.envelope)
    except (KeyError, ValueError, JsonSyntaxError) as err:
        raise ServerError("INTERNAL", f"the server answered an envelope this SDK refuses: {err}") from None


def submit(s: Submit) -> Call[Envelope]:
    body = submit_body(s)
    request = submit_request(s, body)
    rpc = None if request is None else Rpc("Tasks", "Submit", request, _envelope_of)
    return Call("POST", "/v1/tasks", read_envelope, body=body, rpc=rpc)


def _submit_result(status: int, envelope: Envelope | None, problem: dict[str, Any] | None) -> SubmitResult:
    if problem is None:
        return SubmitResult(status=status, envelope=envelope)
    code, detail = problem.get("code"), problem.get("detail")
    holder, hold = problem.get("holder"), problem.get("hold")
    return SubmitResult(
        status=status,
        envelope=envelope,
        code=code if isinstance(code, str) else None,
        detail=detail if isinstance(detail, str) else None,
        holder=holder if isinstance(holder, str) else None,
        hold=hold if isinstance(hold, str) else None,
        problem=problem,
    )


def _read_submit_results(resp: httpx.Response) -> list[SubmitResult]:
    out = []
    for item in _list(_obj(_document(resp)).get("results")):
        r = _obj(item)
        env = r.get("envelope")
        problem = None
        if r.get("code") is not None:
            # The item is its problem document: `code`, `detail`, `holder`, …
            problem = {k: to_python(v) for k, v in r.items() if k != "envelope"}
        out.append(_submit_result(_int(r.get("status")), None if env is None else _envelope(env), problem))
    return out


def _read_submit_items(resp: api_pb2.SubmitBatchResponse) -> list[SubmitResult]:
    out = []
    for r in resp.results:
        if r.HasField("problem"):
            out.append(_submit_result(r.problem.http_status, None, problem_document(r.problem)))
        else:
            out.append(SubmitResult(status=201 if r.created else 200, envelope=_envelope_of(r)))
    return out


def submit_batch(items: Sequence[Submit]) -> Call[list[SubmitResult]]:
    bodies = [submit_body(s) for s in items]
    requests = [submit_request(s, b) for s, b in zip(items, bodies, strict=True)]
    rpc = None
    if all(r is not None for r in requests):
        request = api_pb2.SubmitBatchRequest(tasks=[r for r in requests if r is not None])
        rpc = Rpc("Tasks", "SubmitBatch", request, _read_submit_items)
    return Call("POST", "/v1/tasks/batch", _read_submit_results, body={"tasks": bodies}, rpc=rpc)


def get(task_id: str) -> Call[Envelope]:
    rpc = Rpc("Tasks", "Get", api_pb2.GetTaskRequest(id=task_id), _envelope_of)
    return Call("GET", f"/v1/tasks/{_segment(task_id)}", read_envelope, rpc=rpc)


def delete(task_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/tasks/{_segment(task_id)}", read_nothing)


def _read_cancel(resp: httpx.Response) -> CancelResult:
    doc = read_plain(resp)
    return CancelResult(
        queue=doc["queue"],
        dry_run=doc["dry_run"],
        count=doc["count"],
        ids=list(doc["ids"]),
        running=list(doc.get("running") or []),
    )


def cancel(
    queue: str,
    ids: Sequence[str] | None,
    handler_ref: str | None,
    headers: Mapping[str, str] | None,
    older_than: Millis | None,
    limit: int | None,
    dry_run: bool,
    message: str | None,
    pending_only: bool = False,
) -> Call[CancelResult]:
    body: dict[str, object] = {"dry_run": dry_run}
    if pending_only:
        body["pending_only"] = True
    if ids is not None:
        body["ids"] = list(ids)
    if handler_ref is not None:
        body["handler_ref"] = handler_ref
    if headers is not None:
        body["headers"] = dict(headers)
    if older_than is not None:
        ms = round(older_than.total_seconds() * 1000) if isinstance(older_than, timedelta) else int(older_than)
        if ms < 0:
            raise InvalidRequest("INVALID_FIELD", "older_than must not be negative", field="older_than_ms")
        body["older_than_ms"] = ms
    if limit is not None:
        body["limit"] = limit
    if message is not None:
        body["message"] = message
    return Call("POST", f"/v1/queues/{_segment(queue)}/cancel", _read_cancel, body=body)


def _read_queues(resp: httpx.Response) -> list[QueueCounts]:
    doc = read_plain(resp)
    return [
        QueueCounts(
            queue=q["queue"],
            pending=q.get("pending"),
            in_flight=q.get("in_flight"),
            succeeded=q.get("succeeded"),
            dead=q.get("dead"),
            source=q.get("source", "counts"),
        )
        for q in doc["queues"]
    ]


def list_queues(names: Sequence[str] | None = None) -> Call[list[QueueCounts]]:
    params = {"names": ",".join(names)} if names else None
    return Call("GET", "/v1/queues", _read_queues, params=params)


def get_config(queue: str) -> Call[dict[str, Any]]:
    return Call("GET", f"/v1/queues/{_segment(queue)}/config", read_plain)


def set_config(queue: str, patch: Mapping[str, object]) -> Call[dict[str, Any]]:
    return Call("PUT", f"/v1/queues/{_segment(queue)}/config", read_plain, body=dict(patch))


def _read_dead_page(resp: httpx.Response) -> DeadPage:
    doc = _obj(_document(resp))
    return DeadPage(
        items=[_envelope(e) for e in _list(doc.get("items"))],
        next_cursor=_opt_str(doc.get("next_cursor")),
    )


def _filter(error_type: str | None, reason: str | None) -> dict[str, str]:
    params = {}
    if error_type is not None:
        params["error_type"] = error_type
    if reason is not None:
        params["reason"] = reason
    return params


def dlq_list(
    queue: str, limit: int | None, cursor: str | None, error_type: str | None, reason: str | None
) -> Call[DeadPage]:
    params = _filter(error_type, reason)
    if limit is not None:
        params["limit"] = str(limit)
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", f"/v1/queues/{_segment(queue)}/dead", _read_dead_page, params=params)


def dlq_show(queue: str, task_id: str) -> Call[Envelope]:
    return Call("GET", f"/v1/queues/{_segment(queue)}/dead/{_segment(task_id)}", read_envelope)


def _read_redrive(resp: httpx.Response) -> RedriveResult:
    doc = read_plain(resp)
    return RedriveResult(queue=doc["queue"], dry_run=doc["dry_run"], count=doc["count"], ids=list(doc["ids"]))


def dlq_redrive(
    queue: str,
    ids: Sequence[str] | None,
    error_type: str | None,
    reason: str | None,
    limit: int | None,
    dry_run: bool,
) -> Call[RedriveResult]:
    body: dict[str, object] = {"dry_run": dry_run}
    if ids is not None:
        body["ids"] = list(ids)
    body.update(_filter(error_type, reason))
    if limit is not None:
        body["limit"] = limit
    return Call("POST", f"/v1/queues/{_segment(queue)}/dead/redrive", _read_redrive, body=body)


def _read_purged(resp: httpx.Response) -> int:
    return int(read_plain(resp)["purged"])


def dlq_purge(queue: str, dry_run: bool) -> Call[int]:
    params = {"dry_run": "true"} if dry_run else None
    return Call("DELETE", f"/v1/queues/{_segment(queue)}/dead", _read_purged, params=params)


def dlq_export(queue: str, error_type: str | None, reason: str | None) -> Call[None]:
    """The request of an export; its lines are read by `export_line`."""
    params = _filter(error_type, reason)
    return Call("GET", f"/v1/queues/{_segment(queue)}/dead/export", read_nothing, params=params)


def export_line(line: bytes) -> Envelope | None:
    line = line.strip()
    if not line:
        return None
    try:
        return envelope.decode(line, max_bytes=1 << 62)
    except EnvelopeError as err:
        raise ServerError(err.code.value, f"the export holds an envelope this SDK refuses: {err}") from None


def _read_reasons(resp: httpx.Response) -> list[ReasonCount]:
    doc = read_plain(resp)
    return [ReasonCount(reason=r["reason"], count=r["count"]) for r in doc["reasons"]]


def dlq_reasons(queue: str) -> Call[list[ReasonCount]]:
    return Call("GET", f"/v1/queues/{_segment(queue)}/dead/reasons", _read_reasons)


# -- listing tasks -----------------------------------------------------------

_STATUS_PROTO: dict[str, envelope_pb2.Status] = {
    Status.PENDING.value: envelope_pb2.PENDING,
    Status.IN_FLIGHT.value: envelope_pb2.IN_FLIGHT,
    Status.SUCCEEDED.value: envelope_pb2.SUCCEEDED,
    Status.DEAD.value: envelope_pb2.DEAD,
}
_U32 = 0xFFFFFFFF


def _read_task_page(resp: httpx.Response) -> TaskPage:
    doc = _obj(_document(resp))
    return TaskPage(
        items=[_envelope(e) for e in _list(doc.get("items"))],
        next_cursor=_opt_str(doc.get("next_cursor")),
    )


def _read_task_page_proto(resp: api_pb2.ListTasksResponse) -> TaskPage:
    try:
        items = [envelope_from_proto(e) for e in resp.items]
    except (KeyError, ValueError, JsonSyntaxError) as err:
        raise ServerError("INTERNAL", f"the server answered an envelope this SDK refuses: {err}") from None
    return TaskPage(items=items, next_cursor=resp.next_cursor if resp.HasField("next_cursor") else None)


def list_tasks(
    queue: str,
    status: str | None,
    handler_ref: str | None,
    header: str | None,
    limit: int | None,
    cursor: str | None,
) -> Call[TaskPage]:
    """A page of the queue's tasks, newest first. Over gRPC the header
    `KEY=VALUE` is the request's one-entry `headers`; a status or header
    the typed request cannot carry (not one of the four statuses, no `=`,
    a limit outside 32 bits) makes the call go over HTTP, where the server
    refuses it with INVALID_FIELD as it would on either."""
    try:
        envelope.check_queue_name(queue)
    except EnvelopeError as err:
        raise InvalidRequest(err.code.value, err.message, status=400, field=err.path) from None
    params: dict[str, str] = {}
    request = api_pb2.ListTasksRequest(queue=queue)
    typed = True
    if status is not None:
        params["status"] = str(status)
        proto_status = _STATUS_PROTO.get(str(status))
        if proto_status is None:
            typed = False
        else:
            request.status = proto_status
    if handler_ref is not None:
        params["handler_ref"] = handler_ref
        request.handler_ref = handler_ref
    if header is not None:
        params["header"] = header
        key, eq, value = header.partition("=")
        if not key or not eq:
            typed = False
        else:
            request.headers[key] = value
    if limit is not None:
        params["limit"] = str(limit)
        if 0 <= limit <= _U32:
            request.limit = limit
        else:
            typed = False
    if cursor is not None:
        params["cursor"] = cursor
        request.cursor = cursor
    rpc = Rpc("Tasks", "List", request, _read_task_page_proto) if typed else None
    return Call("GET", f"/v1/queues/{_segment(queue)}/tasks", _read_task_page, params=params, rpc=rpc)


# -- schedules ---------------------------------------------------------------


def _schedule_path(name: str, suffix: str = "") -> str:
    check_schedule_name(name)
    return f"/v1/schedules/{_segment(name)}{suffix}"


def _state(value: object) -> ScheduleState:
    return ScheduleState.from_json(value)


def _read_state(resp: httpx.Response) -> ScheduleState:
    return _state(read_plain(resp))


def _state_of(msg: api_pb2.ScheduleResponse) -> ScheduleState:
    try:
        schedule = json.loads(msg.schedule_json)
    except ValueError:
        raise ServerError("INTERNAL", "the server answered a schedule_json that is not JSON") from None
    return ScheduleState.from_json(
        {
            "name": msg.name,
            "schedule": schedule,
            "owner": msg.owner,
            "created_at_ms": msg.created_at_ms,
            "updated_at_ms": msg.updated_at_ms,
            "last_due_ms": msg.last_due_ms if msg.HasField("last_due_ms") else None,
            "last_fire_at_ms": msg.last_fire_at_ms if msg.HasField("last_fire_at_ms") else None,
            "last_fired_task": msg.last_fired_task if msg.HasField("last_fired_task") else None,
            "next_due_ms": msg.next_due_ms if msg.HasField("next_due_ms") else None,
            "fires": msg.fires,
            "skips": dict(msg.skips),
        }
    )


def _read_put(resp: httpx.Response) -> tuple[ScheduleState, bool]:
    return _state(read_plain(resp)), resp.status_code == 201


def _read_put_proto(resp: api_pb2.PutScheduleResponse) -> tuple[ScheduleState, bool]:
    return _state_of(resp.schedule), resp.created


def put_schedule(schedule: Schedule, owner: ScheduleOwner) -> Call[tuple[ScheduleState, bool]]:
    """Creates or replaces the schedule; `owner` `code` marks one a program
    declares at its start. The definition travels as its JSON on both
    transports."""
    body = schedule.to_json()
    request = api_pb2.PutScheduleRequest(name=schedule.name, schedule_json=encode_body(body).decode("utf-8"))
    params = None
    if owner != "api":
        request.owner = owner
        params = {"owner": owner}
    rpc = Rpc("Schedules", "Put", request, _read_put_proto)
    return Call("PUT", _schedule_path(schedule.name), _read_put, body=body, params=params, rpc=rpc)


def get_schedule(name: str) -> Call[ScheduleState]:
    rpc = Rpc("Schedules", "Get", api_pb2.GetScheduleRequest(name=name), _state_of)
    return Call("GET", _schedule_path(name), _read_state, rpc=rpc)


def _read_states(resp: httpx.Response) -> list[ScheduleState]:
    doc = read_plain(resp)
    if not isinstance(doc, dict) or not isinstance(doc.get("schedules"), list):
        raise ServerError("INTERNAL", "the server answered JSON of an unexpected shape")
    return [_state(s) for s in doc["schedules"]]


def _read_states_proto(resp: api_pb2.ListSchedulesResponse) -> list[ScheduleState]:
    return [_state_of(s) for s in resp.schedules]


def list_schedules() -> Call[list[ScheduleState]]:
    rpc = Rpc("Schedules", "List", api_pb2.ListSchedulesRequest(), _read_states_proto)
    return Call("GET", "/v1/schedules", _read_states, rpc=rpc)


def _nothing(_: object) -> None:
    return None


def delete_schedule(name: str) -> Call[None]:
    rpc = Rpc("Schedules", "Delete", api_pb2.DeleteScheduleRequest(name=name), _nothing)
    return Call("DELETE", _schedule_path(name), read_nothing, rpc=rpc)


def pause_schedule(name: str) -> Call[ScheduleState]:
    rpc = Rpc("Schedules", "Pause", api_pb2.PauseScheduleRequest(name=name), _state_of)
    return Call("POST", _schedule_path(name, "/pause"), _read_state, rpc=rpc)


def resume_schedule(name: str) -> Call[ScheduleState]:
    rpc = Rpc("Schedules", "Resume", api_pb2.ResumeScheduleRequest(name=name), _state_of)
    return Call("POST", _schedule_path(name, "/resume"), _read_state, rpc=rpc)


def run_schedule(name: str) -> Call[Envelope]:
    rpc = Rpc("Schedules", "Run", api_pb2.RunScheduleRequest(name=name), _envelope_of)
    return Call("POST", _schedule_path(name, "/run"), read_envelope, rpc=rpc)


def _read_due(resp: httpx.Response) -> list[datetime]:
    doc = read_plain(resp)
    due = doc.get("due_ms") if isinstance(doc, dict) else None
    if not isinstance(due, list) or not all(isinstance(ms, int) for ms in due):
        raise ServerError("INTERNAL", "the server answered JSON of an unexpected shape")
    return [instant(ms) for ms in due]


def _read_due_proto(resp: api_pb2.NextDueResponse) -> list[datetime]:
    return [instant(ms) for ms in resp.due_ms]


def next_due(name: str, count: int | None) -> Call[list[datetime]]:
    """The next due times; `count` None is the server's default (5). A
    count gRPC would read as the default (0) or cannot carry goes over
    HTTP, where the server refuses it."""
    path = _schedule_path(name, "/next")
    params = None
    rpc: Rpc[list[datetime]] | None = Rpc("Schedules", "Next", api_pb2.NextDueRequest(name=name), _read_due_proto)
    if count is not None:
        params = {"count": str(count)}
        if 1 <= count <= _U32:
            rpc = Rpc("Schedules", "Next", api_pb2.NextDueRequest(name=name, count=count), _read_due_proto)
        else:
            rpc = None
    return Call("GET", path, _read_due, params=params, rpc=rpc)


# -- sources -----------------------------------------------------------------


def _source_path(name: str, suffix: str = "") -> str:
    check_source_name(name)
    return f"/v1/sources/{_segment(name)}{suffix}"


def _read_source(resp: httpx.Response) -> SourceStatus:
    return SourceStatus.from_json(read_plain(resp))


def _source_of(msg: api_pb2.SourceResponse) -> SourceStatus:
    """A `SourceResponse` read as its JSON twin: unset optionals are null."""

    def opt(m: Any, name: str) -> Any:
        return getattr(m, name) if m.HasField(name) else None

    return SourceStatus.from_json(
        {
            "name": msg.name,
            "kind": msg.kind,
            "queue": msg.queue,
            "state": msg.state,
            "paused": msg.paused,
            "lag": opt(msg, "lag"),
            "ingested": msg.ingested,
            "dead": msg.dead,
            "duplicates": msg.duplicates,
            "rate": msg.rate,
            "last_error": opt(msg, "last_error"),
            "last_error_at_ms": opt(msg, "last_error_at_ms"),
            "cursors_in_store": msg.cursors_in_store,
            "partitions": [
                {"partition": p.partition, "cursor": opt(p, "cursor"), "lag": opt(p, "lag")} for p in msg.partitions
            ],
        }
    )


def _read_sources(resp: httpx.Response) -> list[SourceStatus]:
    doc = read_plain(resp)
    if not isinstance(doc, dict) or not isinstance(doc.get("sources"), list):
        raise ServerError("INTERNAL", "the server answered JSON of an unexpected shape")
    return [SourceStatus.from_json(s) for s in doc["sources"]]


def _read_sources_proto(resp: api_pb2.ListSourcesResponse) -> list[SourceStatus]:
    return [_source_of(s) for s in resp.sources]


def list_sources() -> Call[list[SourceStatus]]:
    rpc = Rpc("Sources", "List", api_pb2.ListSourcesRequest(), _read_sources_proto)
    return Call("GET", "/v1/sources", _read_sources, rpc=rpc)


def get_source(name: str) -> Call[SourceStatus]:
    rpc = Rpc("Sources", "Get", api_pb2.GetSourceRequest(name=name), _source_of)
    return Call("GET", _source_path(name), _read_source, rpc=rpc)


def _read_reset(resp: httpx.Response) -> int:
    doc = read_plain(resp)
    deleted = doc.get("deleted") if isinstance(doc, dict) else None
    if not isinstance(deleted, int) or isinstance(deleted, bool):
        raise ServerError("INTERNAL", "the server answered JSON of an unexpected shape")
    return deleted


def _read_reset_proto(resp: api_pb2.ResetSourceCursorsResponse) -> int:
    return int(resp.deleted)


def reset_source_cursors(name: str) -> Call[int]:
    """Removes the source's cursors from the store; answers how many."""
    rpc = Rpc("Sources", "ResetCursors", api_pb2.ResetSourceCursorsRequest(name=name), _read_reset_proto)
    return Call("DELETE", _source_path(name, "/cursors"), _read_reset, rpc=rpc)


def _read_claim(resp: httpx.Response) -> list[LeasedTask]:
    out = []
    for item in _list(_obj(_document(resp)).get("tasks")):
        t = _obj(item)
        out.append(
            LeasedTask(
                id=str(t.get("id")),
                lease_token=str(t.get("lease_token")),
                envelope=_envelope(t.get("envelope")),
            )
        )
    return out


def claim(queue: str, max_tasks: int, lease_ms: int | None) -> Call[list[LeasedTask]]:
    body: dict[str, object] = {"max": max_tasks}
    if lease_ms is not None:
        body["lease_ms"] = lease_ms
    return Call("POST", f"/v1/queues/{_segment(queue)}/claim", _read_claim, body=body)


def _read_settles(resp: httpx.Response) -> list[SettleResult]:
    out = []
    for item in _list(_obj(_document(resp)).get("results")):
        r = _obj(item)
        env = r.get("envelope")
        out.append(
            SettleResult(
                id=str(r.get("id")),
                status=_int(r.get("status")),
                envelope=None if env is None else _envelope(env),
                code=_opt_str(r.get("code")),
                detail=_opt_str(r.get("detail")),
            )
        )
    return out


def settle_batch(settles: Sequence[Mapping[str, object]], envelopes: bool) -> Call[list[SettleResult]]:
    """Up to 1000 settles (`{"id", "lease_token", "outcome", …}`) in one call."""
    return Call("POST", "/v1/settle", _read_settles, body={"settles": list(settles), "envelopes": envelopes})


def extend_lease(task_id: str, lease_token: str, extend_ms: int) -> Call[Envelope]:
    body = {"lease_token": lease_token, "extend_ms": extend_ms}
    return Call("POST", f"/v1/tasks/{_segment(task_id)}/lease", read_envelope, body=body)


def encode_body(body: object) -> bytes:
    """A request body as JSON; what JSON cannot hold is refused before sending."""
    try:
        text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise InvalidRequest("MALFORMED_REQUEST", f"the request is not JSON data: {err}") from None
    return text.encode("utf-8")
