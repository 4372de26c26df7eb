package dev.rdq.worker;

/** How a {@link Worker} reaches the server ({@link Worker.Builder#transport}). */
public enum WorkerTransport {
    /**
     * The gRPC Work stream when the server answers gRPC on its address, else
     * HTTP (decided once, at {@link Worker#start()}). The default.
     */
    AUTO,
    /** The gRPC {@code rdq.v1.Workers/Work} stream: tasks, settles and lease extensions on one stream. */
    GRPC,
    /** HTTP claims ({@code POST /v1/queues/{q}/claim}), batch settles and lease extensions. */
    HTTP
}
