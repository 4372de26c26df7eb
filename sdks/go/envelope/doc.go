// Package envelope is rdq's v1 wire envelope in Go: the model, strict
// validation with the stable error codes of the Rust codec, and the canonical
// JSON encoding, byte for byte the one crates/rdq-envelope writes.
//
// Decoding uses its own small JSON parser rather than encoding/json because
// the envelope's rules are stricter than encoding/json's: duplicate keys are
// refused at every depth, lone surrogate escapes and invalid UTF-8 are
// refused instead of replaced, and numbers inside unknown fields are kept as
// the digits that were written, never passed through float64.
//
// Unknown fields, at the top level, in attempt records, in error objects and
// in dead reasons, are kept (in Extra) in canonical form and written back
// sorted by key. An optional field a writer left out, and that still holds its
// default, is left out again, so envelopes written by other tools round-trip
// byte for byte. dead_reason is the other way round: an unset reason is left
// out unless its writer wrote it as null.
package envelope
