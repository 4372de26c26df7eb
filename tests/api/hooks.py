"""schemathesis hooks for tests/api/run.sh: send JSONL bodies as text."""

import schemathesis

# POST /v1/queues/{queue}/dead/import takes application/x-ndjson: lines of
# text, sent as the generated string's bytes.
schemathesis.serializer.alias("application/x-ndjson", "text/plain")
