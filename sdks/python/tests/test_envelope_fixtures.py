"""Every case of compliance/fixtures, valid and invalid, as its README
says a runner checks them."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from rdq import envelope

FIXTURES = Path(__file__).resolve().parents[3] / "compliance" / "fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_bytes())
assert MANIFEST["format"] == 1
CASES = MANIFEST["cases"]


def _without_nulls(value: Any) -> Any:
    """JSON value equality where a null member counts as a missing one."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _loads(data: bytes) -> Any:
    return _without_nulls(json.loads(data, parse_float=Decimal, parse_int=Decimal))


def test_every_fixture_file_is_in_the_manifest() -> None:
    listed = {c["file"] for c in CASES}
    on_disk = {f"{p.parent.name}/{p.name}" for p in FIXTURES.glob("*/*.json")}
    assert listed == on_disk


@pytest.mark.parametrize("case", [c for c in CASES if c["valid"]], ids=lambda c: c["name"])
def test_valid_fixture_decodes_and_encodes_canonically(case: dict[str, Any]) -> None:
    data = (FIXTURES / case["file"]).read_bytes()
    limit = case.get("max_bytes", envelope.DEFAULT_MAX_BYTES)
    first = envelope.encode(envelope.decode(data, limit))
    assert _loads(first) == _loads(data)
    assert envelope.encode(envelope.decode(first, limit)) == first
    if case.get("canonical"):
        assert first == data


@pytest.mark.parametrize("case", [c for c in CASES if not c["valid"]], ids=lambda c: c["name"])
def test_invalid_fixture_is_refused_with_its_code_and_path(case: dict[str, Any]) -> None:
    data = (FIXTURES / case["file"]).read_bytes()
    limit = case.get("max_bytes", envelope.DEFAULT_MAX_BYTES)
    with pytest.raises(envelope.EnvelopeError) as refused:
        envelope.decode(data, limit)
    assert refused.value.code.value == case["code"]
    if "path" in case:
        assert refused.value.path == case["path"]
