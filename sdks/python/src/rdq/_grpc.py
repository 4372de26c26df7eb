"""gRPC plumbing shared by the clients and the worker: channels to the
server's address (gRPC and HTTP share it, docs/grpc.md) and the rdq error
a gRPC status carries."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import grpc
import grpc.aio
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from .errors import RdqError, Unavailable, error_for
from .v1 import api_pb2

_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
}
_OPTIONS = [
    ("grpc.keepalive_time_ms", 30000),
    ("grpc.keepalive_timeout_ms", 20000),
    # Reconnect about as soon as an HTTP client would after a server
    # restart (gRPC's default backoff starts at 1 s and grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def _target(url: str) -> tuple[str, bool]:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    return (f"[{host}]:{port}" if ":" in host else f"{host}:{port}"), secure


def _credentials(verify: object) -> grpc.ChannelCredentials:
    if verify is False:
        raise ValueError("gRPC always verifies TLS; use transport='http' to turn verification off")
    roots = None
    if isinstance(verify, str):
        with open(verify, "rb") as f:
            roots = f.read()
    return grpc.ssl_channel_credentials(roots)


def aio_channel(url: str, verify: object) -> grpc.aio.Channel:
    target, secure = _target(url)
    if not secure:
        return grpc.aio.insecure_channel(target, options=_OPTIONS)
    return grpc.aio.secure_channel(target, _credentials(verify), options=_OPTIONS)


def sync_channel(url: str, verify: object) -> grpc.Channel:
    target, secure = _target(url)
    if not secure:
        return grpc.insecure_channel(target, options=_OPTIONS)
    return grpc.secure_channel(target, _credentials(verify), options=_OPTIONS)


def status_problem(details: bytes) -> api_pb2.Problem | None:
    """The `rdq.v1.Problem` in a `grpc-status-details-bin` trailer (a
    `google.rpc.Status` whose details hold it as an `Any`), or None."""
    try:
        status = status_pb2.Status.FromString(details)
        for detail in status.details:
            problem = api_pb2.Problem()
            if detail.Unpack(problem):
                return problem
    except DecodeError:
        return None
    return None


def problem_document(problem: api_pb2.Problem) -> dict[str, Any]:
    """A `Problem` as the HTTP problem document: `code`, `detail`,
    `status` and the extension members (`field`, `holder`, …)."""
    doc: dict[str, Any] = {}
    if problem.extensions_json:
        try:
            extensions = json.loads(problem.extensions_json)
        except ValueError:
            extensions = None
        if isinstance(extensions, dict):
            doc.update(extensions)
    doc.update(code=problem.code, detail=problem.detail, status=problem.http_status)
    return doc


def rpc_error(err: grpc.RpcError) -> RdqError:
    """The rdq error a gRPC status carries (`rdq-code` in its trailers, the
    `rdq.v1.Problem` in its details); a status without one is a call that
    got no answer from rdq."""
    call: Any = err
    metadata: Any = call.trailing_metadata() or ()
    code = ""
    problem = None
    for k, v in metadata:
        if k == "rdq-code":
            code = str(v)
        elif k == "grpc-status-details-bin" and isinstance(v, bytes):
            problem = status_problem(v)
    status = call.code()
    detail = call.details() or ""
    if not code and problem is not None:
        code = problem.code
    if not code:
        if status == grpc.StatusCode.DEADLINE_EXCEEDED:
            return Unavailable("TIMEOUT", detail)
        if status == grpc.StatusCode.UNAVAILABLE:
            return Unavailable("CONNECTION_FAILED", detail)
        code = status.name
    if detail.startswith(code + ": "):
        detail = detail[len(code) + 2 :]
    http_status = _HTTP_STATUS.get(status, 500)
    document = None
    if problem is not None and problem.code == code:
        document = problem_document(problem)
        detail = problem.detail or detail
        http_status = problem.http_status or http_status
    return error_for(http_status, code, detail, document)
