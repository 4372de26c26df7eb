package dev.rdq.client;

/**
 * How a client submits ({@link RdqClient.Builder#submitProtocol}): the
 * submit calls ({@code submit}, {@code submitAsync}, {@code submitAll},
 * {@code submitBatch}) go over HTTP or gRPC; every other call is HTTP.
 * Both carry the same options and answer the same envelopes and codes.
 */
public enum SubmitProtocol {
    /** {@code POST /v1/tasks} and {@code POST /v1/tasks/batch}, through the client's {@link Transport} (the default). */
    HTTP,
    /**
     * {@code rdq.v1.Tasks/Submit} and {@code Tasks/SubmitBatch} on the HTTP
     * API's address ({@code docs/grpc.md}): one HTTP/2 channel the client
     * opens on its first submit (prior knowledge for {@code http://}, ALPN
     * {@code h2} over the builder's {@code sslContext} for {@code
     * https://}), with the client's token, request and connect timeouts.
     * It bypasses the {@link Transport}.
     */
    GRPC
}
