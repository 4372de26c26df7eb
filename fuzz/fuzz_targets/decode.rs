//! Feeds arbitrary bytes to both envelope decoders.
//!
//! Neither may panic, and whatever `Envelope::decode` accepts must have an
//! idempotent canonical form: `decode(encode(x)).encode() == encode(x)`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rdq_envelope::Envelope;
use rdq_envelope::queuey::QueueyEnvelope;

fuzz_target!(|data: &[u8]| {
    if let Ok(env) = Envelope::decode(data) {
        let canonical = env.encode();
        let again = match Envelope::decode(&canonical) {
            Ok(again) => again,
            Err(e) => panic!(
                "the canonical encoding does not decode: {e}\n{}",
                String::from_utf8_lossy(&canonical)
            ),
        };
        assert_eq!(
            String::from_utf8_lossy(&again.encode()),
            String::from_utf8_lossy(&canonical),
            "the canonical encoding is not idempotent"
        );
        assert_eq!(again, env, "the canonical encoding changed the model");
        assert_eq!(env.encoded_len(), canonical.len());
    }

    if let Ok(q) = QueueyEnvelope::decode(data) {
        let bytes = q.encode();
        match QueueyEnvelope::decode(&bytes) {
            Ok(again) => assert_eq!(again, q, "queuey re-encoding changed the envelope"),
            Err(e) => panic!("a queuey re-encoding does not decode: {e}"),
        }
    }
});
