"""The sources a server runs (docs/sources.md) as values: `SourceStatus`, a
source (a Kafka topic, a NATS JetStream stream or an SQS queue whose
records become tasks) and how it stands, with its `SourcePartition`s.

`SourceStatus.from_json` reads the JSON of `GET /v1/sources/{name}`;
members it does not know are ignored, and a kind or state it does not know
stays a string. A source name the server would refuse is refused before
any request by `check_source_name`, with the server's code and field."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from ._reads import Reads
from .errors import InvalidRequest
from .schedules import instant


class SourceKind(StrEnum):
    """Where a source reads records."""

    KAFKA = "kafka"
    """A Kafka topic."""
    NATS = "nats"
    """A NATS JetStream stream."""
    SQS = "sqs"
    """An SQS queue."""


class SourceState(StrEnum):
    """How a source stands (docs/sources.md#status)."""

    STARTING = "starting"
    """Connecting, or reading its cursors."""
    RUNNING = "running"
    """Reading."""
    PAUSED = "paused"
    """Back-pressure: its queue went above `high_water` and has not yet
    fallen below `low_water`."""
    RETRYING = "retrying"
    """Its last step failed (`last_error`); it tries again after a wait."""
    STOPPED = "stopped"
    """The server is shutting down."""


@dataclass(frozen=True)
class SourcePartition:
    """One partition of a source: `partition` is a Kafka partition's number
    or a stream's name (an SQS source has one entry with an empty name);
    `cursor` the position of the next record to ingest, as last known, and
    `lag` the records behind the newest, as last measured (None until
    known)."""

    partition: str
    cursor: int | None
    lag: int | None


@dataclass(frozen=True)
class SourceStatus:
    """A source the server runs and how it stands, as that server process
    knows it: the counters count since it started.

    `kind` is where it reads and `queue` where its tasks go; `state` how
    it stands (a `SourceState`, or a string a newer server sent); `paused`
    is True while back-pressure stops it; `lag` the records in the source
    not yet ingested, as last measured (None until measured); `ingested`,
    `dead` and `duplicates` the records that became PENDING tasks, DEAD
    tasks (`UNDECODABLE_SOURCE`), or were skipped because their task was
    already stored; `rate` records per second over the last 10 seconds;
    `last_error` and `last_error_at` the last failure and when (kept after
    the source recovers); `cursors_in_store` True when the store keeps its
    cursors (capability `source_cursors`); `partitions` per Kafka
    partition or JetStream stream, where known."""

    name: str
    kind: SourceKind | str
    queue: str
    state: SourceState | str
    paused: bool
    lag: int | None
    ingested: int
    dead: int
    duplicates: int
    rate: float
    last_error: str | None
    last_error_at: datetime | None
    cursors_in_store: bool
    partitions: list[SourcePartition]

    @classmethod
    def from_json(cls, value: object) -> SourceStatus:
        """A source as `GET /v1/sources/{name}` answers it; a shape this SDK
        cannot read is `ServerError` (INTERNAL)."""
        doc = _object(value, "source")
        kind: SourceKind | str = _string(doc.get("kind"), "kind")
        with contextlib.suppress(ValueError):  # a newer server's kind stays a string
            kind = SourceKind(kind)
        state: SourceState | str = _string(doc.get("state"), "state")
        with contextlib.suppress(ValueError):
            state = SourceState(state)
        partitions = doc.get("partitions") or []
        if not isinstance(partitions, list):
            raise _bad("partitions")
        at = _opt_integer(doc.get("last_error_at_ms"), "last_error_at_ms")
        return cls(
            name=_string(doc.get("name"), "name"),
            kind=kind,
            queue=_string(doc.get("queue"), "queue"),
            state=state,
            paused=_bool(doc.get("paused"), "paused"),
            lag=_opt_integer(doc.get("lag"), "lag"),
            ingested=_opt_integer(doc.get("ingested"), "ingested") or 0,
            dead=_opt_integer(doc.get("dead"), "dead") or 0,
            duplicates=_opt_integer(doc.get("duplicates"), "duplicates") or 0,
            rate=_number(doc.get("rate"), "rate"),
            last_error=_opt_string(doc.get("last_error"), "last_error"),
            last_error_at=None if at is None else instant(at),
            cursors_in_store=_bool(doc.get("cursors_in_store"), "cursors_in_store"),
            partitions=[_partition(p) for p in partitions],
        )


def check_source_name(name: str) -> None:
    """Refuses, before any request, a source name the server would refuse
    (INVALID_ARGUMENT naming `source`): 1 to 120 characters of
    `[a-z0-9._-]`, not `.` or `..` (which no path can carry)."""
    ok = isinstance(name, str) and 1 <= len(name) <= 120 and name not in (".", "..")
    if ok and all(c in _NAME_CHARS for c in name):
        return
    raise InvalidRequest(
        "INVALID_ARGUMENT",
        f"a source name is 1 to 120 characters of [a-z0-9._-], not {name!r}",
        status=400,
        field="source",
    )


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-")


# -- helpers -----------------------------------------------------------------


def _partition(value: object) -> SourcePartition:
    doc = _object(value, "partitions")
    return SourcePartition(
        partition=_string(doc.get("partition"), "partitions.partition"),
        cursor=_opt_integer(doc.get("cursor"), "partitions.cursor"),
        lag=_opt_integer(doc.get("lag"), "partitions.lag"),
    )


_READ = Reads("a source")
_bad = _READ.bad
_object = _READ.mapping
_string = _READ.string
_opt_string = _READ.opt_string
_opt_integer = _READ.opt_integer
_number = _READ.number
_bool = _READ.boolean
