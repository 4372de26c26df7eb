"""The SDK's exceptions. Every one carries a stable `code`: the server's
(docs/http-api.md, "Errors") for refusals, the envelope codec's for a bad
envelope, and `CONNECTION_FAILED` / `TIMEOUT` for a request that never got
an answer. Callers branch on the class or on `code`, never on the text."""

from __future__ import annotations

from typing import Any


class RdqError(Exception):
    """Base of every error the client raises.

    `code` is the stable code, `status` the HTTP status (0 when there was
    no answer), `detail` the server's explanation, `field` the offending
    field when it names one, and `problem` the whole problem document."""

    def __init__(
        self,
        code: str,
        detail: str = "",
        *,
        status: int = 0,
        field: str | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        self.code = code
        self.detail = detail
        self.status = status
        self.field = field
        self.problem = problem or {}
        super().__init__(f"{code}: {detail}" if detail else code)


class InvalidRequest(RdqError):
    """400: the request breaks a rule (`INVALID_FIELD`, `RESERVED_HEADER`,
    `INVALID_QUEUE_NAME`, `MALFORMED_REQUEST`, …); nothing changed."""


class Unauthenticated(RdqError):
    """401: no token, or not a known one."""


class Forbidden(RdqError):
    """403: the token lacks the scope for this queue."""


class NotFound(RdqError):
    """404: `TASK_NOT_FOUND`, `QUEUE_NOT_FOUND`."""


class LeaseLost(RdqError):
    """409 `LEASE_LOST`: the lease is no longer held (reclaimed, settled,
    redriven, deleted); the settle or extension changed nothing."""


class Conflict(RdqError):
    """409 `INVALID_TRANSITION`, or another conflict with the task's state."""


class UniqueHeld(Conflict):
    """409 `UNIQUE_HELD`: another task holds the submit's unique key
    (docs/uniqueness.md); nothing was written. `holder` is the id of the
    task that holds it and `hold` its hold (`until_finished`, …), when the
    server named them."""

    @property
    def holder(self) -> str | None:
        holder = self.problem.get("holder")
        return holder if isinstance(holder, str) else None

    @property
    def hold(self) -> str | None:
        hold = self.problem.get("hold")
        return hold if isinstance(hold, str) else None


class PayloadTooLarge(RdqError):
    """413: the envelope exceeds the queue's `max_envelope_bytes`."""


class Unsupported(RdqError):
    """501: the store behind the server cannot do this."""


class Unavailable(RdqError):
    """503 `STORE_UNAVAILABLE` / `SHUTTING_DOWN`, or no answer at all
    (`CONNECTION_FAILED`, `TIMEOUT`): worth retrying later."""


class ServerError(RdqError):
    """500: `INTERNAL`, `CORRUPT_STORE`; not the caller's fault."""


_BY_CODE: dict[str, type[RdqError]] = {
    "LEASE_LOST": LeaseLost,
    "UNIQUE_HELD": UniqueHeld,
}
_BY_STATUS: dict[int, type[RdqError]] = {
    400: InvalidRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    501: Unsupported,
    503: Unavailable,
}


def error_for(status: int, code: str, detail: str, problem: dict[str, Any] | None = None) -> RdqError:
    """The exception for a refusal with this HTTP status and stable code."""
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else InvalidRequest if status >= 400 else RdqError
    field = (problem or {}).get("field")
    return cls(code, detail, status=status, field=field if isinstance(field, str) else None, problem=problem)
