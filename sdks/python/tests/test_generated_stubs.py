"""The committed gRPC stubs are what grpcio-tools makes of proto/rdq/v1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = Path(__file__).resolve().parents[1] / "src" / "rdq" / "v1"


def test_the_committed_stubs_match_the_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    protos = sorted(str(p) for p in (ROOT / "proto" / "rdq" / "v1").glob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "proto"), f"--python_out={tmp_path}",
         f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", *protos],
        check=True,
    )  # fmt: skip
    generated = {p.name: p.read_bytes() for p in (tmp_path / "rdq" / "v1").iterdir()}
    committed = {p.name: p.read_bytes() for p in COMMITTED.iterdir() if p.name != "__init__.py" and p.is_file()}
    assert sorted(generated) == sorted(committed)
    stale = [name for name in generated if generated[name] != committed[name]]
    assert stale == [], "regenerate the stubs (sdks/python/README.md)"
