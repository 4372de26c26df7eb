package dev.rdq.internal;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import dev.rdq.RdqException;
import dev.rdq.UniqueHeldException;
import dev.rdq.json.Json;
import dev.rdq.json.JsonObject;
import dev.rdq.json.JsonSyntaxException;
import io.grpc.ClientInterceptor;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.netty.shaded.io.grpc.netty.NegotiationType;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.netty.shaded.io.netty.handler.ssl.ApplicationProtocolConfig;
import io.grpc.netty.shaded.io.netty.handler.ssl.ApplicationProtocolNames;
import io.grpc.netty.shaded.io.netty.handler.ssl.ClientAuth;
import io.grpc.netty.shaded.io.netty.handler.ssl.IdentityCipherSuiteFilter;
import io.grpc.netty.shaded.io.netty.handler.ssl.JdkSslContext;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.MetadataUtils;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import javax.net.ssl.SSLContext;
import rdq.v1.Api;

/**
 * The SDK's gRPC plumbing, shared by the client's gRPC submits and the
 * worker's Work stream: a channel to the HTTP API's address ({@code
 * docs/grpc.md}: HTTP/2 with prior knowledge for {@code http://}, TLS with
 * ALPN {@code h2} for {@code https://}), the bearer token as metadata, and
 * refusals read back as {@link RdqException}s. Not an API of the SDK: it
 * may change in any release.
 */
public final class GrpcChannels {
    private static final Metadata.Key<String> AUTHORIZATION =
            Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    /** rdq's stable code in a refusal's trailers ({@code docs/grpc.md}, "Errors"). */
    public static final Metadata.Key<String> RDQ_CODE = Metadata.Key.of("rdq-code", Metadata.ASCII_STRING_MARSHALLER);

    private GrpcChannels() {}

    /**
     * A channel to the server at {@code base} ({@code http://} or {@code
     * https://} with a host; else {@code INVALID_ARGUMENT} naming {@code
     * base_url}); {@code sslContext} null means the JDK's default. Callbacks
     * run on the channel's event loop ({@code directExecutor}).
     */
    public static ManagedChannel open(URI base, SSLContext sslContext, Duration connectTimeout, String purpose) {
        boolean tls = "https".equalsIgnoreCase(base.getScheme());
        if (base.getHost() == null || !tls && !"http".equalsIgnoreCase(base.getScheme())) {
            throw new RdqException("INVALID_ARGUMENT", "base_url",
                    purpose + " needs an http:// or https:// URL with a host, not " + base, 0, null);
        }
        int port = base.getPort() != -1 ? base.getPort() : tls ? 443 : 80;
        NettyChannelBuilder b = NettyChannelBuilder.forAddress(base.getHost(), port)
                .maxInboundMessageSize(Integer.MAX_VALUE)
                .withOption(io.grpc.netty.shaded.io.netty.channel.ChannelOption.CONNECT_TIMEOUT_MILLIS,
                        (int) Math.min(Integer.MAX_VALUE, connectTimeout.toMillis()))
                // Callbacks only hand work to other threads.
                .directExecutor();
        if (tls) {
            b.negotiationType(NegotiationType.TLS).sslContext(sslContext(sslContext));
        } else {
            b.usePlaintext();
        }
        return b.build();
    }

    /** Attaches {@code authorization: Bearer TOKEN} to every call (nothing without a token). */
    public static ClientInterceptor authorization(String token) {
        Metadata md = new Metadata();
        if (token != null) {
            md.put(AUTHORIZATION, "Bearer " + token);
        }
        return MetadataUtils.newAttachHeadersInterceptor(md);
    }

    /** The JDK {@code SSLContext} (or the JDK's default) as Netty's, offering {@code h2} by ALPN. */
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

    /**
     * An {@link RdqException} for a failed call: the {@code rdq.v1.Problem}
     * of the status's details (code, detail, HTTP status, {@code field}; a
     * {@link UniqueHeldException} for {@code UNIQUE_HELD}), else rdq's code
     * from the {@code rdq-code} trailer, else the gRPC status's meaning.
     */
    public static RdqException error(Throwable t) {
        Api.Problem p = problemOf(t);
        if (p != null && !p.getCode().isEmpty()) {
            return problem(p, t);
        }
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

    /**
     * The refusal a {@code rdq.v1.Problem} describes (a failed call's, a
     * batch item's): its code, detail and HTTP status, {@code field} from
     * its extensions; {@code UNIQUE_HELD} with a {@code holder} is a {@link
     * UniqueHeldException} with the holder's {@code hold}.
     */
    public static RdqException problem(Api.Problem p, Throwable cause) {
        JsonObject ext = JsonObject.EMPTY;
        if (!p.getExtensionsJson().isEmpty()) {
            try {
                if (Json.parse(p.getExtensionsJson().getBytes(StandardCharsets.UTF_8)) instanceof JsonObject o) {
                    ext = o;
                }
            } catch (JsonSyntaxException e) {
                // Extensions this SDK cannot read: the code and detail still say what went wrong.
            }
        }
        int status = p.getHttpStatus();
        if (UniqueHeldException.CODE.equals(p.getCode()) && ext.string("holder").isPresent()) {
            return new UniqueHeldException(ext.string("holder").get(), ext.string("hold").orElse(null), p.getDetail(),
                    status, cause);
        }
        return new RdqException(p.getCode(), ext.string("field").orElse(null), p.getDetail(), status, cause);
    }

    /** Shuts {@code channel} down, waiting up to 5 s for its calls before cutting them. */
    public static void shutdown(io.grpc.ManagedChannel channel) {
        channel.shutdown();
        try {
            if (!channel.awaitTermination(5, java.util.concurrent.TimeUnit.SECONDS)) {
                channel.shutdownNow();
            }
        } catch (InterruptedException e) {
            channel.shutdownNow();
            Thread.currentThread().interrupt();
        }
    }

    /** The {@code rdq.v1.Problem} in a failed call's {@code grpc-status-details-bin}, or null. */
    private static Api.Problem problemOf(Throwable t) {
        com.google.rpc.Status details = StatusProto.fromThrowable(t);
        if (details == null) {
            return null;
        }
        for (Any any : details.getDetailsList()) {
            if (any.is(Api.Problem.class)) {
                try {
                    return any.unpack(Api.Problem.class);
                } catch (InvalidProtocolBufferException e) {
                    return null;
                }
            }
        }
        return null;
    }
}
