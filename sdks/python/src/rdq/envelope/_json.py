"""Strict JSON for envelopes: parsing with the standard library, writing by hand.

Parsing is `json.loads` with hooks that make it as strict as the Rust codec:
duplicate keys refused at every depth, `NaN`/`Infinity` refused, lone
surrogate escapes refused, nesting limited to 127 levels (serde_json's
limit), and every number kept as the text it was written in (`JsonNumber`),
so unknown members and `detail` keep every digit.

Writing is hand-made because the canonical encoding is a byte-level
contract shared with the Rust, Go and Java codecs (docs/envelope.md): key
order, which characters are escaped and how, and the one normalisation of
number text are fixed, and `json.dumps` offers none of them exactly
(it escapes non-ASCII or not at all, sorts by UTF-16 nowhere, and writes
numbers through floats).
"""

from __future__ import annotations

import json
import re
from typing import TypeAlias

MAX_DEPTH = 127


class JsonNumber:
    """A JSON number as written, with the exponent spelled `e+N`/`e-N`."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = _canonical_number(text)

    def is_integer_text(self) -> bool:
        return "." not in self.text and "e" not in self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonNumber) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"JsonNumber({self.text!r})"


Json: TypeAlias = bool | str | JsonNumber | list["Json"] | dict[str, "Json"] | None
"""A parsed JSON value: objects are dicts, numbers `JsonNumber`s."""


class JsonSyntaxError(ValueError):
    """The input is not one strict JSON document."""


def _canonical_number(text: str) -> str:
    for marker in ("e", "E"):
        if marker in text:
            mantissa, exponent = text.split(marker, 1)
            if exponent[0] not in "+-":
                exponent = "+" + exponent
            return mantissa + "e" + exponent
    return text


def _object(pairs: list[tuple[str, Json]]) -> dict[str, Json]:
    out: dict[str, Json] = {}
    for key, value in pairs:
        if key in out:
            raise JsonSyntaxError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _constant(name: str) -> Json:
    raise JsonSyntaxError(f"{name} is not JSON")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check(value: Json, depth: int) -> None:
    """Refuses lone surrogates and nesting deeper than serde_json allows."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise JsonSyntaxError("a \\u escape is a lone surrogate")
    elif isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise JsonSyntaxError("recursion limit exceeded")
        for item in value:
            _check(item, depth + 1)
    elif isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise JsonSyntaxError("recursion limit exceeded")
        for key, item in value.items():
            _check(key, depth)
            _check(item, depth + 1)


def parse(data: bytes) -> Json:
    """Parses one strict JSON document from UTF-8 bytes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JsonSyntaxError(f"not UTF-8: {err.reason} at byte {err.start}") from None
    try:
        value: Json = json.loads(
            text,
            object_pairs_hook=_object,
            parse_int=JsonNumber,
            parse_float=JsonNumber,
            parse_constant=_constant,
        )
    except JsonSyntaxError:
        raise
    except RecursionError:
        raise JsonSyntaxError("recursion limit exceeded") from None
    except ValueError as err:
        raise JsonSyntaxError(str(err)) from None
    _check(value, 0)
    return value


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f]')


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    return _ESCAPES.get(ch) or f"\\u{ord(ch):04x}"


def write_string(out: list[str], s: str) -> None:
    out.append('"')
    out.append(_NEEDS_ESCAPE.sub(_escape, s))
    out.append('"')


def write_value(out: list[str], value: Json) -> None:
    """Writes `value` compactly, object keys sorted by code point."""
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        write_string(out, value)
    elif isinstance(value, JsonNumber):
        out.append(value.text)
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            write_value(out, item)
        out.append("]")
    elif isinstance(value, dict):
        out.append("{")
        for i, key in enumerate(sorted(value)):
            if i:
                out.append(",")
            write_string(out, key)
            out.append(":")
            write_value(out, value[key])
        out.append("}")
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


def dumps(value: Json) -> str:
    out: list[str] = []
    write_value(out, value)
    return "".join(out)


def from_python(value: object) -> Json:
    """Converts plain Python data (ints, floats, dicts, …) to `Json`."""
    if value is None or isinstance(value, (bool, str, JsonNumber)):
        return value
    if isinstance(value, int):
        return JsonNumber(str(value))
    if isinstance(value, float):
        return JsonNumber(json.dumps(value, allow_nan=False))
    if isinstance(value, (list, tuple)):
        return [from_python(v) for v in value]
    if isinstance(value, dict):
        return {str(k): from_python(v) for k, v in value.items()}
    raise TypeError(f"not JSON data: {type(value).__name__}")


def to_python(value: Json) -> object:
    """Converts `Json` to plain Python data (numbers become int or float)."""
    if isinstance(value, JsonNumber):
        return int(value.text) if value.is_integer_text() else float(value.text)
    if isinstance(value, list):
        return [to_python(v) for v in value]
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    return value
