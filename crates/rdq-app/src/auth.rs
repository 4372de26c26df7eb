//! Bearer-token authentication and scope checks.
//!
//! Tokens come from the server's configuration file, each with a name (who
//! the caller is: it lands in `rdq.submitted_by` and in the audit log), its
//! scopes and, optionally, the queue globs it is limited to. With no tokens
//! configured the server runs open (every call is allowed, as `anonymous`);
//! the server refuses to start open on a non-loopback address.
//!
//! The secret itself is never logged: [`Secret`]'s `Debug` prints a
//! placeholder, and lookups compare in constant time. Every scope decision
//! ([`Caller::require`] and its kin) is traced at TRACE level under this
//! module's target, with the token's name, the scope, the queue and the
//! verdict.

use std::fmt;
use std::sync::Arc;

use rdq_engine::glob::Glob;
use serde::{Deserialize, Serialize};

use crate::error::{AppError, ErrorKind, FORBIDDEN, UNAUTHENTICATED};

/// Shortest token accepted in the configuration, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

/// The name callers get when the server runs without tokens.
pub const ANONYMOUS: &str = "anonymous";

/// The scopes that may read a queue's tasks, its DLQ and its policy: any
/// scope on the queue. Changing anything (redrive, purge, import, policy)
/// needs `admin` (`docs/server.md`).
pub const READ_SCOPES: &[Scope] = &[Scope::Submit, Scope::Work, Scope::Admin];

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Submit tasks and read them.
    Submit,
    /// Claim, settle and extend leases (pull workers); read tasks.
    Work,
    /// Everything, including queue configuration and DLQ operations.
    Admin,
}

impl Scope {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::Work => "work",
            Self::Admin => "admin",
        }
    }
}

/// A secret string whose `Debug` form never shows it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; only for comparing and sending.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// One `[[tokens]]` entry of the configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Who holds the token (recorded in `rdq.submitted_by` and the audit log).
    pub name: String,
    /// The bearer token, at least [`MIN_TOKEN_LEN`] bytes.
    pub token: Secret,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// Queue globs it is limited to; empty means every queue.
    #[serde(default)]
    pub queues: Vec<String>,
}

/// Why the token configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tokens: {0}")]
pub struct TokenConfigError(String);

/// Who is calling and what they may do.
#[derive(Debug, Clone)]
pub struct Caller {
    name: Option<Arc<str>>,
    scopes: Vec<Scope>,
    /// Empty means every queue.
    queues: Vec<Glob>,
}

impl Caller {
    /// The caller of a server that runs without tokens: allowed everything.
    pub fn open() -> Self {
        Self {
            name: None,
            scopes: vec![Scope::Admin],
            queues: Vec::new(),
        }
    }

    /// The token's name; `None` on an open server.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The token's name, or `anonymous` on an open server.
    pub fn who(&self) -> &str {
        self.name().unwrap_or(ANONYMOUS)
    }

