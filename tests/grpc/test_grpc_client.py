"""rdq's gRPC API from a client no Rust code here wrote: grpcio stubs
generated from proto/rdq/v1/*.proto submit tasks, work them over the
Work stream, and read the dead-letter queue, against the real `rdq serve`
(docs/grpc.md). Run by tests/grpc/run.sh."""

import os
import queue
import re
import subprocess
import tempfile
import threading

import grpc
import pytest

from rdq.v1 import api_pb2, api_pb2_grpc, envelope_pb2

TOKEN = "python-grpc-secret-token-0042"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
CONFIG = f"""
shutdown_grace_ms = 5000
[maintenance]
reaper_interval_ms = 50
[[tokens]]
name = "py"
token = "{TOKEN}"
scopes = ["admin", "submit", "work"]
"""


@pytest.fixture(scope="module")
def server():
    tmp = tempfile.TemporaryDirectory()
    config = os.path.join(tmp.name, "rdq.toml")
    with open(config, "w") as f:
        f.write(CONFIG)
    proc = subprocess.Popen(
        [os.environ["RDQ_BIN"], "serve", "--listen", "127.0.0.1:0",
         "--store", os.path.join(tmp.name, "data"), "--config", config],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items()
             if k not in ("RDQ_LISTEN", "RDQ_STORE", "RDQ_CONFIG")},
    )
    found = queue.Queue()

    def read():
        for line in proc.stderr:
            m = re.search(r"listening on http://(\S+)", line)
            if m:
                found.put(m.group(1))
    threading.Thread(target=read, daemon=True).start()
    try:
        addr = found.get(timeout=30)
    except queue.Empty:
        proc.kill()
        raise RuntimeError("rdq serve did not start")
    channel = grpc.insecure_channel(addr)
    yield channel
    channel.close()
    proc.terminate()
    proc.wait(timeout=30)
    tmp.cleanup()


def rdq_code(err):
    return dict(err.trailing_metadata() or ()).get("rdq-code")


def test_submit_work_and_read_the_dlq(server):
    tasks = api_pb2_grpc.TasksStub(server)
    queues = api_pb2_grpc.QueuesStub(server)
    workers = api_pb2_grpc.WorkersStub(server)
    dlq = api_pb2_grpc.DlqStub(server)

    # Bad input gets rdq's stable code, in metadata and message.
    with pytest.raises(grpc.RpcError) as bad:
        tasks.Submit(api_pb2.SubmitRequest(queue="Not Valid", handler_ref="h"),
                     metadata=AUTH)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert rdq_code(bad.value) == "INVALID_QUEUE_NAME"
    assert bad.value.details().startswith("INVALID_QUEUE_NAME")
    with pytest.raises(grpc.RpcError) as anon:
        tasks.Submit(api_pb2.SubmitRequest(queue="py", handler_ref="h"))
    assert anon.value.code() == grpc.StatusCode.UNAUTHENTICATED

    queues.PutConfig(api_pb2.PutConfigRequest(queue="py", patch_json='{"max_attempts": 2}'),
                     metadata=AUTH)
    ids = []
    for i in range(4):
        r = tasks.Submit(api_pb2.SubmitRequest(
            queue="py", handler_ref="echo", payload=bytes([i]) * 3,
            payload_content_type="application/octet-stream",
            headers={"n": str(i)}), metadata=AUTH)
        assert r.created
        assert r.envelope.status == envelope_pb2.PENDING
        ids.append(r.envelope.id)

    # A Work stream with 2 credits: settles go back on the same stream.
    outbox = queue.Queue()
    outbox.put(api_pb2.WorkRequest(hello=api_pb2.WorkHello(queues=["py"], credits=2)))

    def requests():
        while True:
            msg = outbox.get()
            if msg is None:
                return
            yield msg

    stream = workers.Work(requests(), metadata=AUTH)
    seen = {}
    acks = {}
    seq = 0
    for msg in stream:
        if msg.HasField("task"):
            t = msg.task
            assert t.envelope.status == envelope_pb2.IN_FLIGHT
            n = int(t.envelope.headers["n"])
            assert t.envelope.payload == bytes([n]) * 3
            seen[t.id] = n
            seq += 1
            if n % 2 == 0:
                s = api_pb2.SettleRequest(id=t.id, lease_token=t.lease_token,
                                          outcome=api_pb2.REPORTED_SUCCESS)
            else:
                s = api_pb2.SettleRequest(
                    id=t.id, lease_token=t.lease_token,
                    outcome=api_pb2.REPORTED_PERMANENT_FAILURE,
                    error=api_pb2.ReportedError(type="py.ValueError", message=f"odd {n}",
                                                detail_json='{"n": %d}' % n))
            outbox.put(api_pb2.WorkRequest(settle=api_pb2.WorkSettle(seq=seq, settles=[s])))
        else:
            acks[msg.ack.seq] = msg.ack.results[0]
            if len(acks) == 4:
                outbox.put(None)
                break
    stream.cancel()
    assert sorted(seen.values()) == [0, 1, 2, 3]
    for result in acks.values():
        assert not result.HasField("problem"), result
        n = seen[result.id]
        want = envelope_pb2.SUCCEEDED if n % 2 == 0 else envelope_pb2.DEAD
        assert result.envelope.status == want

    # The DLQ: the two odd tasks, with their history.
    page = dlq.List(api_pb2.DlqListRequest(queue="py", limit=10), metadata=AUTH)
    dead = {e.id: e for e in page.items}
    assert set(dead) == {i for i, n in seen.items() if n % 2 == 1}
    for e in dead.values():
        err = e.attempts[-1].error
        assert err.type == "py.ValueError"
        assert err.message.startswith("odd ")
        assert e.attempts[-1].outcome == envelope_pb2.PERMANENT_FAILURE
    one = next(iter(dead))
    shown = dlq.Show(api_pb2.DlqShowRequest(queue="py", id=one), metadata=AUTH)
    assert shown.envelope == dead[one]
    exported = [r.envelope.id for r in
                dlq.Export(api_pb2.ExportRequest(queue="py"), metadata=AUTH)]
    assert sorted(exported) == sorted(dead)
    rows = queues.List(api_pb2.ListQueuesRequest(names=["py"]), metadata=AUTH).queues
    assert (rows[0].pending, rows[0].in_flight, rows[0].succeeded, rows[0].dead) == (0, 0, 2, 2)
    redriven = dlq.Redrive(api_pb2.RedriveRequest(queue="py", error_type="py.*"), metadata=AUTH)
    assert redriven.count == 2
