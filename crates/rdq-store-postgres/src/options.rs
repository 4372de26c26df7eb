//! Where the store connects and how: [`PostgresOptions`], parsed from the one
//! URL users type (`--store postgres://…`).
//!
//! rdq's own settings travel as query parameters of that URL (`schema`,
//! `pool_size`, `wait_ms`) and are taken out before the rest goes to
//! `tokio-postgres`, which knows the standard ones (`connect_timeout`,
//! `application_name`, `sslmode`, `options`, …).

use std::str::FromStr;
use std::time::Duration;

use rdq_engine::EngineError;
use tokio_postgres::Config;

use crate::tls::{PostgresTls, SslParams};

/// The schema rdq creates and owns when the URL names none.
pub const DEFAULT_SCHEMA: &str = "rdq";

/// Longest schema name accepted. PostgreSQL allows 63 bytes; rdq derives
/// notification channel names from the schema's, which must fit too.
const MAX_SCHEMA_LEN: usize = 48;

/// How the store connects: the server, the schema it owns and its tuning.
///
/// Built from a URL with [`PostgresOptions::from_url`]; the fields can be
/// changed afterwards.
#[derive(Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The connection settings handed to `tokio-postgres`.
    pub config: Config,
    /// The schema holding rdq's tables (`?schema=`, default `rdq`): lower-case
    /// letters, digits and `_`, starting with a letter or `_`, at most 48 bytes.
    pub schema: String,
    /// Most connections the store opens for its work (`?pool_size=`,
    /// default 10). One more, the listener, waits for notifications.
    pub pool_size: usize,
    /// How long an operation waits for the database to come back (reconnecting
    /// meanwhile) before it fails with `STORE_UNAVAILABLE` (`?wait_ms=`,
    /// default 10,000).
    pub wait: Duration,
    /// Most tasks written by one grouped submit or settle statement; default 1,000.
    pub max_group: usize,
    /// TLS as libpq's `sslmode`, `sslrootcert`, `sslcert`, `sslkey` and
    /// `sslsni` in the URL ask (`docs/stores/postgres.md`, "TLS").
    pub tls: PostgresTls,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `Config`'s own Debug redacts the password.
        f.debug_struct("PostgresOptions")
            .field("config", &self.config)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("wait", &self.wait)
            .field("max_group", &self.max_group)
            .field("tls", &self.tls.mode())
            .finish()
    }
}

impl PostgresOptions {
    /// Parses `postgres://user:password@host:port/database?schema=rdq&…`.
    ///
    /// Refuses with `INVALID_ARGUMENT` a URL of another scheme, a schema
    /// name outside `[a-z_][a-z0-9_]*`, a number that does not parse, or a
    /// connection parameter `tokio-postgres` does not know, and TLS settings
    /// libpq would refuse (or a certificate file that cannot be read).
    pub fn from_url(url: &str) -> Result<Self, EngineError> {
        let invalid = |why: String| EngineError::InvalidArgument(why);
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(invalid(
                "a PostgreSQL store URL starts with postgres:// or postgresql://".into(),
            ));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut schema = DEFAULT_SCHEMA.to_owned();
        let mut pool_size = 10usize;
        let mut wait = Duration::from_secs(10);
        let mut max_group = 1_000usize;
        let mut passed_on = url::form_urlencoded::Serializer::new(String::new());
        let mut application_name = false;
        let mut ssl = SslParams::default();
        for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
            if ssl.take(&key, &value)? {
                continue;
            }
            let number = |what: &str| {
                value
                    .parse::<u64>()
                    .map_err(|_| invalid(format!("{what} must be a whole number, not {value:?}")))
            };
            match key.as_ref() {
                "schema" => schema = value.to_string(),
                "pool_size" => pool_size = usize::try_from(number("pool_size")?).unwrap_or(1),
                "wait_ms" => wait = Duration::from_millis(number("wait_ms")?),
                "max_group" => max_group = usize::try_from(number("max_group")?).unwrap_or(1),
                other => {
                    application_name |= other == "application_name";
                    passed_on.append_pair(other, &value);
                }
            }
        }
        validate_schema(&schema)?;
        let rest = passed_on.finish();
        let connect = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{rest}")
        };
        let mut config = Config::from_str(&connect)
            .map_err(|e| invalid(format!("not a usable PostgreSQL URL: {e}")))?;
        if !application_name {
            config.application_name("rdq");
        }
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let tls = PostgresTls::resolve(ssl, home.as_deref())?;
        config.ssl_mode(tls.wire_mode());
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        // Notice a dead peer (a failed-over primary) in seconds, not hours.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        Ok(Self {
            config,
            schema,
            pool_size: pool_size.max(1),
            wait,
            max_group: max_group.max(1),
            tls,
        })
    }
}

/// Refuses a schema name that would need quoting (or could not be a channel name).
pub(crate) fn validate_schema(schema: &str) -> Result<(), EngineError> {
    let mut chars = schema.chars();
    let starts_well = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if starts_well && rest_ok && schema.len() <= MAX_SCHEMA_LEN && !schema.starts_with("pg_") {
        Ok(())
    } else {
        Err(EngineError::InvalidArgument(format!(
            "schema {schema:?} is not a plain name: use [a-z_][a-z0-9_]*, at most \
             {MAX_SCHEMA_LEN} bytes, not starting with pg_"
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn rdq_parameters_are_taken_out_and_the_rest_passed_on() {
        let o = PostgresOptions::from_url(
            "postgres://postgres@127.0.0.1:5432/test?schema=jobs_1&pool_size=4&wait_ms=250&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(o.schema, "jobs_1");
        assert_eq!(o.pool_size, 4);
        assert_eq!(o.wait, Duration::from_millis(250));
        assert_eq!(o.config.get_dbname(), Some("test"));
        assert_eq!(
            o.config.get_connect_timeout(),
            Some(&Duration::from_secs(3))
        );
        assert_eq!(o.config.get_application_name(), Some("rdq"));
    }

    #[test]
    fn the_default_schema_is_rdq() {
        let o = PostgresOptions::from_url("postgresql://localhost/test").unwrap();
        assert_eq!(o.schema, DEFAULT_SCHEMA);
    }

    #[test]
    fn schema_names_that_need_quoting_are_refused() {
        for bad in [
            "Rdq",
            "1rdq",
            "rdq-x",
            "rdq;drop",
            "",
            "pg_rdq",
            &"x".repeat(49),
        ] {
            let url = format!("postgres://localhost/test?schema={bad}");
            let err = PostgresOptions::from_url(&url).unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT", "{bad:?}");
        }
    }

    #[test]
    fn other_schemes_and_bad_numbers_are_refused() {
        for bad in [
            "mysql://localhost/test",
            "postgres://localhost/test?pool_size=many",
            "postgres://localhost/test?no_such_setting=1",
        ] {
            assert_eq!(
                PostgresOptions::from_url(bad).unwrap_err().code(),
                "INVALID_ARGUMENT",
                "{bad}"
            );
        }
    }
}
