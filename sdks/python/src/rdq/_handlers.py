"""Registered handlers and how each is called: which parameter gets the
payload (decoded to its annotated type) and which the `TaskContext`."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .context import TaskContext
from .outcome import OutcomeMapper


class PayloadError(Exception):
    """The payload does not decode to the handler's parameter type; a retry
    cannot change that, so the worker records it as a permanent failure."""


def _payload_reader(annotation: Any) -> Callable[[bytes], Any]:
    if annotation is bytes:
        return lambda raw: raw
    if isinstance(annotation, type):
        validate_json = getattr(annotation, "model_validate_json", None)
        if callable(validate_json):  # a pydantic model
            return validate_json  # type: ignore[no-any-return]
        if dataclasses.is_dataclass(annotation):
            cls = annotation
            return lambda raw: cls(**json.loads(raw))
    return json.loads


@dataclass(frozen=True)
class Handler:
    """One registered handler."""

    name: str
    fn: Callable[..., Any]
    is_async: bool
    wants_context: bool
    wants_payload: bool
    context_first: bool
    read_payload: Callable[[bytes], Any]
    outcome_mapper: OutcomeMapper | None

    @classmethod
    def of(cls, name: str, fn: Callable[..., Any], outcome_mapper: OutcomeMapper | None) -> Handler:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if len(params) > 2:
            raise TypeError(f"handler {name!r} takes at most two parameters: a payload and a TaskContext")
        try:
            hints = typing.get_type_hints(fn)
        except Exception:
            hints = {}
        ctx_index = None
        for i, p in enumerate(params):
            hint = hints.get(p.name)
            if hint is TaskContext or (hint is None and p.name in ("ctx", "context")):
                ctx_index = i
        payload_params = [p for i, p in enumerate(params) if i != ctx_index]
        if len(payload_params) > 1:
            raise TypeError(f"handler {name!r}: annotate one parameter as rdq.TaskContext")
        annotation = hints.get(payload_params[0].name) if payload_params else None
        return cls(
            name=name,
            fn=fn,
            is_async=inspect.iscoroutinefunction(fn),
            wants_context=ctx_index is not None,
            wants_payload=bool(payload_params),
            context_first=ctx_index == 0,
            read_payload=_payload_reader(annotation),
            outcome_mapper=outcome_mapper,
        )

    def arguments(self, ctx: TaskContext) -> tuple[Any, ...]:
        if not self.wants_payload:
            return (ctx,) if self.wants_context else ()
        try:
            payload = self.read_payload(ctx.payload)
        except Exception as err:
            raise PayloadError(f"the payload does not decode for handler {self.name!r}: {err}") from err
        if not self.wants_context:
            return (payload,)
        return (ctx, payload) if self.context_first else (payload, ctx)
