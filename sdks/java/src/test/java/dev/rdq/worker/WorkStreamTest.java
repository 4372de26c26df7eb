package dev.rdq.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import com.google.protobuf.UnknownFieldSet;
import dev.rdq.client.RdqClient;
import dev.rdq.envelope.Envelope;
import dev.rdq.json.JsonNumber;
import io.grpc.Server;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;
import rdq.v1.Api;
import rdq.v1.EnvelopeOuterClass;
import rdq.v1.WorkersGrpc;

/**
 * The worker's side of the Work stream against a scripted gRPC server: what
 * it sends (hello, settles, credits) and what it does with what it is sent,
 * including message kinds newer than this SDK.
 */
class WorkStreamTest {
    static final String TASK_A = "01J2ZK7Q8XW5H3N9G4T6B8RDQ0";
    static final String TASK_B = "01J2ZK7Q8XW5H3N9G4T6B8RDQ1";

    /** Everything the worker sent, in order. */
    final BlockingQueue<Api.WorkRequest> received = new LinkedBlockingQueue<>();
    /** What the script sends once the hello arrives. */
    List<Api.WorkResponse> script;
    Server server;

    record Greeting(String to) {}

    @BeforeEach
    void startServer() throws Exception {
        server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
                .addService(new WorkersGrpc.WorkersImplBase() {
                    @Override
                    public StreamObserver<Api.WorkRequest> work(StreamObserver<Api.WorkResponse> out) {
                        return new StreamObserver<>() {
                            @Override
                            public void onNext(Api.WorkRequest r) {
                                received.add(r);
                                if (r.hasHello()) {
                                    script.forEach(out::onNext);
                                } else if (r.hasSettle()) {
                                    Api.WorkAck.Builder ack = Api.WorkAck.newBuilder().setSeq(r.getSettle().getSeq());
                                    r.getSettle().getSettlesList().forEach(s -> ack.addResults(
                                            Api.SettleItemResult.newBuilder().setId(s.getId())));
                                    out.onNext(Api.WorkResponse.newBuilder().setAck(ack).build());
                                }
                            }

                            @Override
                            public void onError(Throwable t) {}

                            @Override
                            public void onCompleted() {
                                out.onCompleted();
                            }
                        };
                    }
                })
                .build()
                .start();
    }

    @AfterEach
    void stopServer() throws Exception {
        server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }

    RdqClient client() {
        return RdqClient.builder("http://127.0.0.1:" + server.getPort()).build();
    }

    static EnvelopeOuterClass.Envelope.Builder envelope(String id, String handlerRef, String payload) {
        return EnvelopeOuterClass.Envelope.newBuilder()
                .setEnvelopeVersion(1).setId(id).setQueue("stream.q").setHandlerRef(handlerRef)
                .setPayload(ByteString.copyFrom(payload, StandardCharsets.UTF_8))
                .setPayloadContentType("application/json")
                .setStatus(EnvelopeOuterClass.Status.IN_FLIGHT)
                .setAttemptCount(1).setClaimCount(1)
                .setLeaseExpiresAt("2026-07-20T14:03:52.117Z")
                .setCreatedAt("2026-07-20T14:03:22.117Z")
                .addAttempts(EnvelopeOuterClass.AttemptRecord.newBuilder().setAttemptNo(1)
                        .setStartedAt("2026-07-20T14:03:22.117Z"));
    }

    static Api.WorkResponse task(EnvelopeOuterClass.Envelope.Builder env) {
        return Api.WorkResponse.newBuilder().setTask(Api.LeasedTask.newBuilder()
                .setId(env.getId()).setLeaseToken("token-" + env.getId()).setEnvelope(env)).build();
    }

    /** A message with a field number this SDK's WorkResponse does not have, as a newer server would send. */
    static Api.WorkResponse unknownKind() {
        return Api.WorkResponse.newBuilder().setUnknownFields(UnknownFieldSet.newBuilder()
                .addField(15, UnknownFieldSet.Field.newBuilder()
                        .addLengthDelimited(ByteString.copyFromUtf8("\n\u001a" + TASK_A)).build())
                .build()).build();
    }

