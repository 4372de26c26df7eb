package dev.rdq.it;

import dev.rdq.support.RdqServer;
import org.junit.jupiter.api.DisplayName;

@DisplayName("end to end on the embedded store")
class EmbeddedEndToEndTest extends EndToEndTests {
    @Override
    RdqServer.Store store() {
        return RdqServer.Store.EMBEDDED;
    }
}
