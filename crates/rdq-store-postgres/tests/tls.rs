//! TLS to PostgreSQL against real servers: each test starts a throwaway
//! cluster (`initdb`/`pg_ctl` from `/usr/lib/postgresql/15/bin`, as the
//! `postgres` OS user, in a temporary directory, on a free loopback port)
//! with `ssl = on` and a certificate from a fresh test CA, or with
//! `ssl = off`, and checks what each `sslmode` accepts and refuses
//! (`docs/stores/postgres.md`, "TLS").
//!
//! The TLS cluster's `pg_hba.conf` refuses clear-text connections, except
//! for the role `plain_only`, which it refuses over TLS instead: a
//! successful connection as `plain_only` proves it went without TLS. The
//! role `cert_user` authenticates by client certificate (CN
//! `rdq-test-client`) only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rdq_engine::store::admin::TaskLookup;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rdq_engine::{Engine, Settlement, SubmitRequest, SystemClock};
use rdq_envelope::Status;
use rdq_store_postgres::PostgresStore;
use rdq_tls::testing::TestPki;

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL cluster of the test's own; stopped and deleted on drop.
struct Cluster {
    dir: tempfile::TempDir,
    port: u16,
    pki: TestPki,
}

fn as_postgres(program: &str, args: &[&str]) {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--", &format!("{BIN}/{program}")])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn chown_postgres(path: &Path) {
    let status = Command::new("chown")
        .args(["-R", "postgres:postgres"])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

impl Cluster {
    fn start(ssl: bool) -> Self {
        let pki = TestPki::new(&["localhost", "127.0.0.1"]).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("rdq-pg-tls-")
            .tempdir()
            .unwrap();
        chown_postgres(dir.path());
        let data = dir.path().join("data");
        let data_s = data.to_str().unwrap();
        as_postgres(
            "initdb",
            &[
                "-D",
                data_s,
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        for (from, to) in [
            (&pki.server_cert, "server.crt"),
            (&pki.server_key, "server.key"),
            (&pki.ca, "ca.crt"),
        ] {
            std::fs::copy(from, data.join(to)).unwrap();
        }
        let port = free_port();
        let conf = format!(
            "\nport = {port}\nlisten_addresses = '127.0.0.1,127.0.0.2'\nunix_socket_directories = '{}'\n\
             ssl = {}\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n\
             ssl_ca_file = 'ca.crt'\nfsync = off\nmax_connections = 40\nshared_buffers = 16MB\n",
            dir.path().display(),
            if ssl { "on" } else { "off" }
        );
        append(&data.join("postgresql.conf"), &conf);
        let hba = if ssl {
            "hostssl all plain_only 127.0.0.0/8 reject\n\
             hostnossl all plain_only 127.0.0.0/8 trust\n\
             hostssl all cert_user 127.0.0.0/8 cert map=test\n\
             hostssl all all 127.0.0.0/8 trust\n\
             host all all 127.0.0.0/8 reject\n\
             local all all trust\n"
        } else {
            "host all all 127.0.0.0/8 trust\nlocal all all trust\n"
        };
        std::fs::write(data.join("pg_hba.conf"), hba).unwrap();
        append(
            &data.join("pg_ident.conf"),
            "test rdq-test-client cert_user\n",
        );
        chown_postgres(&data);
        let log = dir.path().join("log");
        as_postgres(
            "pg_ctl",
            &[
                "-D",
                data_s,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        let cluster = Self { dir, port, pki };
        cluster
            .psql("CREATE ROLE plain_only LOGIN SUPERUSER; CREATE ROLE cert_user LOGIN SUPERUSER;");
        cluster
    }

    fn psql(&self, sql: &str) {
        let out = Command::new("runuser")
            .args([
                "-u",
                "postgres",
                "--",
                "psql",
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
            ])
            .args([
                "-h",
                self.dir.path().to_str().unwrap(),
                "-p",
                &self.port.to_string(),
            ])
            .args(["-d", "postgres", "-c", sql])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A store URL for this cluster: `user@host`, then TLS parameters.
    fn url(&self, user: &str, host: &str, params: &str) -> String {
        format!(
            "postgres://{user}@{host}:{}/postgres?wait_ms=0&{params}",
            self.port
        )
    }

    fn ca(&self) -> &Path {
        &self.pki.ca
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{BIN}/pg_ctl")])
            .args([
                "-D",
                data.to_str().unwrap_or(""),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .output();
    }
}

fn append(path: &PathBuf, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Opens a store (a temporary schema, dropped afterwards) and says whether it worked.
async fn opens(url: &str) -> Result<(), String> {
    PostgresStore::open_temporary(url)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn request(queue: &str) -> SubmitRequest {
    SubmitRequest {
        queue: queue.into(),
        handler_ref: "tls.noop".into(),
        payload: br#"{"n":1}"#.to_vec(),
        payload_content_type: "application/json".into(),
        ..SubmitRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sslmode_accepts_and_refuses_what_libpq_would() {
    let pg = Cluster::start(true);
    let ca = pg.ca().display().to_string();
    let other_ca = pg.pki.other_ca.display().to_string();

    // verify-full: the right CA and a host the certificate names.
    for host in ["localhost", "127.0.0.1"] {
        let url = pg.url(
            "postgres",
            host,
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        );
        opens(&url).await.unwrap();
    }
    // …and the certificate must name the host: 127.0.0.2 reaches the same
    // loopback server, under a name the certificate does not carry.
    let wrong_host = pg.url(
        "postgres",
        "127.0.0.2",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let err = opens(&wrong_host).await.unwrap_err();
    assert!(err.starts_with("STORE_UNAVAILABLE"), "{err}");
    assert!(err.contains("not valid for name"), "{err}");
    // verify-ca checks the chain only, so the other name passes…
    let url = pg.url(
        "postgres",
        "127.0.0.2",
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    );
    opens(&url).await.unwrap();
    // …but not a chain to another CA, under either mode.
    for mode in ["verify-ca", "verify-full"] {
        let url = pg.url(
            "postgres",
            "localhost",
            &format!("sslmode={mode}&sslrootcert={other_ca}"),
        );
        let err = opens(&url).await.unwrap_err();
        assert!(err.contains("UnknownIssuer"), "{mode}: {err}");
    }
    // require encrypts without checking the certificate when no root is given…
    opens(&pg.url("postgres", "127.0.0.2", "sslmode=require"))
        .await
        .unwrap();
    // …and checks the chain when one is (libpq's rule: then require acts as verify-ca).
    let url = pg.url(
        "postgres",
        "127.0.0.2",
        &format!("sslmode=require&sslrootcert={other_ca}"),
    );
    let err = opens(&url).await.unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    let url = pg.url(
        "postgres",
        "127.0.0.2",
        &format!("sslmode=require&sslrootcert={ca}"),
    );
    opens(&url).await.unwrap();
    // prefer (the default) uses TLS when offered: this server refuses clear text.
    opens(&pg.url("postgres", "localhost", "")).await.unwrap();
    // disable sends clear text, which this server refuses.
    let err = opens(&pg.url("postgres", "localhost", "sslmode=disable"))
        .await
        .unwrap_err();
    assert!(err.contains("no encryption"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_falls_back_to_clear_text_when_the_handshake_fails() {
    let pg = Cluster::start(true);
    let other_ca = pg.pki.other_ca.display().to_string();
    // plain_only is refused over TLS; connecting at all proves the fallback.
    let url = pg.url(
        "plain_only",
        "localhost",
        &format!("sslmode=prefer&sslrootcert={other_ca}"),
    );
    opens(&url).await.unwrap();
    // require never falls back.
    let url = pg.url("plain_only", "localhost", "sslmode=require");
    let err = opens(&url).await.unwrap_err();
    assert!(err.contains("rejects connection"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_against_a_server_without_tls_fails_and_prefer_goes_clear() {
    let pg = Cluster::start(false);
    for mode in ["require", "verify-full"] {
        let url = pg.url(
            "postgres",
            "localhost",
            &format!("sslmode={mode}&sslrootcert={}", pg.ca().display()),
        );
        let err = opens(&url).await.unwrap_err();
        assert!(err.starts_with("STORE_UNAVAILABLE"), "{err}");
        assert!(err.contains("does not support TLS"), "{mode}: {err}");
    }
    opens(&pg.url("postgres", "localhost", "sslmode=prefer"))
        .await
        .unwrap();
    opens(&pg.url("postgres", "localhost", "")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_authenticates_with_sslcert_and_sslkey() {
    let pg = Cluster::start(true);
    let ca = pg.ca().display().to_string();
    let without = pg.url(
        "cert_user",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let err = opens(&without).await.unwrap_err();
    assert!(err.contains("certificate"), "{err}");
    let with = pg.url(
        "cert_user",
        "localhost",
        &format!(
            "sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
            pg.pki.client_cert.display(),
            pg.pki.client_key.display()
        ),
    );
    opens(&with).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_claim_and_settle_run_over_verify_full() {
    let pg = Cluster::start(true);
    let url = pg.url(
        "postgres",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", pg.ca().display()),
    );
    let store = PostgresStore::open_temporary(&url).await.unwrap();
    let engine = Engine::new(Arc::new(store.clone()), Arc::new(SystemClock));
    let submitted = engine.submit(request("tls")).await.unwrap();
    let claimed = engine.claim("tls", 1, None).await.unwrap().remove(0);
    assert_eq!(claimed.envelope.id, submitted.envelope().id);
    let settled = engine
        .settle(&claimed.envelope, claimed.token, Settlement::Success)
        .await
        .unwrap();
    assert_eq!(settled.status, Status::Succeeded);
    assert_eq!(
        store.get(submitted.envelope().id).await.unwrap().status,
        Status::Succeeded
    );
}
