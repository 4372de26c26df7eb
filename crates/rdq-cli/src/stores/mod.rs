//! The stores this build of `rdq` can open, found by what users type after
//! `--store`, as sqlx finds a driver by its URL's scheme. Each store
//! registers one [`StoreEntry`] in its own module here: the URL schemes it
//! answers to, the URL parameters it understands, the sections of a queue's
//! configuration it reads, and how to open it (and, where it has more to
//! offer than opening, how to migrate and check it).
//!
//! Each store is a cargo feature of `rdq` (`store-embedded`, `store-memory`,
//! `store-postgres`, `store-redis`, `store-rabbitmq`, all on by default). A
//! store left out of the build is not in the registry: a `--store` naming it
//! is refused with `UNSUPPORTED_STORE` and the list of what this build opens.
//! `docs/contributing/stores.md` says how to add a store.
//!
//! How a `--store` value is read: a store's fixed name (`memory:`) names
//! that store; `SCHEME://…` names the store registered for `SCHEME`, and its
//! query parameters must be ones the store understands (`INVALID_ARGUMENT`
//! otherwise, listing them); anything else is a filesystem path, the
//! embedded store's directory.

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use rdq_engine::Store;

use crate::CliError;

#[cfg(feature = "store-embedded")]
mod embedded;
#[cfg(feature = "store-memory")]
mod memory;
#[cfg(feature = "store-postgres")]
mod postgres;
#[cfg(feature = "store-rabbitmq")]
mod rabbitmq;
#[cfg(feature = "store-redis")]
mod redis;

/// The code of a `--store` that no store in this build answers to.
pub const UNSUPPORTED_STORE: &str = "UNSUPPORTED_STORE";

/// Opens the store a whole `--store` value names.
pub type Opener = for<'a> fn(&'a str) -> BoxFuture<'a, Result<Arc<dyn Store>, CliError>>;

/// A command's work on the store a whole `--store` value names, reported in
/// one line (`rdq migrate`, `rdq check`).
pub type Step = for<'a> fn(&'a str) -> BoxFuture<'a, Result<String, CliError>>;

/// One store in the registry: how `--store` names it and what the CLI can
/// do with it.
#[derive(Debug)]
pub struct StoreEntry {
    /// The store's name in messages (`postgres`).
    pub name: &'static str,
    /// The cargo feature of `rdq` that builds it in.
    pub feature: &'static str,
    /// URL schemes naming it: `postgres` for `postgres://…`.
    pub schemes: &'static [&'static str],
    /// Whole `--store` values naming it that are not URLs (`memory:`).
    pub names: &'static [&'static str],
    /// Whether a filesystem path (a value that is no URL and no name) names
    /// it: the embedded store's directory. One entry at most says so.
    pub paths: bool,
    /// Every URL query parameter the store understands: its own, and those
    /// it hands on to its client library. Any other is refused before the
    /// store is opened, so a misspelt setting is never silently ignored.
    pub parameters: &'static [&'static str],
    /// The sections of a queue's configuration document beside the policy
    /// that this store reads (`queuey_compatible` for RabbitMQ).
    pub config_sections: &'static [&'static str],
    /// Opens the store; a store on a network may connect on first use.
    pub open: Opener,
    /// `rdq migrate`: brings the store's schema up to this build's version
    /// now. `None`: the store does so when opened.
    pub migrate: Option<Step>,
    /// `rdq check`: a full check of what the store holds, and whether it can
    /// serve. `None`: asking the opened store whether it is ready is all.
    pub check: Option<Step>,
}

impl StoreEntry {
    /// How `--store` names this store, for people: `a directory path`,
    /// `memory:`, `postgres://`…
    pub fn forms(&self) -> Vec<String> {
        let mut forms = Vec::new();
        if self.paths {
            forms.push("a directory path".to_owned());
        }
        forms.extend(self.names.iter().map(|n| (*n).to_owned()));
        forms.extend(self.schemes.iter().map(|s| format!("{s}://")));
        forms
    }
}

/// The stores compiled into this build.
static COMPILED: &[StoreEntry] = &[
    #[cfg(feature = "store-embedded")]
    embedded::ENTRY,
    #[cfg(feature = "store-memory")]
    memory::ENTRY,
    #[cfg(feature = "store-postgres")]
    postgres::ENTRY,
    #[cfg(feature = "store-redis")]
    redis::ENTRY,
    #[cfg(feature = "store-rabbitmq")]
    rabbitmq::ENTRY,
];

/// A set of stores, looked up by `--store` value.
#[derive(Debug, Clone, Copy)]
pub struct Registry {
    entries: &'static [StoreEntry],
}

impl Registry {
    /// The stores compiled into this build.
    pub fn compiled() -> Self {
        Self::new(COMPILED)
    }

