"""The outcome ladder (docs/outcomes.md) in Python idiom.

A handler's call resolves to one outcome, decided by the first rung that
applies:

1. an outcome mapper `(return_value, exception) -> Outcome`, when
   registered, is authoritative and supplies the error to record;
2. a return, of any value, is SUCCESS;
3. the per-call wrappers `raise rdq.Permanent(exc)` / `raise
   rdq.Retryable(exc)` (and `raise rdq.Defer(seconds)`, which spends no
   attempt) force the decision;
4. exception classes configured on the worker as permanent or retryable,
   matched with `isinstance` along the `__cause__` chain, permanent first;
5. otherwise the worker reports FAILURE and the queue's
   `retryable_errors` / `non_retryable_errors` globs decide on
   `error_type`, a non-retryable match winning;
6. default: retryable.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from .envelope import truncate_message, truncate_stack

NO_HANDLER_ERROR_TYPE = "rdq.NoHandler"
"""Recorded, as a permanent failure, for a task no handler is registered for."""
MAPPER_FAILED_ERROR_TYPE = "rdq.OutcomeMapperFailed"
CANCELLED_ERROR_TYPE = "rdq.Cancelled"
"""A handler stopped by a cancel asked of its task (its failure, deferral
or cancellation is reported as this permanent failure)."""


class Kind(StrEnum):
    """What a worker reports (the settle's `outcome`)."""

    SUCCESS = "SUCCESS"
    RETRYABLE_FAILURE = "RETRYABLE_FAILURE"
    PERMANENT_FAILURE = "PERMANENT_FAILURE"
    FAILURE = "FAILURE"
    """A failure the queue's globs classify, default retryable."""
    DEFER = "DEFER"
    RELEASE = "RELEASE"


@dataclass(frozen=True)
class ReportedError:
    """The error recorded in the attempt history."""

    type: str
    message: str
    detail: Any = None
    stack: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"type": self.type, "message": truncate_message(self.message)}
        if self.detail is not None:
            out["detail"] = self.detail
        if self.stack is not None:
            out["stack"] = truncate_stack(self.stack)
        return out

    def detail_json(self) -> str | None:
        return None if self.detail is None else json.dumps(self.detail, separators=(",", ":"))


@dataclass(frozen=True)
class Outcome:
    """One resolved call. Build with the class methods."""

    kind: Kind
    error: ReportedError | None = None
    defer_ms: int | None = None
    throttle: str | None = None

    @classmethod
    def success(cls) -> Outcome:
        return _SUCCESS

    @classmethod
    def retryable_failure(
        cls, error: BaseException | str, *, error_type: str | None = None, detail: Any = None
    ) -> Outcome:
        return cls(Kind.RETRYABLE_FAILURE, reported_error(error, error_type, detail))

    @classmethod
    def permanent_failure(
        cls, error: BaseException | str, *, error_type: str | None = None, detail: Any = None
    ) -> Outcome:
        return cls(Kind.PERMANENT_FAILURE, reported_error(error, error_type, detail))

    @classmethod
    def failure(cls, error: BaseException | str, *, error_type: str | None = None, detail: Any = None) -> Outcome:
        """A failure the queue's globs classify (default retryable)."""
        return cls(Kind.FAILURE, reported_error(error, error_type, detail))

    @classmethod
    def deferred(cls, delay: float | timedelta, *, throttle: str | None = None) -> Outcome:
        """Run again after exactly `delay`, spending no attempt."""
        return cls(Kind.DEFER, defer_ms=_ms(delay), throttle=throttle)


_SUCCESS = Outcome(Kind.SUCCESS)
"""Every success is this one (an `Outcome` is immutable)."""

OutcomeMapper = Callable[[Any, BaseException | None], Outcome]
"""`(return_value, exception) -> Outcome`; the exception is None on a return."""


def _ms(delay: float | timedelta) -> int:
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    return max(0, round(seconds * 1000))


