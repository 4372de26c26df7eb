"""Reading the server's JSON answers (schedules, sources): each check answers
the value as its type or raises `ServerError` `INTERNAL` naming the member
that was not what the API documents."""

from __future__ import annotations

from typing import Any

from .errors import ServerError


class Reads:
    """The checks for the answers about one kind of thing (`what`, as in
    "a schedule")."""

    def __init__(self, what: str) -> None:
        self._what = what

    def bad(self, path: str) -> ServerError:
        return ServerError("INTERNAL", f"the server answered {self._what} with an unexpected {path}")

    def mapping(self, value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.bad(path)
        return value

    def string(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            raise self.bad(path)
        return value

    def opt_string(self, value: object, path: str) -> str | None:
        return None if value is None else self.string(value, path)

    def integer(self, value: object, path: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.bad(path)
        return value

    def opt_integer(self, value: object, path: str) -> int | None:
        return None if value is None else self.integer(value, path)

    def number(self, value: object, path: str) -> float:
        """A number; 0.0 when absent."""
        if value is None:
            return 0.0
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.bad(path)
        return float(value)

    def boolean(self, value: object, path: str) -> bool:
        """A boolean; false when absent."""
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.bad(path)
        return value
