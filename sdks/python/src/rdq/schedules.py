"""Periodic schedules (docs/schedules.md) as values: `Schedule` (which task
to submit, and when), its `ScheduleTask`, `CatchUp` and `Overlap`
policies, and `ScheduleState`, a stored schedule with its firing state.

A `Schedule` converts to the JSON the HTTP API takes (`to_json`) and back
(`Schedule.from_json`); the clients send it as that JSON over both
transports (gRPC carries it as `schedule_json` text). What the server
would refuse for sure, and what has no JSON form, is refused before any
request by `check`, with the code and field the server would give."""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from ._reads import Reads
from .envelope import EnvelopeError, check_handler_ref, check_queue_name, check_user_headers, is_valid_flow_key
from .envelope.rules import is_valid_name
from .errors import InvalidRequest, ServerError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)

ScheduleOwner = Literal["api", "code"]
"""Who put a schedule: `api` (HTTP, gRPC, the CLI, `put_schedule`) or
`code` (a program declaring it at its start, `Worker(schedules=…)`)."""


class Overlap(StrEnum):
    """What a fire does while the task of the previous fire is unfinished
    (docs/schedules.md#overlap)."""

    ALLOW = "allow"
    """Submit regardless, as cron does (the server's default)."""
    SKIP_IF_PENDING = "skip_if_pending"
    """Skip while the previous task waits to be claimed."""
    SKIP_IF_RUNNING = "skip_if_running"
    """Skip while the previous task is claimed by a worker."""
    SKIP_IF_UNFINISHED = "skip_if_unfinished"
    """Skip while the previous task waits or runs."""


@dataclass(frozen=True)
class CatchUp:
    """What a tick does with due times missed while no node was ticking
    (docs/schedules.md#catch-up): `CatchUp.skip()`, `CatchUp.latest()`
    (the server's default) or `CatchUp.all(max, window)`: every missed due
    time within `window` of now, at most `max` (1 to 1000) of them, the newest.
    `window` is a `timedelta` or milliseconds, whole milliseconds from 1 ms
    to 366 days."""

    policy: str
    max: int | None = None
    window: timedelta | int | None = None

    @classmethod
    def skip(cls) -> CatchUp:
        """Submit a due time only if it is on time."""
        return cls("skip")

    @classmethod
    def latest(cls) -> CatchUp:
        """Submit the most recent missed due time, however late."""
        return cls("latest")

    @classmethod
    def all(cls, max: int, window: timedelta | int) -> CatchUp:
        """Submit every missed due time within `window` of now, at most `max`."""
        return cls("all", max, window)


@dataclass(frozen=True)
class ScheduleTask:
    """The task each fire submits: the fields of a submit worth repeating,
    with a submit's rules. `payload` is opaque bytes (base64 on the wire;
    encode JSON yourself and say so in `payload_content_type`); `None`
    fields and an empty payload or headers are the server's defaults
    (`application/octet-stream`, no headers, priority 0, no flow key)."""

    queue: str
    handler_ref: str
    payload: bytes = b""
    payload_content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0
    flow_key: str | None = None

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"queue": self.queue, "handler_ref": self.handler_ref}
        if self.payload:
            body["payload"] = base64.b64encode(bytes(self.payload)).decode("ascii")
        if self.payload_content_type is not None:
            body["payload_content_type"] = self.payload_content_type
        if self.headers:
            body["headers"] = dict(self.headers)
        if self.priority:
            body["priority"] = self.priority
        if self.flow_key is not None:
            body["flow_key"] = self.flow_key
        return body

    @classmethod
    def from_json(cls, value: object) -> ScheduleTask:
        doc = _object(value, "task")
        payload = b""
        if doc.get("payload") is not None:
            try:
                payload = base64.b64decode(_string(doc["payload"], "task.payload"), validate=True)
            except (binascii.Error, ValueError):
                raise ServerError("INTERNAL", "the server answered a schedule whose payload is not base64") from None
        headers = _object(doc.get("headers") or {}, "task.headers")
        return cls(
            queue=_string(doc.get("queue"), "task.queue"),
            handler_ref=_string(doc.get("handler_ref"), "task.handler_ref"),
            payload=payload,
            payload_content_type=_opt_string(doc.get("payload_content_type"), "task.payload_content_type"),
            headers={str(k): _string(v, "task.headers") for k, v in headers.items()},
            priority=_integer(doc.get("priority") or 0, "task.priority"),
            flow_key=_opt_string(doc.get("flow_key"), "task.flow_key"),
        )


