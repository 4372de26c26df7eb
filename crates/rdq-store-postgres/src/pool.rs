//! A small connection pool of its own, rather than a pool crate: what the
//! store needs is narrow and specific.
//!
//! - **Prepared statements per connection.** Each [`Conn`] prepares a
//!   statement on first use and keeps it, so the hot path sends no SQL text.
//! - **Waiting out a restart.** [`Pool::get`] reconnects with backoff until
//!   the database answers or [`PostgresOptions::wait`] has passed, so an
//!   operation issued while PostgreSQL restarts waits instead of failing.
//! - **Cancellation safety.** A connection goes back to the pool only when
//!   its user said the work finished ([`Lease::keep`]). One dropped midway (a
//!   caller stopped waiting, a statement failed, a transaction is open) is
//!   closed instead, and the server rolls back whatever it left open.
//!
//! That is about a hundred lines; `deadpool-postgres` would bring its own
//! statement cache, recycling checks and a manager trait for the same result.
//!
//! [`PostgresOptions::wait`]: crate::PostgresOptions::wait

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;
use tokio_postgres::{Client, Config, Statement};

use crate::error::Failure;
use crate::sql::{Q, Sql};
use crate::tls::PostgresTls;

/// One connection and the statements prepared on it.
pub(crate) struct Conn {
    pub(crate) client: Client,
    prepared: HashMap<Q, Statement>,
}

impl Conn {
    /// Statement `q`, prepared on this connection the first time it is used.
    pub(crate) async fn stmt(&mut self, sql: &Sql, q: Q) -> Result<Statement, Failure> {
        if let Some(stmt) = self.prepared.get(&q) {
            return Ok(stmt.clone());
        }
        let stmt = self.client.prepare(&sql.text(q)).await?;
        self.prepared.insert(q, stmt.clone());
        Ok(stmt)
    }
}

/// The pool: up to `size` connections, opened on demand.
pub(crate) struct Pool {
    config: Config,
    tls: PostgresTls,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
    size: usize,
    wait: Duration,
}

/// A connection on loan. [`Lease::keep`] returns it to the pool; a lease
/// dropped without it closes the connection.
pub(crate) struct Lease<'a> {
    pool: &'a Pool,
    pub(crate) conn: Conn,
    _permit: SemaphorePermit<'a>,
}

impl Lease<'_> {
    /// Marks the work done and the connection clean (no open transaction)
    /// and returns it to the pool.
    pub(crate) fn keep(self) {
        if !self.conn.client.is_closed() {
            self.pool
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(self.conn);
        }
    }
}

impl Pool {
    /// A pool of at most `size` connections to `config`.
    pub(crate) fn new(config: Config, tls: PostgresTls, size: usize, wait: Duration) -> Self {
        Self {
            config,
            tls,
            idle: Mutex::new(Vec::with_capacity(size)),
            permits: Semaphore::new(size),
            size,
            wait,
        }
    }

    /// A connection: an idle one, else a new one. While the database is
    /// unreachable it keeps trying, with backoff, until `deadline`.
    pub(crate) async fn get(&self, deadline: Instant) -> Result<Lease<'_>, Failure> {
        let permit = tokio::time::timeout_at(deadline, self.permits.acquire())
            .await
            .map_err(|_| {
                Failure::Connection(format!(
                    "all {} connections stayed busy for {:?}",
                    self.size, self.wait
                ))
            })?
            .map_err(|_| Failure::Fatal("the pool is closed".into()))?;
        loop {
            let idle = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match idle {
                Some(conn) if conn.client.is_closed() => continue,
                Some(conn) => {
                    return Ok(Lease {
                        pool: self,
                        conn,
                        _permit: permit,
                    });
                }
                None => break,
            }
        }
        let mut backoff = Duration::from_millis(20);
        loop {
            match connect(&self.config, &self.tls).await {
                Ok(client) => {
                    return Ok(Lease {
                        pool: self,
                        conn: Conn {
                            client,
                            prepared: HashMap::new(),
                        },
                        _permit: permit,
                    });
                }
                Err(Failure::Connection(why)) if Instant::now() + backoff < deadline => {
                    tracing::debug!(error = %why, "PostgreSQL unreachable; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Closes every idle connection (after a failover, say).
    pub(crate) fn clear(&self) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

/// Opens one connection, its I/O driven by a task of its own.
pub(crate) async fn connect(config: &Config, tls: &PostgresTls) -> Result<Client, Failure> {
    let (client, connection) = crate::tls::connect(config, tls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "a PostgreSQL connection closed");
        }
    });
    Ok(client)
}
