package dev.rdq.it;

import dev.rdq.support.RdqServer;
import dev.rdq.worker.WorkerTransport;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.params.Parameter;
import org.junit.jupiter.params.ParameterizedClass;
import org.junit.jupiter.params.provider.EnumSource;

/** The same suite on PostgreSQL ({@code postgres://postgres@127.0.0.1:5432/test}), each test in its own schema. */
@DisplayName("end to end on PostgreSQL")
@ParameterizedClass(name = "worker over {0}")
@EnumSource(value = WorkerTransport.class, names = {"GRPC", "HTTP"})
class PostgresEndToEndTest extends EndToEndTests {
    @Parameter
    WorkerTransport transport;

    @Override
    WorkerTransport transport() {
        return transport;
    }

    @Override
    RdqServer.Store store() {
        return RdqServer.Store.POSTGRES;
    }
}
