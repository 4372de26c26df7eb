//! The generated code in `src/generated/` is what `proto/rdq/v1/*.proto`
//! compiles to (with protox, a protobuf compiler in Rust, and
//! tonic-prost-build), so a fresh machine builds without `protoc`.
//! `RDQ_REGENERATE_PROTO=1 cargo test -p rdq-grpc --test generated`
//! rewrites it after a change to the .proto files.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate(out: &Path) {
    let root = crate_dir().join("../../proto");
    let files = [
        "rdq/v1/envelope.proto",
        "rdq/v1/api.proto",
        "rdq/v1/handler.proto",
    ];
    let fds = protox::compile(files, [&root]).expect("the .proto files compile");
    let bytes = prost::Message::encode_to_vec(&fds);
    std::fs::write(out.join("descriptor.bin"), bytes).expect("write descriptor");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(false)
        .out_dir(out)
        .compile_fds(fds)
        .expect("code generation");
}

#[test]
fn generated_code_matches_the_proto_files() {
    let committed = crate_dir().join("src/generated");
    if std::env::var_os("RDQ_REGENERATE_PROTO").is_some() {
        generate(&committed);
        return;
    }
    let fresh = std::env::temp_dir().join(format!("rdq-grpc-gen-{}", std::process::id()));
    std::fs::create_dir_all(&fresh).expect("temp dir");
    generate(&fresh);
    for name in ["rdq.v1.rs", "descriptor.bin"] {
        let a = std::fs::read(committed.join(name)).expect("committed file");
        let b = std::fs::read(fresh.join(name)).expect("generated file");
        assert!(
            a == b,
            "src/generated/{name} is stale: run RDQ_REGENERATE_PROTO=1 cargo test -p rdq-grpc --test generated"
        );
    }
    let _ = std::fs::remove_dir_all(&fresh);
}