@dataclass(frozen=True)
class Schedule:
    """A periodic schedule: which task to submit, and when. The scheduler
    of every `rdq serve` node fires it; each due time is submitted once
    whatever the number of nodes.

    Exactly one of `cron` (a pattern of 5 fields, or 6 with leading
    seconds, read on the wall clock of `tz`) and `every` (a `timedelta`
    or milliseconds: whole milliseconds from 1 ms to 366 days, anchored at
    `start` or else at the Unix epoch; `tz` does not apply) is set.
    `start` and `end` (timezone-aware datetimes, or milliseconds since the
    Unix epoch) bound the due times, both inclusive, at millisecond
    precision. `None` is the server's default: `tz` UTC, `overlap`
    `Overlap.ALLOW`, `catch_up` `CatchUp.latest()`. A paused schedule
    submits nothing, and the due times it passes are skipped, not caught up
    on resume.

    Read back (`ScheduleState.schedule`), a schedule has every default
    written out, `every` as a `timedelta`, `start` and `end` as UTC
    datetimes."""

    name: str
    task: ScheduleTask
    cron: str | None = None
    every: timedelta | int | None = None
    tz: str | None = None
    start: datetime | int | None = None
    end: datetime | int | None = None
    paused: bool = False
    overlap: Overlap | str | None = None
    catch_up: CatchUp | None = None

    @classmethod
    def of_cron(cls, name: str, pattern: str, task: ScheduleTask, **options: Any) -> Schedule:
        """The schedule `name` firing `task` on the cron `pattern` (in UTC
        unless `tz=` says otherwise)."""
        return cls(name, task, cron=pattern, **options)

    @classmethod
    def of_every(cls, name: str, every: timedelta | int, task: ScheduleTask, **options: Any) -> Schedule:
        """The schedule `name` firing `task` every `every` (a `timedelta` or
        milliseconds)."""
        return cls(name, task, every=every, **options)

    def check(self) -> None:
        """Refuses, with `InvalidRequest` and the server's code and field,
        what the server would refuse for sure (a bad name, a template a
        submit would refuse) and what has no JSON form (no spec or both, an
        interval or window that is not whole milliseconds, a naive
        datetime). Everything else (the cron pattern, the time zone, the
        bounds) is the server's to judge."""
        check_schedule_name(self.name)
        _check_task(self.task)
        if self.cron is not None and self.every is not None:
            raise InvalidRequest(
                "INVALID_FIELD", "a schedule has a cron pattern or an interval, not both", status=400, field="spec"
            )
        if self.cron is None and self.every is None:
            raise InvalidRequest(
                "INVALID_FIELD", "a schedule needs a cron pattern or an interval", status=400, field="spec"
            )
        if self.every is not None:
            _whole_ms(self.every, "INVALID_INTERVAL", "spec.every_ms", "the interval")
        for name in ("start", "end"):
            moment = getattr(self, name)
            if isinstance(moment, datetime) and moment.utcoffset() is None:
                raise InvalidRequest(
                    "INVALID_FIELD", f"{name} is a naive datetime; give it a time zone", status=400, field=name + "_ms"
                )
        c = self.catch_up
        if c is None:
            return
        if c.policy in ("skip", "latest"):
            if c.max is not None or c.window is not None:
                raise InvalidRequest(
                    "INVALID_FIELD", "max and window belong to CatchUp.all", status=400, field="catch_up"
                )
        elif c.policy == "all":
            if c.max is None or c.max < 1:
                raise InvalidRequest(
                    "INVALID_WINDOW", f"max is {c.max}; it is 1 to 1000", status=400, field="catch_up.all.max"
                )
            if c.window is None:
                raise InvalidRequest(
                    "INVALID_WINDOW", "CatchUp.all needs a window", status=400, field="catch_up.all.window_ms"
                )
            _whole_ms(c.window, "INVALID_WINDOW", "catch_up.all.window_ms", "the window")
        else:
            raise InvalidRequest(
                "INVALID_FIELD",
                f"{c.policy!r} is not a catch-up policy (skip, latest, all)",
                status=400,
                field="catch_up",
            )

    def to_json(self) -> dict[str, object]:
        """The schedule as the HTTP API takes it (checked first)."""
        self.check()
        body: dict[str, object] = {"name": self.name, "task": self.task.to_json()}
        if self.cron is not None:
            body["spec"] = {"cron": self.cron}
        else:
            assert self.every is not None
            body["spec"] = {"every_ms": _ms_of_period(self.every)}
        if self.tz is not None:
            body["tz"] = self.tz
        if self.start is not None:
            body["start_ms"] = _ms_of_instant(self.start)
        if self.end is not None:
            body["end_ms"] = _ms_of_instant(self.end)
        if self.paused:
            body["paused"] = True
        if self.overlap is not None:
            body["overlap"] = str(self.overlap)
        c = self.catch_up
        if c is not None:
            if c.policy == "all":
                assert c.window is not None
                body["catch_up"] = {"all": {"max": c.max, "window_ms": _ms_of_period(c.window)}}
            else:
                body["catch_up"] = c.policy
        return body

    @classmethod
    def from_json(cls, value: object) -> Schedule:
        """A schedule as the HTTP API writes it; a shape this SDK cannot read
        is `ServerError` (INTERNAL). Fields it does not know are ignored."""
        doc = _object(value, "schedule")
        spec = _object(doc.get("spec"), "spec")
        cron: str | None = None
        every: timedelta | None = None
        if "cron" in spec and "every_ms" not in spec:
            cron = _string(spec["cron"], "spec.cron")
        elif "every_ms" in spec and "cron" not in spec:
            every = timedelta(milliseconds=_integer(spec["every_ms"], "spec.every_ms"))
        else:
            raise ServerError("INTERNAL", 'the server answered a schedule whose spec is not {"cron"} or {"every_ms"}')
        written = _opt_string(doc.get("overlap"), "overlap")
        overlap: Overlap | str | None = written
        if written is not None:
            with contextlib.suppress(ValueError):  # a newer server's policy stays a string
                overlap = Overlap(written)
        return cls(
            name=_string(doc.get("name"), "name"),
            task=ScheduleTask.from_json(doc.get("task")),
            cron=cron,
            every=every,
            tz=_opt_string(doc.get("tz"), "tz"),
            start=_opt_instant(doc.get("start_ms"), "start_ms"),
            end=_opt_instant(doc.get("end_ms"), "end_ms"),
            paused=bool(doc.get("paused") or False),
            overlap=overlap,
            catch_up=_catch_up(doc.get("catch_up")),
        )


