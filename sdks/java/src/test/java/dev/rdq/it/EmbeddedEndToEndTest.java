package dev.rdq.it;

import dev.rdq.support.RdqServer;
import dev.rdq.worker.WorkerTransport;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.params.Parameter;
import org.junit.jupiter.params.ParameterizedClass;
import org.junit.jupiter.params.provider.EnumSource;

@DisplayName("end to end on the embedded store")
@ParameterizedClass(name = "worker over {0}")
@EnumSource(value = WorkerTransport.class, names = {"GRPC", "HTTP"})
class EmbeddedEndToEndTest extends EndToEndTests {
    @Parameter
    WorkerTransport transport;

    @Override
    WorkerTransport transport() {
        return transport;
    }

    @Override
    RdqServer.Store store() {
        return RdqServer.Store.EMBEDDED;
    }
}