    /// True if the token has `scope` (admin has every scope).
    pub fn has_scope(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope) || self.scopes.contains(&Scope::Admin)
    }

    /// True if the token may touch `queue`.
    pub fn allows_queue(&self, queue: &str) -> bool {
        self.queues.is_empty() || self.queues.iter().any(|g| g.matches(queue))
    }

    /// True if the token is not limited to some queues.
    pub fn allows_every_queue(&self) -> bool {
        self.queues.is_empty()
    }

    /// Refuses with 403 `FORBIDDEN` unless the token has `scope`.
    pub fn require_scope(&self, scope: Scope) -> Result<(), AppError> {
        self.decided(self.scope_allowed(scope), scope, None)
    }

    /// Refuses with 403 `FORBIDDEN` unless the token has `scope` on `queue`.
    pub fn require(&self, scope: Scope, queue: &str) -> Result<(), AppError> {
        let allowed = self.scope_allowed(scope).and_then(|()| {
            if self.allows_queue(queue) {
                Ok(())
            } else {
                Err(AppError::new(
                    ErrorKind::Forbidden,
                    FORBIDDEN,
                    format!(
                        "the token {:?} is not allowed on queue {queue:?}",
                        self.who()
                    ),
                ))
            }
        });
        self.decided(allowed, scope, Some(queue))
    }

    /// Refuses with 403 unless the token has any of `scopes` on `queue`.
    pub fn require_any(&self, scopes: &[Scope], queue: &str) -> Result<(), AppError> {
        match scopes.iter().find(|s| self.has_scope(**s)) {
            Some(scope) => self.require(*scope, queue),
            None => {
                let refused = Err(AppError::new(
                    ErrorKind::Forbidden,
                    FORBIDDEN,
                    format!(
                        "the token {:?} has none of the scopes {:?}",
                        self.who(),
                        scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>()
                    ),
                ));
                let first = scopes.first().copied().unwrap_or(Scope::Admin);
                self.decided(refused, first, Some(queue))
            }
        }
    }

    fn scope_allowed(&self, scope: Scope) -> Result<(), AppError> {
        if self.has_scope(scope) {
            Ok(())
        } else {
            Err(AppError::new(
                ErrorKind::Forbidden,
                FORBIDDEN,
                format!(
                    "the token {:?} lacks the {:?} scope",
                    self.who(),
                    scope.as_str()
                ),
            ))
        }
    }

    /// Every authorisation decision passes here, and is traced (target
    /// `rdq_app::auth`, level TRACE): who, which scope, which queue, and
    /// whether it was allowed.
    fn decided(
        &self,
        result: Result<(), AppError>,
        scope: Scope,
        queue: Option<&str>,
    ) -> Result<(), AppError> {
        tracing::trace!(
            caller = self.who(),
            scope = scope.as_str(),
            queue,
            allowed = result.is_ok(),
            "authorisation decided"
        );
        result
    }
}

/// Turns an `Authorization` header into a [`Caller`].
#[derive(Debug, Clone)]
pub struct Authenticator {
    tokens: Vec<(Secret, Caller)>,
}

impl Authenticator {
    /// No tokens: every call is allowed, as `anonymous`.
    pub fn open() -> Self {
        Self { tokens: Vec::new() }
    }

    /// Checks the configured tokens: names unique and non-empty, secrets long
    /// enough and distinct, at least one scope, valid queue globs.
    pub fn new(configs: &[TokenConfig]) -> Result<Self, TokenConfigError> {
        let mut tokens: Vec<(Secret, Caller)> = Vec::with_capacity(configs.len());
        for (i, t) in configs.iter().enumerate() {
            let bad = |why: String| Err(TokenConfigError(format!("entry {}: {why}", i + 1)));
            if t.name.trim().is_empty() {
                return bad("name must not be empty".into());
            }
            if t.token.expose().len() < MIN_TOKEN_LEN {
                return bad(format!(
                    "the token of {:?} is shorter than {MIN_TOKEN_LEN} bytes",
                    t.name
                ));
            }
            if t.scopes.is_empty() {
                return bad(format!("{:?} has no scopes", t.name));
            }
            if tokens
                .iter()
                .any(|(s, c)| c.name() == Some(t.name.as_str()) || s == &t.token)
            {
                return bad(format!(
                    "{:?} repeats another entry's name or token",
                    t.name
                ));
            }
            let mut queues = Vec::with_capacity(t.queues.len());
            for g in &t.queues {
                match Glob::new(g) {
                    Ok(glob) => queues.push(glob),
                    Err(why) => return bad(format!("{:?}: queues: {why}", t.name)),
                }
            }
            tokens.push((
                t.token.clone(),
                Caller {
                    name: Some(Arc::from(t.name.as_str())),
                    scopes: t.scopes.clone(),
                    queues,
                },
            ));
        }
        Ok(Self { tokens })
    }

