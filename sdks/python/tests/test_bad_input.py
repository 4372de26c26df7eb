"""Bad input never escapes as anything but the SDK's own errors: the
codec on mutated fixtures (and the Rust CLI agrees with it on every one),
and the server's answers to requests it refuses."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from rdq import envelope

FIXTURES = Path(__file__).resolve().parents[3] / "compliance" / "fixtures"
SMALL = sorted(p for p in FIXTURES.glob("*/*.json") if p.stat().st_size < 4096)


def _mutations(count: int) -> list[bytes]:
    """Deterministic mutations of the small fixtures: bytes flipped,
    inserted and cut, and edge values swapped into known and unknown
    members."""
    rng = random.Random(20261206)
    edge = [b"-0", b"1.0", b"1E5", b"18446744073709551616", b'"\\ud800"', b"null", b"[]", b"{}", b'"\\u0000"',
            b"1e400", b'"\xc3\xa9"', b'"\xff"', b"true", b'"2026-02-29T00:00:00.000Z"']  # fmt: skip
    out = []
    for _ in range(count):
        data = bytearray(rng.choice(SMALL).read_bytes())
        kind = rng.randrange(4)
        if kind == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:
            data[rng.randrange(len(data) + 1) : 0] = bytes([rng.choice(b'{}[]",:0-eE\\ ')])
        elif kind == 2 and data:
            del data[rng.randrange(len(data)) :]
        else:
            text = bytes(data)
            colons = [i for i in range(len(text)) if text[i : i + 1] == b":"]
            if colons:
                at = rng.choice(colons) + 1
                end = at
                while end < len(text) and text[end : end + 1] not in (b",", b"}"):
                    end += 1
                data = bytearray(text[:at] + rng.choice(edge) + text[end:])
        out.append(bytes(data))
    return out


CASES = _mutations(400)


def test_decoding_anything_raises_only_envelope_errors() -> None:
    for data in CASES:
        try:
            env = envelope.decode(data)
        except envelope.EnvelopeError:
            continue
        assert envelope.decode(envelope.encode(env)) == env


@pytest.mark.skipif(not os.environ.get("RDQ_BIN"), reason="needs RDQ_BIN")
def test_the_rust_codec_agrees_on_every_mutation() -> None:
    """`rdq envelope check` prints the canonical encoding or `CODE: …`."""
    binary = os.environ["RDQ_BIN"]
    disagreements = []
    for data in CASES[:150]:
        rust = subprocess.run([binary, "envelope", "check", "-"], input=data, capture_output=True)
        try:
            ours = envelope.encode(envelope.decode(data))
            if rust.returncode != 0 or rust.stdout.rstrip(b"\n") != ours:
                disagreements.append((data, rust.stdout[:200], rust.stderr[:200], ours[:200]))
        except envelope.EnvelopeError as err:
            if rust.returncode == 0 or not rust.stderr.startswith(err.code.value.encode() + b":"):
                disagreements.append((data, rust.stdout[:200], rust.stderr[:200], str(err).encode()))
    assert disagreements == []


def test_json_members_of_every_kind_survive_unknown() -> None:
    base = json.loads((FIXTURES / "valid" / "lease_expired_then_success.json").read_bytes())
    raw = json.dumps(base, separators=(",", ":"))[:-1].encode()
    data = raw + b',"x":{"big":18446744073709551616,"exp":1E5,"neg0":-0,"s":"\\u2028\\/","z":[0.10,null]}}'
    env = envelope.decode(data)
    assert envelope.encode(env).endswith(
        b'"x":{"big":18446744073709551616,"exp":1e+5,"neg0":-0,"s":"\xe2\x80\xa8/","z":[0.10,null]}}'
    )
