package dev.rdq.worker;

import dev.rdq.RdqException;
import dev.rdq.client.RdqClient;
import dev.rdq.internal.GrpcChannels;
import io.grpc.ClientInterceptor;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.util.concurrent.TimeUnit;
import rdq.v1.Api;
import rdq.v1.QueuesGrpc;
import rdq.v1.TasksGrpc;
import rdq.v1.WorkersGrpc;

/**
 * The gRPC channel a worker opens to its client's server: the same address
 * as the HTTP API ({@code docs/grpc.md}), HTTP/2 with prior knowledge for
 * {@code http://}, TLS with ALPN {@code h2} for {@code https://} (the
 * client's {@code SSLContext}, host name verified), and the client's bearer
 * token as {@code authorization} metadata on every call.
 */
final class GrpcChannel implements AutoCloseable {
    /** rdq's stable code in a refusal's trailers ({@code docs/grpc.md}, "Errors"). */
    static final Metadata.Key<String> RDQ_CODE = GrpcChannels.RDQ_CODE;

    private final ManagedChannel channel;
    private final ClientInterceptor auth;
    private final long connectTimeoutMs;

    private GrpcChannel(ManagedChannel channel, ClientInterceptor auth, long connectTimeoutMs) {
        this.channel = channel;
        this.auth = auth;
        this.connectTimeoutMs = connectTimeoutMs;
    }

    static GrpcChannel open(RdqClient client) {
        ManagedChannel channel = GrpcChannels.open(client.baseUrl(), client.sslContext(), client.connectTimeout(),
                "the Work stream");
        return new GrpcChannel(channel, GrpcChannels.authorization(client.token()), client.connectTimeout().toMillis());
    }

    WorkersGrpc.WorkersStub workers() {
        return WorkersGrpc.newStub(channel).withInterceptors(auth);
    }

    WorkersGrpc.WorkersBlockingStub workersBlocking() {
        return WorkersGrpc.newBlockingStub(channel).withInterceptors(auth);
    }

    TasksGrpc.TasksBlockingStub tasksBlocking() {
        return TasksGrpc.newBlockingStub(channel).withInterceptors(auth);
    }

    /**
     * True when gRPC answers on the address: a {@code Queues/Capabilities}
     * call succeeds, or is refused by rdq (a token without the scope still
     * proves gRPC is there).
     */
    boolean answers() {
        try {
            QueuesGrpc.newBlockingStub(channel).withInterceptors(auth)
                    .withDeadlineAfter(connectTimeoutMs + 5_000, TimeUnit.MILLISECONDS)
                    .capabilities(Api.CapabilitiesRequest.getDefaultInstance());
            return true;
        } catch (StatusRuntimeException e) {
            Status.Code c = e.getStatus().getCode();
            return c == Status.Code.UNAUTHENTICATED || c == Status.Code.PERMISSION_DENIED
                    || e.getTrailers() != null && e.getTrailers().get(RDQ_CODE) != null;
        }
    }

    /** An {@link RdqException} for a failed call ({@link GrpcChannels#error}). */
    static RdqException error(Throwable t) {
        return GrpcChannels.error(t);
    }

    @Override
    public void close() {
        GrpcChannels.shutdown(channel);
    }
}
