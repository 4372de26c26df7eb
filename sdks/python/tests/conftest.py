"""A real `rdq serve` for the tests: the binary named by RDQ_BIN, on a free
loopback port, over a store of its own (a fresh data directory, a fresh
PostgreSQL schema, a fresh Redis key prefix), with one bearer token."""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import rdq

TOKEN = "python-sdk-test-token-0042"
CONFIG = f"""
shutdown_grace_ms = 2000
[maintenance]
reaper_interval_ms = 50
[[tokens]]
name = "py"
token = "{TOKEN}"
scopes = ["admin", "submit", "work"]
"""
POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test"


def _reachable(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    tmp: Path

    def client(self, transport: str = "grpc") -> rdq.Client:
        return rdq.Client(self.url, token=TOKEN, timeout=30, transport=transport)  # type: ignore[arg-type]

    def async_client(self, transport: str = "grpc") -> rdq.AsyncClient:
        return rdq.AsyncClient(self.url, token=TOKEN, timeout=30, transport=transport)  # type: ignore[arg-type]


def start_server(
    store: str | None,
    extra: tuple[str, ...] = (),
    scheme: str = "http",
    verify: str | bool = True,
    port: int | None = None,
    config: str = "",
) -> Server:
    """`config` is TOML added to the configuration file (`[[sources]]`, …)."""
    binary = os.environ.get("RDQ_BIN")
    if not binary:
        pytest.exit("RDQ_BIN must name the rdq binary (scripts/test.sh sets it)", returncode=2)
    tmp = Path(tempfile.mkdtemp(prefix="rdq-py-"))
    (tmp / "rdq.toml").write_text(CONFIG + config)
    port = port or _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RDQ_LISTEN", "RDQ_STORE", "RDQ_CONFIG")}
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{port}", "--store", store or str(tmp / "data"),
         "--config", str(tmp / "rdq.toml"), "--log", "warn", *extra],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    url = f"{scheme}://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            context = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
            if httpx.get(url + "/readyz", timeout=2, verify=context).status_code == 200:
                return Server(url, proc, tmp)
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("rdq serve did not become ready:\n" + (tmp / "server.log").read_text())
        time.sleep(0.05)


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
    shutil.rmtree(server.tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """The embedded store's server, shared by a test module."""
    s = start_server(None)
    yield s
    stop_server(s)


def _store_url(name: str) -> tuple[str | None, str | None]:
    suffix = uuid.uuid4().hex[:8]
    if name == "embedded":
        return None, None
    if name == "postgres":
        if not _reachable(5432):
            pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432 (bash scripts/services.sh)")
        schema = "rdq_py_sdk_" + suffix
        return f"{POSTGRES_URL}?schema={schema}", schema
    if not _reachable(6379):
        pytest.skip("Redis is not reachable on 127.0.0.1:6379 (bash scripts/services.sh)")
    return f"redis://127.0.0.1:6379/?prefix=rdq-py-{suffix}", None


@pytest.fixture(scope="module", params=["embedded", "postgres", "redis"])
def any_store_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A server per store, for the end-to-end tests every store must pass."""
    store, schema = _store_url(request.param)
    s = start_server(store)
    yield s
    stop_server(s)
    if schema and shutil.which("psql"):
        subprocess.run(
            ["psql", POSTGRES_URL, "-q", "-c", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
            capture_output=True, check=False,
        )  # fmt: skip


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue of this test's own."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:180]
    return f"{name}-{uuid.uuid4().hex[:8]}"


def wait_for(
    client: rdq.Client, task_id: str, done: Callable[[rdq.Envelope], object], what: str, timeout: float = 60
) -> rdq.Envelope:
    """Polls the task until `done(envelope)` holds (a wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        env = client.get(task_id)
        if done(env):
            return env
        if time.monotonic() > deadline:
            raise AssertionError(f"task {task_id} never became {what}: {rdq.envelope.encode(env)!r}")
        time.sleep(0.02)


def kill_by_hand(client: rdq.Client, queue: str, error_type: str = "app.Broken") -> rdq.Envelope:
    """Submits a task and sends it to the DLQ with a claim and a permanent settle."""
    from rdq import _calls

    submitted = client.submit(queue, "by-hand", {"n": 1})
    (leased,) = client._run(_calls.claim(queue, 1, None))
    assert leased.id == submitted.id
    settle = {
        "id": leased.id,
        "lease_token": leased.lease_token,
        "outcome": "PERMANENT_FAILURE",
        "error": {"type": error_type, "message": "broken"},
    }
    (result,) = client._run(_calls.settle_batch([settle], True))
    assert result.envelope is not None and result.envelope.status == "DEAD"
    return result.envelope