    /// A registry of exactly `entries`.
    pub const fn new(entries: &'static [StoreEntry]) -> Self {
        Self { entries }
    }

    /// Every store in the registry.
    pub fn entries(&self) -> &'static [StoreEntry] {
        self.entries
    }

    /// The store `spec` names, its URL parameters checked (see the module
    /// documentation).
    pub fn resolve(&self, spec: &str) -> Result<&'static StoreEntry, CliError> {
        if let Some(entry) = self.entries.iter().find(|e| e.names.contains(&spec)) {
            return Ok(entry);
        }
        let Some((scheme, _)) = spec.split_once("://") else {
            return self.entries.iter().find(|e| e.paths).ok_or_else(|| {
                CliError::new(
                    UNSUPPORTED_STORE,
                    format!(
                        "{spec:?} is a directory path, which names the embedded store, and this \
                         build has none; --store takes {}",
                        self.known()
                    ),
                )
            });
        };
        let entry = self
            .entries
            .iter()
            .find(|e| e.schemes.contains(&scheme))
            .ok_or_else(|| {
                CliError::new(
                    UNSUPPORTED_STORE,
                    format!(
                        "no store in this build opens {scheme}:// URLs; --store takes {}",
                        self.known()
                    ),
                )
            })?;
        check_parameters(entry, spec)?;
        Ok(entry)
    }

    /// Opens the store `spec` names.
    pub async fn open(&self, spec: &str) -> Result<Arc<dyn Store>, CliError> {
        (self.resolve(spec)?.open)(spec).await
    }

    /// The local directory the store `spec` names keeps its data in, when
    /// it is a path (`None` for a URL, a name, or no store at all).
    pub fn directory<'s>(&self, spec: &'s str) -> Option<&'s Path> {
        let entry = self.resolve(spec).ok()?;
        let by_path = entry.paths && !entry.names.contains(&spec) && !spec.contains("://");
        by_path.then(|| Path::new(spec))
    }

    /// What `--store` takes, for messages: `a directory path (embedded),
    /// memory: or memory or memory:// (memory), postgres:// or postgresql://
    /// (postgres)…`.
    pub fn known(&self) -> String {
        if self.entries.is_empty() {
            return "nothing: this build has no store".to_owned();
        }
        let described: Vec<String> = self
            .entries
            .iter()
            .map(|e| format!("{} ({})", e.forms().join(" or "), e.name))
            .collect();
        described.join(", ")
    }
}

/// Opens the store `spec` names, among those compiled into this build.
pub async fn open_store(spec: &str) -> Result<Arc<dyn Store>, CliError> {
    Registry::compiled().open(spec).await
}