class Permanent(Exception):
    """`raise rdq.Permanent(exc)`: this call failed for good, dead-letter it
    now. The recorded error is `exc`'s (its type, message and stack) unless
    `error_type` names it."""

    def __init__(self, cause: BaseException | str, *, error_type: str | None = None, detail: Any = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.error_type = error_type
        self.detail = detail
        if isinstance(cause, BaseException):
            self.__cause__ = cause


class Retryable(Exception):
    """`raise rdq.Retryable(exc)`: retry this call with the queue's backoff
    whatever the classifiers and globs would say."""

    def __init__(self, cause: BaseException | str, *, error_type: str | None = None, detail: Any = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.error_type = error_type
        self.detail = detail
        if isinstance(cause, BaseException):
            self.__cause__ = cause


class Defer(Exception):
    """`raise rdq.Defer(seconds)`: run the task again after exactly this
    delay without spending an attempt. `throttle="key"` (the task's flow
    key) or `"queue"` also holds back the key's or queue's other tasks
    until then, on every worker."""

    def __init__(self, delay: float | timedelta, *, throttle: str | None = None) -> None:
        super().__init__(f"deferred for {_ms(delay)} ms")
        self.delay = delay
        self.throttle = throttle


def error_type_of(exc: BaseException) -> str:
    """The exception's qualified class name (`requests.exceptions.ConnectTimeout`);
    built-in exceptions are named without `builtins.` (`ValueError`)."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def reported_error(error: BaseException | str, error_type: str | None = None, detail: Any = None) -> ReportedError:
    if isinstance(error, (Permanent, Retryable)) and isinstance(error.cause, str):
        return ReportedError(error_type or "rdq.Error", error.cause, detail, "".join(traceback.format_exception(error)))
    if isinstance(error, BaseException):
        cause: BaseException = error
        if isinstance(error, (Permanent, Retryable)) and isinstance(error.cause, BaseException):
            cause = error.cause
        message = str(cause) or type(cause).__qualname__
        stack = "".join(traceback.format_exception(error))
        return ReportedError(error_type or error_type_of(cause), message, detail, stack)
    return ReportedError(error_type or "rdq.Error", error, detail)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__
    return seen


@dataclass(frozen=True)
class Ladder:
    """The worker-wide rungs: a mapper and the exception classifiers."""

    mapper: OutcomeMapper | None = None
    retryable: Sequence[type[BaseException]] = ()
    permanent: Sequence[type[BaseException]] = ()

    def resolve(self, returned: Any, exc: BaseException | None, mapper: OutcomeMapper | None = None) -> Outcome:
        """The outcome of one call that returned `returned` or raised `exc`."""
        mapper = mapper or self.mapper
        if mapper is not None:
            try:
                out = mapper(returned, exc)
            except Exception as failed:
                return Outcome.retryable_failure(failed, error_type=MAPPER_FAILED_ERROR_TYPE)
            if not isinstance(out, Outcome):
                return Outcome.retryable_failure(
                    f"the outcome mapper returned {type(out).__qualname__}, not an rdq.Outcome",
                    error_type=MAPPER_FAILED_ERROR_TYPE,
                )
            return out
        if exc is None:
            return Outcome.success()
        if isinstance(exc, Defer):
            return Outcome.deferred(exc.delay, throttle=exc.throttle)
        if isinstance(exc, Permanent):
            return Outcome(Kind.PERMANENT_FAILURE, reported_error(exc, exc.error_type, exc.detail))
        if isinstance(exc, Retryable):
            return Outcome(Kind.RETRYABLE_FAILURE, reported_error(exc, exc.error_type, exc.detail))
        chain = _chain(exc)
        permanent = tuple(self.permanent)
        retryable = tuple(self.retryable)
        if permanent and any(isinstance(e, permanent) for e in chain):
            return Outcome(Kind.PERMANENT_FAILURE, reported_error(exc))
        if retryable and any(isinstance(e, retryable) for e in chain):
            return Outcome(Kind.RETRYABLE_FAILURE, reported_error(exc))
        return Outcome(Kind.FAILURE, reported_error(exc))