    /// True when no tokens are configured: every call is allowed.
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The caller behind `authorization` (an `Authorization` header's or
    /// gRPC metadata's value, if any): `UNAUTHENTICATED` when it is missing,
    /// not a bearer token, or unknown.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Caller, AppError> {
        if self.is_open() {
            return Ok(Caller::open());
        }
        let unauthenticated =
            |why: &str| AppError::new(ErrorKind::Unauthenticated, UNAUTHENTICATED, why);
        let header = authorization
            .ok_or_else(|| unauthenticated("this server needs an Authorization: Bearer token"))?;
        let presented = std::str::from_utf8(header)
            .ok()
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or_else(|| unauthenticated("the Authorization header is not a Bearer token"))?;
        // Compare against every token, so the time taken does not say which
        // (or whether any) token shares a prefix with the one presented.
        let mut found = None;
        for (secret, caller) in &self.tokens {
            if constant_time_eq(secret.expose().as_bytes(), presented.as_bytes()) {
                found = Some(caller);
            }
        }
        found
            .cloned()
            .ok_or_else(|| unauthenticated("the bearer token is not known to this server"))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, secret: &str, scopes: &[Scope], queues: &[&str]) -> TokenConfig {
        TokenConfig {
            name: name.into(),
            token: Secret::new(secret),
            scopes: scopes.to_vec(),
            queues: queues.iter().map(|q| (*q).to_owned()).collect(),
        }
    }

    fn bearer(s: &str) -> Vec<u8> {
        format!("Bearer {s}").into_bytes()
    }

    #[test]
    fn a_known_token_names_its_caller_and_scopes() {
        let auth = Authenticator::new(&[
            token(
                "checkout",
                "checkout-secret-0001",
                &[Scope::Submit],
                &["payments.*"],
            ),
            token("ops", "ops-secret-000000001", &[Scope::Admin], &[]),
        ])
        .unwrap();
        let caller = auth
            .authenticate(Some(&*bearer("checkout-secret-0001")))
            .unwrap();
        assert_eq!(caller.who(), "checkout");
        assert!(caller.require(Scope::Submit, "payments.charge").is_ok());
        assert_eq!(
            caller.require(Scope::Submit, "emails").unwrap_err().code(),
            "FORBIDDEN"
        );
        assert_eq!(
            caller.require_scope(Scope::Admin).unwrap_err().kind(),
            ErrorKind::Forbidden
        );
        let ops = auth
            .authenticate(Some(&*bearer("ops-secret-000000001")))
            .unwrap();
        assert!(ops.require(Scope::Work, "anything").is_ok());
    }

    #[test]
    fn missing_or_unknown_tokens_are_unauthenticated() {
        let auth =
            Authenticator::new(&[token("a", "aaaaaaaaaaaaaaaa", &[Scope::Work], &[])]).unwrap();
        for header in [
            None,
            Some(b"Basic abc".to_vec()),
            Some(bearer("aaaaaaaaaaaaaaab")),
            Some(bearer("aaaaaaaaaaaaaaaaa")),
        ] {
            let err = auth.authenticate(header.as_deref()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unauthenticated);
            assert_eq!(err.code(), "UNAUTHENTICATED");
        }
    }

    #[test]
    fn bad_token_configuration_is_refused() {
        assert!(Authenticator::new(&[token("a", "short", &[Scope::Work], &[])]).is_err());
        assert!(Authenticator::new(&[token("a", "aaaaaaaaaaaaaaaa", &[], &[])]).is_err());
        assert!(
            Authenticator::new(&[token("a", "aaaaaaaaaaaaaaaa", &[Scope::Work], &["[x"])]).is_err()
        );
        assert!(
            Authenticator::new(&[
                token("a", "aaaaaaaaaaaaaaaa", &[Scope::Work], &[]),
                token("b", "aaaaaaaaaaaaaaaa", &[Scope::Work], &[]),
            ])
            .is_err()
        );
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let t = token("a", "super-secret-value-1", &[Scope::Work], &[]);
        assert!(!format!("{t:?}").contains("super-secret"));
        let auth = Authenticator::new(&[t]).unwrap();
        assert!(!format!("{auth:?}").contains("super-secret"));
    }

    #[test]
    fn an_open_server_allows_everything_as_anonymous() {
        let auth = Authenticator::new(&[]).unwrap();
        assert!(auth.is_open());
        let caller = auth.authenticate(None).unwrap();
        assert_eq!(caller.who(), ANONYMOUS);
        assert_eq!(caller.name(), None);
        assert!(caller.require(Scope::Admin, "q").is_ok());
    }
}