@dataclass(frozen=True)
class ScheduleState:
    """A stored schedule with its firing state, as every read answers it.

    `schedule` is the definition as put, with its defaults written out;
    `owner` is `api` or `code`; `created_at` is when it was first put,
    `updated_at` when it was last put; `last_due` the last due time
    accounted for, submitted or skipped; `last_fire_at` and
    `last_fired_task` the last fire that submitted a task; `next_due` the
    next due time (None: the schedule has ended); `fires` the tasks
    submitted over its life; `skips` the skipped due times by reason
    (`catch_up_skip`, `paused`, `overlap_running`, …)."""

    name: str
    schedule: Schedule
    owner: str
    created_at: datetime
    updated_at: datetime
    last_due: datetime | None
    last_fire_at: datetime | None
    last_fired_task: str | None
    next_due: datetime | None
    fires: int
    skips: dict[str, int]

    @classmethod
    def from_json(cls, value: object) -> ScheduleState:
        """A state as `GET /v1/schedules/{name}` answers it."""
        doc = _object(value, "state")
        skips = _object(doc.get("skips") or {}, "skips")
        return cls(
            name=_string(doc.get("name"), "name"),
            schedule=Schedule.from_json(doc.get("schedule")),
            owner=_string(doc.get("owner"), "owner"),
            created_at=instant(_integer(doc.get("created_at_ms"), "created_at_ms")),
            updated_at=instant(_integer(doc.get("updated_at_ms"), "updated_at_ms")),
            last_due=_opt_instant(doc.get("last_due_ms"), "last_due_ms"),
            last_fire_at=_opt_instant(doc.get("last_fire_at_ms"), "last_fire_at_ms"),
            last_fired_task=_opt_string(doc.get("last_fired_task"), "last_fired_task"),
            next_due=_opt_instant(doc.get("next_due_ms"), "next_due_ms"),
            fires=_integer(doc.get("fires") or 0, "fires"),
            skips={str(k): _integer(v, "skips") for k, v in skips.items()},
        )


