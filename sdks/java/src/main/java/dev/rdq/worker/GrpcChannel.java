package dev.rdq.worker;

import dev.rdq.RdqException;
import dev.rdq.client.RdqClient;
import io.grpc.ClientInterceptor;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NegotiationType;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.handler.ssl.ApplicationProtocolConfig;
import io.grpc.netty.shaded.io.netty.handler.ssl.ApplicationProtocolNames;
import io.grpc.netty.shaded.io.netty.handler.ssl.ClientAuth;
import io.grpc.netty.shaded.io.netty.handler.ssl.IdentityCipherSuiteFilter;
import io.grpc.netty.shaded.io.netty.handler.ssl.JdkSslContext;
import io.grpc.stub.MetadataUtils;
import java.net.URI;
import java.security.NoSuchAlgorithmException;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SSLContext;
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
    private static final Metadata.Key<String> AUTHORIZATION =
            Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    /** rdq's stable code in a refusal's trailers ({@code docs/grpc.md}, "Errors"). */
    static final Metadata.Key<String> RDQ_CODE = Metadata.Key.of("rdq-code", Metadata.ASCII_STRING_MARSHALLER);

    private final ManagedChannel channel;
    private final ClientInterceptor auth;
    private final long connectTimeoutMs;

    private GrpcChannel(ManagedChannel channel, ClientInterceptor auth, long connectTimeoutMs) {
        this.channel = channel;
        this.auth = auth;
        this.connectTimeoutMs = connectTimeoutMs;
    }

    static GrpcChannel open(RdqClient client) {
        URI base = client.baseUrl();
        boolean tls = "https".equalsIgnoreCase(base.getScheme());
        if (base.getHost() == null || !tls && !"http".equalsIgnoreCase(base.getScheme())) {
            throw new RdqException("INVALID_ARGUMENT", "base_url",
                    "the Work stream needs an http:// or https:// URL with a host, not " + base, 0, null);
        }
        int port = base.getPort() != -1 ? base.getPort() : tls ? 443 : 80;
        NettyChannelBuilder b = NettyChannelBuilder.forAddress(base.getHost(), port)
                .maxInboundMessageSize(Integer.MAX_VALUE)
                .withOption(io.grpc.netty.shaded.io.netty.channel.ChannelOption.CONNECT_TIMEOUT_MILLIS,
                        (int) Math.min(Integer.MAX_VALUE, client.connectTimeout().toMillis()))
                // Callbacks only hand work to other threads.
                .directExecutor();
        if (tls) {
            b.negotiationType(NegotiationType.TLS).sslContext(sslContext(client.sslContext()));
        } else {
            b.usePlaintext();
        }
        Metadata md = new Metadata();
        if (client.token() != null) {
            md.put(AUTHORIZATION, "Bearer " + client.token());
        }
        return new GrpcChannel(b.build(), MetadataUtils.newAttachHeadersInterceptor(md), client.connectTimeout().toMillis());
    }

    /** The client's JDK {@code SSLContext} (or the JDK's default) as Netty's, offering {@code h2} by ALPN. */
    private static JdkSslContext sslContext(SSLContext context) {
        SSLContext ctx = context;
        if (ctx == null) {
            try {
                ctx = SSLContext.getDefault();
            } catch (NoSuchAlgorithmException e) {
                throw new RdqException(RdqException.CONNECTION_FAILED, null, "no TLS: " + e.getMessage(), 0, e);
            }
        }
        ApplicationProtocolConfig alpn = new ApplicationProtocolConfig(ApplicationProtocolConfig.Protocol.ALPN,
                ApplicationProtocolConfig.SelectorFailureBehavior.NO_ADVERTISE,
                ApplicationProtocolConfig.SelectedListenerFailureBehavior.ACCEPT, ApplicationProtocolNames.HTTP_2);
        return new JdkSslContext(ctx, true, null, IdentityCipherSuiteFilter.INSTANCE, alpn, ClientAuth.NONE, null, false);
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

    /** An {@link RdqException} for a failed call: rdq's code from the trailers, else the gRPC status's meaning. */
    static RdqException error(Throwable t) {
        Status s = Status.fromThrowable(t);
        Metadata trailers = Status.trailersFromThrowable(t);
        String code = trailers == null ? null : trailers.get(RDQ_CODE);
        String message = s.getDescription() == null ? s.getCode().name() : s.getDescription();
        if (code != null) {
            String prefix = code + ": ";
            return new RdqException(code, null, message.startsWith(prefix) ? message.substring(prefix.length()) : message,
                    0, t);
        }
        switch (s.getCode()) {
            case DEADLINE_EXCEEDED:
                return new RdqException(RdqException.TIMEOUT, null, "no answer in time: " + message, 0, t);
            case CANCELLED:
                return new RdqException(RdqException.INTERRUPTED, null, "the call was cancelled: " + message, 0, t);
            case UNAVAILABLE:
                return new RdqException(RdqException.CONNECTION_FAILED, null, message, 0, t);
            default:
                return new RdqException(RdqException.UNEXPECTED_RESPONSE, null, s.getCode() + ": " + message, 0, t);
        }
    }

    @Override
    public void close() {
        channel.shutdown();
        try {
            if (!channel.awaitTermination(5, TimeUnit.SECONDS)) {
                channel.shutdownNow();
            }
        } catch (InterruptedException e) {
            channel.shutdownNow();
            Thread.currentThread().interrupt();
        }
    }
}