    /** The settles the worker sent, waiting for {@code n}. */
    List<Api.SettleRequest> settles(int n) throws InterruptedException {
        List<Api.SettleRequest> out = new java.util.ArrayList<>();
        while (out.size() < n) {
            Api.WorkRequest r = received.poll(30, TimeUnit.SECONDS);
            assertTrue(r != null, "the worker sent " + out.size() + " settles of " + n);
            if (r.hasSettle()) {
                out.addAll(r.getSettle().getSettlesList());
            }
        }
        return out;
    }

    @Test
    @DisplayName("a hello with the worker's queues and credits; a message of an unknown kind is ignored; tasks are settled on the stream")
    void hello_unknown_kinds_and_settles() throws Exception {
        BlockingQueue<Object> handled = new LinkedBlockingQueue<>();
        script = List.of(unknownKind(),
                task(envelope(TASK_A, "greet", "{\"to\":\"ada\",\"extra\":1}")),
                unknownKind(),
                task(envelope(TASK_B, "raw", "{}").addOmitted("priority").setUnknownJson("{\"zeta\":7}")
                        .putHeaders("tenant", "acme")));
        try (RdqClient client = client();
                Worker w = Worker.builder(client).transport(WorkerTransport.GRPC).concurrency(8)
                        .handler("stream.q", "greet", Greeting.class, handled::add)
                        .handler("stream.q", "raw", (Envelope env) -> handled.add(env))
                        .start()) {
            assertEquals(WorkerTransport.GRPC, w.transport());
            Api.WorkRequest hello = received.poll(30, TimeUnit.SECONDS);
            assertTrue(hello != null && hello.hasHello(), String.valueOf(hello));
            assertEquals(List.of("stream.q"), hello.getHello().getQueuesList());
            assertEquals(8, hello.getHello().getCredits());
            assertTrue(hello.getHello().getBareAcks(), "no dead-letter listener: acks without envelopes");
            List<Api.SettleRequest> settles = settles(2);
            assertEquals(java.util.Set.of(TASK_A, TASK_B),
                    java.util.Set.of(settles.get(0).getId(), settles.get(1).getId()));
            for (Api.SettleRequest s : settles) {
                assertEquals(Api.ReportedOutcome.REPORTED_SUCCESS, s.getOutcome());
                assertEquals("token-" + s.getId(), s.getLeaseToken());
            }
            Object a = handled.poll(5, TimeUnit.SECONDS);
            Object b = handled.poll(5, TimeUnit.SECONDS);
            Greeting g = (Greeting) (a instanceof Greeting ? a : b);
            Envelope env = (Envelope) (a instanceof Envelope ? a : b);
            assertEquals(new Greeting("ada"), g);
            // The pushed envelope, through its JSON: omitted members stay out, unknown ones are kept.
            assertEquals(TASK_B, env.id());
            assertEquals("acme", env.header("tenant").orElseThrow());
            assertEquals(new JsonNumber("7"), env.extra().get("zeta").orElseThrow());
            assertFalse(new String(env.encode(), StandardCharsets.UTF_8).contains("\"priority\""));
            assertEquals(30_000, Worker.leaseOf(env));
        }
    }

    @Test
    @DisplayName("a payload that does not decode into the handler's class is a permanent failure of type PayloadDecodeException")
    void undecodable_payload_is_permanent() throws Exception {
        script = List.of(task(envelope(TASK_A, "greet", "not json")));
        try (RdqClient client = client();
                Worker w = Worker.builder(client).transport(WorkerTransport.GRPC)
                        .handler("stream.q", "greet", Greeting.class, g -> {
                            throw new AssertionError("the handler must not run");
                        })
                        .start()) {
            assertEquals(WorkerTransport.GRPC, w.transport());
            Api.SettleRequest s = settles(1).get(0);
            assertEquals(Api.ReportedOutcome.REPORTED_PERMANENT_FAILURE, s.getOutcome());
            assertEquals(PayloadDecodeException.class.getName(), s.getError().getType());
            assertTrue(s.getError().getMessage().contains(Greeting.class.getName()), s.getError().getMessage());
        }
    }
}
