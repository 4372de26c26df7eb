package dev.rdq.it;

import dev.rdq.support.RdqServer;
import org.junit.jupiter.api.DisplayName;

/** The same suite on PostgreSQL ({@code postgres://postgres@127.0.0.1:5432/test}), each test in its own schema. */
@DisplayName("end to end on PostgreSQL")
class PostgresEndToEndTest extends EndToEndTests {
    @Override
    RdqServer.Store store() {
        return RdqServer.Store.POSTGRES;
    }
}
