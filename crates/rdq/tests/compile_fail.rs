//! The compile-time guarantees, pinned: a producer or worker of one
//! application cannot take another application's jobs, and a name the
//! envelope would refuse does not compile.
//!
//! Regenerate the expected output with
//! `TRYBUILD=overwrite cargo test -p rdq --test compile_fail`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[test]
fn foreign_jobs_and_invalid_names_do_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