/// Refuses a URL query parameter `entry` does not understand.
fn check_parameters(entry: &StoreEntry, spec: &str) -> Result<(), CliError> {
    let Some((_, query)) = spec.split_once('?') else {
        return Ok(());
    };
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    for (key, _) in url::form_urlencoded::parse(query.as_bytes()) {
        if !entry.parameters.contains(&key.as_ref()) {
            let takes = if entry.parameters.is_empty() {
                "it takes none".to_owned()
            } else {
                format!("it takes {}", entry.parameters.join(", "))
            };
            return Err(CliError::new(
                "INVALID_ARGUMENT",
                format!(
                    "the {} store does not understand the URL parameter {key:?}; {takes} \
                     (docs/stores/)",
                    entry.name
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn never_opens(_: &str) -> BoxFuture<'_, Result<Arc<dyn Store>, CliError>> {
        Box::pin(async { Err(CliError::new("INTERNAL", "not opened in this test")) })
    }

    const FAKE_PATHS: StoreEntry = StoreEntry {
        name: "disk",
        feature: "store-disk",
        schemes: &[],
        names: &[],
        paths: true,
        parameters: &[],
        config_sections: &[],
        open: never_opens,
        migrate: None,
        check: None,
    };

    const FAKE_URLS: StoreEntry = StoreEntry {
        name: "net",
        feature: "store-net",
        schemes: &["net", "nets"],
        names: &["net:"],
        paths: false,
        parameters: &["prefix", "wait_ms"],
        config_sections: &[],
        open: never_opens,
        migrate: None,
        check: None,
    };

    static BOTH: &[StoreEntry] = &[FAKE_PATHS, FAKE_URLS];
    static URLS_ONLY: &[StoreEntry] = &[FAKE_URLS];

    #[test]
    fn a_url_goes_to_the_store_of_its_scheme_a_name_to_its_store_the_rest_is_a_path() {
        let registry = Registry::new(BOTH);
        for (spec, store) in [
            ("net://host:1/?prefix=a&wait_ms=5", "net"),
            ("nets://host", "net"),
            ("net:", "net"),
            ("./data", "disk"),
            ("/var/lib/rdq", "disk"),
            ("net:relative-directory", "disk"),
            ("C:\\rdq\\data", "disk"),
        ] {
            assert_eq!(registry.resolve(spec).unwrap().name, store, "{spec}");
        }
        assert_eq!(
            registry.directory("./data"),
            Some(Path::new("./data")),
            "a path is its own directory"
        );
        assert_eq!(registry.directory("net://host"), None);
        assert_eq!(registry.directory("net:"), None);
    }

    #[test]
    fn a_scheme_no_store_answers_to_is_refused_with_what_this_build_opens() {
        let err = Registry::new(BOTH)
            .resolve("postgres://localhost/db")
            .unwrap_err();
        assert_eq!(err.code, UNSUPPORTED_STORE);
        assert!(err.message.contains("postgres://"), "{}", err.message);
        assert!(
            err.message
                .contains("a directory path (disk), net: or net:// or nets:// (net)"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_path_is_refused_when_no_store_takes_paths() {
        let registry = Registry::new(URLS_ONLY);
        let err = registry.resolve("./rdq-data").unwrap_err();
        assert_eq!(err.code, UNSUPPORTED_STORE);
        assert!(err.message.contains("net: or net://"), "{}", err.message);
        assert_eq!(registry.directory("./rdq-data"), None);
    }

    #[test]
    fn an_unknown_url_parameter_is_refused_with_the_ones_the_store_takes() {
        let err = Registry::new(BOTH)
            .resolve("net://host/?prefix=a&prefx=b")
            .unwrap_err();
        assert_eq!(err.code, "INVALID_ARGUMENT");
        assert!(err.message.contains("\"prefx\""), "{}", err.message);
        assert!(
            err.message.contains("it takes prefix, wait_ms"),
            "{}",
            err.message
        );
    }

    #[test]
    fn at_most_one_compiled_store_takes_paths_and_no_scheme_or_name_is_claimed_twice() {
        let entries = Registry::compiled().entries();
        assert!(entries.iter().filter(|e| e.paths).count() <= 1);
        let mut seen = std::collections::BTreeSet::new();
        for e in entries {
            for key in e
                .schemes
                .iter()
                .map(|s| format!("{s}://"))
                .chain(e.names.iter().map(|n| (*n).to_owned()))
            {
                assert!(seen.insert(key.clone()), "{key} is registered twice");
            }
            assert!(e.feature.starts_with("store-"), "{}", e.feature);
        }
    }

    #[test]
    fn every_configuration_section_a_store_reads_is_one_a_queue_may_hold() {
        for e in Registry::compiled().entries() {
            for section in e.config_sections {
                assert!(
                    rdq_app::queues::CONFIG_SECTIONS.contains(section),
                    "the {} store reads {section}, which a queue's configuration may not hold",
                    e.name
                );
            }
        }
    }

    #[cfg(all(
        feature = "store-embedded",
        feature = "store-memory",
        feature = "store-postgres",
        feature = "store-redis",
        feature = "store-rabbitmq"
    ))]
    #[test]
    fn the_default_build_opens_every_store_by_the_names_users_type() {
        let registry = Registry::compiled();
        for (spec, store) in [
            ("./rdq-data", "embedded"),
            ("memory:", "memory"),
            ("memory", "memory"),
            ("memory://", "memory"),
            (
                "postgres://postgres@127.0.0.1:5432/test?schema=rdq&sslmode=disable",
                "postgres",
            ),
            (
                "postgresql://localhost/test?pool_size=4&connect_timeout=3",
                "postgres",
            ),
            ("redis://127.0.0.1:6379/?prefix=jobs&cluster=yes", "redis"),
            (
                "rediss://cache:6380/?tls_ca=/ca.pem&protocol=resp3",
                "redis",
            ),
            (
                "amqp://guest:guest@127.0.0.1:5672/%2f?prefetch=64&heartbeat=10",
                "rabbitmq",
            ),
            (
                "amqps://broker/?tls_server_name=broker.internal",
                "rabbitmq",
            ),
        ] {
            assert_eq!(registry.resolve(spec).unwrap().name, store, "{spec}");
        }
        let err = registry.resolve("mysql://localhost/db").unwrap_err();
        assert_eq!(err.code, UNSUPPORTED_STORE);
        assert!(
            err.message.contains(
                "a directory path (embedded), memory: or memory or memory:// (memory), \
                 postgres:// or postgresql:// (postgres), redis:// or rediss:// (redis), amqp:// or amqps:// \
                 (rabbitmq)"
            ),
            "{}",
            err.message
        );
    }
}
