"""The clients and the worker over TLS, verified against a given CA file,
with a bearer token, on both transports."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator

import pytest

import rdq
from conftest import TOKEN, Server, start_server, stop_server
from rdq.envelope import Status


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = start_server(None, ("--tls-cert", str(cert), "--tls-key", str(key)), "https", str(cert))
    yield server, str(cert)
    stop_server(server)


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_submit_and_work_over_tls(tls_server: tuple[Server, str], queue: str, transport: str) -> None:
    server, ca = tls_server
    assert server.url.startswith("https://")

    async def scenario() -> None:
        async with rdq.AsyncClient(server.url, token=TOKEN, verify=ca, transport=transport) as client:  # type: ignore[arg-type]
            task = await client.submit(queue, "tls", {"secure": True})
            worker = rdq.Worker(client, queues=[queue], transport=transport)  # type: ignore[arg-type]
            worker.handler("tls")(lambda: None)
            running = asyncio.create_task(worker.run(handle_signals=False))
            while (await client.get(task.id)).status != Status.SUCCEEDED:
                await asyncio.sleep(0.02)
            worker.stop()
            await running

    asyncio.run(asyncio.wait_for(scenario(), 60))
    with rdq.Client(server.url, token=TOKEN, verify=ca, transport=transport) as client:  # type: ignore[arg-type]
        assert client.submit(queue, "tls").status == Status.PENDING


def test_an_unverified_certificate_is_refused(tls_server: tuple[Server, str], queue: str) -> None:
    server, _ = tls_server
    for transport in ("grpc", "http"):
        with rdq.Client(server.url, token=TOKEN, timeout=5, transport=transport) as client:
            with pytest.raises(rdq.Unavailable):
                client.submit(queue, "tls")