def check_schedule_name(name: str) -> None:
    """Refuses a bad schedule name with INVALID_SCHEDULE_NAME, as the
    server would: the rules are those of queue names."""
    if is_valid_name(name):
        return
    try:
        check_queue_name(name)
    except EnvelopeError as err:
        raise InvalidRequest("INVALID_SCHEDULE_NAME", err.message, status=400, field="name") from None
    raise InvalidRequest("INVALID_SCHEDULE_NAME", "is not a schedule name", status=400, field="name")


def instant(ms: int) -> datetime:
    """Milliseconds since the Unix epoch as a UTC datetime, exactly."""
    try:
        return _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        raise ServerError("INTERNAL", f"the instant {ms} ms is outside what Python's datetime holds") from None


# -- helpers -----------------------------------------------------------------


def _check_task(t: ScheduleTask) -> None:
    """A template a submit would refuse, its field under `task.` as the
    server names it."""
    try:
        check_queue_name(t.queue)
        check_handler_ref(t.handler_ref)
        check_user_headers(t.headers)
    except EnvelopeError as err:
        raise InvalidRequest(err.code.value, err.message, status=400, field="task." + err.path) from None
    if t.flow_key is not None and not is_valid_flow_key(t.flow_key):
        raise InvalidRequest(
            "INVALID_FIELD", "a flow key is 1 to 128 bytes of [A-Za-z0-9._:/@=+-]", status=400, field="task.flow_key"
        )


def _whole_ms(value: timedelta | int, code: str, field: str, what: str) -> None:
    if isinstance(value, timedelta):
        ok = value >= _MS and value % _MS == timedelta(0)
    else:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if not ok:
        raise InvalidRequest(
            code, f"{what} {value!r} is not a whole number of milliseconds from 1 ms", status=400, field=field
        )


def _ms_of_period(value: timedelta | int) -> int:
    return value // _MS if isinstance(value, timedelta) else int(value)


def _ms_of_instant(value: datetime | int) -> int:
    """Milliseconds since the Unix epoch (sub-millisecond precision dropped,
    towards the past)."""
    return (value - _EPOCH) // _MS if isinstance(value, datetime) else int(value)


_READ = Reads("a schedule")
_bad = _READ.bad
_object = _READ.mapping
_string = _READ.string
_opt_string = _READ.opt_string
_integer = _READ.integer


def _opt_instant(value: object, path: str) -> datetime | None:
    return None if value is None else instant(_integer(value, path))


def _catch_up(value: object) -> CatchUp | None:
    if value is None:
        return None
    if isinstance(value, str):
        return CatchUp(value)
    all_ = _object(_object(value, "catch_up").get("all"), "catch_up.all")
    return CatchUp(
        "all",
        _integer(all_.get("max"), "catch_up.all.max"),
        timedelta(milliseconds=_integer(all_.get("window_ms"), "catch_up.all.window_ms")),
    )
