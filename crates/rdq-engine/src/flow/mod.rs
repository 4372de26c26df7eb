//! Flow control: a queue's rate, concurrency and fairness limits
//! ([`FlowPolicy`], the policy's `flow` section) and the one selection
//! algorithm every store runs inside its atomic claim step
//! ([`FlowLedger::select`]). `docs/flow-control.md` states the semantics.
//!
//! What a store keeps per queue is a [`FlowLedger`]: the queue's token
//! bucket, each flow key's bucket, virtual time and throttle. In-flight
//! counts are never kept in the ledger: the store counts its IN_FLIGHT tasks
//! per flow key at each claim, and a task's flow key is fixed at submit, so
//! a settle, a lease expiry or a deferral gives back exactly the slot its
//! claim took, whatever the policy says by then.
//!
//! Fairness is start-time fair queuing: each key has a virtual time that
//! grows by `1 / weight` per start; a claim serves the due key with the
//! smallest start tag `max(vclock, vtime)`, after priority. A key that was
//! idle starts at the queue's virtual clock, so a backlog built up by one key
//! never delays a newcomer by more than one round over the active keys.

use std::collections::{BTreeMap, HashMap};

use rdq_envelope::{Envelope, TaskId, Timestamp};
use serde::{Deserialize, Serialize};

use crate::error::EngineError;

/// The reserved header that carries a task's flow key, set at submit from
/// the typed `flow_key` field.
pub const FLOW_KEY_HEADER: &str = "rdq.flow_key";

/// The flow key of a stored task: its `rdq.flow_key` header, or `""` (the
/// key every task without one shares).
pub fn key_of(env: &Envelope) -> &str {
    env.headers.get(FLOW_KEY_HEADER).map_or("", String::as_str)
}

pub use rdq_envelope::{MAX_FLOW_KEY_LEN, is_valid_flow_key};

/// Largest concurrency limit a policy may set.
pub const MAX_CONCURRENCY: u64 = 1_000_000;

/// Largest rate a policy may set, in starts per second.
pub const MAX_RATE_PER_SECOND: f64 = 1_000_000.0;

/// Largest burst a policy may set.
pub const MAX_BURST: u64 = 1_000_000;

/// Largest weight of a flow key.
pub const MAX_WEIGHT: u32 = 1_000;

/// Most keys `flow.weights` may name.
pub const MAX_WEIGHTED_KEYS: usize = 1_000;

/// How many of the busiest keys [`FlowStatus`] lists.
pub const STATUS_KEYS: usize = 20;

/// Checks a flow key given at submit, refusing with `INVALID_FIELD`
/// naming `flow_key` (the rule is the envelope's,
/// [`rdq_envelope::validate_flow_key`]).
pub fn validate_flow_key(key: &str) -> Result<(), EngineError> {
    Ok(rdq_envelope::validate_flow_key(key)?)
}

/// A token bucket: `per_second` tokens a second, holding at most `burst`.
/// Each start takes one token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Starts per second (more than 0, at most 1,000,000; fractions allowed:
    /// `0.5` is one start every two seconds).
    pub per_second: f64,
    /// Starts allowed at once after an idle spell (at least 1; default
    /// `ceil(per_second)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
}

impl Rate {
    /// The bucket's size.
    pub fn burst(&self) -> f64 {
        match self.burst {
            Some(b) => b as f64,
            None => self.per_second.ceil().max(1.0),
        }
    }

    fn validate(&self, field: &str) -> Result<(), EngineError> {
        if !(self.per_second.is_finite() && self.per_second > 0.0) {
            return bad(&format!("{field}.per_second"), "must be a number above 0");
        }
        if self.per_second > MAX_RATE_PER_SECOND {
            return bad(
                &format!("{field}.per_second"),
                &format!("must be at most {MAX_RATE_PER_SECOND}"),
            );
        }
        match self.burst {
            Some(0) => bad(&format!("{field}.burst"), "must be at least 1"),
            Some(b) if b > MAX_BURST => bad(
                &format!("{field}.burst"),
                &format!("must be at most {MAX_BURST}"),
            ),
            _ => Ok(()),
        }
    }
}

/// How a claim orders due tasks of different flow keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fairness {
    /// Claim order only (priority, due time, id), whatever the key.
    #[default]
    Fifo,
    /// Weighted fair queuing between keys, within a priority level.
    Weighted,
}

/// A queue's flow limits: the policy's `flow` section. Every field is
/// optional; `{}` (the default) limits nothing and costs nothing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowPolicy {
    /// The queue's rate: starts per second across every node (retries and
    /// redeliveries count; a start is a claim).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Global concurrency: at most this many of the queue's tasks IN_FLIGHT
    /// across every node and worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    /// Local concurrency: at most this many IN_FLIGHT tasks claimed through
    /// one process (one `rdq serve` node, or one embedding application).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_concurrency: Option<u64>,
    /// At most this many IN_FLIGHT tasks per flow key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_concurrency: Option<u64>,
    /// Each flow key's own rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_rate: Option<Rate>,
    /// How due tasks of different keys are ordered.
    #[serde(skip_serializing_if = "is_fifo")]
    pub fairness: Fairness,
    /// Per-key weights for `weighted` fairness (1–1,000; a key with weight 2
    /// gets twice the starts of a key with weight 1 while both have work).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, u32>,
    /// The weight of a key `weights` does not name (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_weight: Option<u32>,
}

fn is_fifo(f: &Fairness) -> bool {
    *f == Fairness::Fifo
}

fn bad<T>(field: &str, why: &str) -> Result<T, EngineError> {
    Err(EngineError::InvalidPolicy(format!("flow.{field}: {why}")))
}

impl FlowPolicy {
    /// Checks every value, refusing with `INVALID_POLICY` naming the field.
    pub fn validate(&self) -> Result<(), EngineError> {
        if let Some(rate) = &self.rate {
            rate.validate("rate")?;
        }
        if let Some(rate) = &self.key_rate {
            rate.validate("key_rate")?;
        }
        for (field, limit) in [
            ("concurrency", self.concurrency),
            ("local_concurrency", self.local_concurrency),
            ("key_concurrency", self.key_concurrency),
        ] {
            match limit {
                Some(0) => return bad(field, "must be at least 1"),
                Some(n) if n > MAX_CONCURRENCY => {
                    return bad(field, &format!("must be at most {MAX_CONCURRENCY}"));
                }
                _ => {}
            }
        }
        if self.weights.len() > MAX_WEIGHTED_KEYS {
            return bad(
                "weights",
                &format!("names more than {MAX_WEIGHTED_KEYS} keys"),
            );
        }
        for (key, &weight) in &self.weights {
            if !is_valid_flow_key(key) {
                return bad(
                    &format!("weights.{key}"),
                    "is not a flow key (1-128 bytes of [A-Za-z0-9._:/@=+-])",
                );
            }
            if weight == 0 || weight > MAX_WEIGHT {
                return bad(
                    &format!("weights.{key}"),
                    &format!("must be 1 to {MAX_WEIGHT}"),
                );
            }
        }
        if let Some(w) = self.default_weight
            && (w == 0 || w > MAX_WEIGHT)
        {
            return bad("default_weight", &format!("must be 1 to {MAX_WEIGHT}"));
        }
        if self.fairness == Fairness::Fifo
            && (!self.weights.is_empty() || self.default_weight.is_some())
        {
            return bad("weights", "weights need \"fairness\": \"weighted\"");
        }
        Ok(())
    }

    /// True when the section limits nothing.
    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }

    /// True when every limit the store keeps is a count of IN_FLIGHT tasks
    /// (global and per-key concurrency) and due tasks go in claim order:
    /// no rate, FIFO. Then [`FlowLedger::select`] depends on the ledger
    /// only through its throttles and changes it only to count a claim cut
    /// short, so a store may decide such a claim where its tasks are
    /// (PostgreSQL does, in one statement) and fall back to `select` while
    /// a throttle holds.
    pub fn is_count_only(&self) -> bool {
        self.rate.is_none() && self.key_rate.is_none() && self.fairness == Fairness::Fifo
    }

    /// True when a claim must run [`FlowLedger::select`]: any limit the
    /// store keeps (a rate, a global or per-key limit, weighted fairness),
    /// which is also what makes throttles (back-pressure) hold. Local
    /// concurrency alone is the engine's, in the process: no ledger.
    pub fn needs_ledger(&self) -> bool {
        self.rate.is_some()
            || self.key_rate.is_some()
            || self.key_concurrency.is_some()
            || self.concurrency.is_some()
            || self.fairness == Fairness::Weighted
    }

    /// The weight of `key`.
    pub fn weight(&self, key: &str) -> u32 {
        self.weights
            .get(key)
            .copied()
            .or(self.default_weight)
            .unwrap_or(1)
            .max(1)
    }
}

/// A token bucket's state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Tokens left at `at`.
    pub tokens: f64,
    /// When `tokens` was last brought up to date, in Unix milliseconds.
    pub at: i64,
}

impl Bucket {
    /// The bucket at `now` under `rate`: refilled for the time since `at`,
    /// never above the burst (a lowered burst takes effect at once).
    fn refilled(state: Option<Self>, rate: &Rate, now: i64) -> Self {
        let burst = rate.burst();
        match state {
            None => Self {
                tokens: burst,
                at: now,
            },
            Some(b) => {
                let elapsed = (now - b.at).max(0) as f64 / 1_000.0;
                Self {
                    tokens: (b.tokens + elapsed * rate.per_second).min(burst),
                    at: now.max(b.at),
                }
            }
        }
    }

    fn is_full(&self, rate: Option<&Rate>, now: i64) -> bool {
        rate.is_none_or(|r| Self::refilled(Some(*self), r, now).tokens >= r.burst())
    }
}

/// One flow key's state in a [`FlowLedger`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct KeyState {
    /// The key's rate bucket, when the policy has a `key_rate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket: Option<Bucket>,
    /// Virtual finish time of the key's last start (weighted fairness).
    #[serde(skip_serializing_if = "is_zero")]
    pub vtime: f64,
    /// Throttled until this time (Unix ms), by back-pressure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_until: Option<i64>,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// What a store keeps per queue for flow control, read and written inside
/// its atomic claim step. Serialises to a small JSON document.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FlowLedger {
    /// The queue's rate bucket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bucket: Option<Bucket>,
    /// The queue's virtual clock: the start tag of the last start.
    #[serde(skip_serializing_if = "is_zero")]
    pub vclock: f64,
    /// The whole queue is throttled until this time (Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_until: Option<i64>,
    /// Keys with state worth keeping.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub keys: BTreeMap<String, KeyState>,
    /// Claims so far that flow limits cut short: due tasks were passed over
    /// for a rate, a per-key limit or a throttle (`rdq_flow_throttled_claims_total`).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub throttled_claims: u64,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// A due PENDING task a claim may take, as the store sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The task's flow key (`""` for a task without one).
    pub key: String,
    /// Its priority (higher first).
    pub priority: u8,
    /// Its due time (`None`: due since submit).
    pub due: Option<Timestamp>,
    /// Its id.
    pub id: TaskId,
}

impl Candidate {
    /// The candidate for a stored PENDING task.
    pub fn of(env: &Envelope) -> Self {
        Self {
            key: key_of(env).to_owned(),
            priority: env.priority,
            due: env.next_attempt_at,
            id: env.id,
        }
    }

    fn order(&self) -> (std::cmp::Reverse<u8>, Option<Timestamp>, TaskId) {
        (std::cmp::Reverse(self.priority), self.due, self.id)
    }
}

impl FlowLedger {
    /// Chooses which of `candidates` a claim of at most `room` tasks takes
    /// under `flow` at `now`, and takes their tokens. The store gathers, for
    /// each flow key with due PENDING tasks, up to `room` of them in claim
    /// order (a claim never takes more of one key), and the IN_FLIGHT count
    /// per flow key (`""` for tasks without a key). It then claims exactly
    /// the returned ids, in the same atomic step, and stores the ledger.
    ///
    /// `room` is what global and local concurrency already allow.
    pub fn select(
        &mut self,
        flow: &FlowPolicy,
        now: Timestamp,
        in_flight: &HashMap<String, u64>,
        mut candidates: Vec<Candidate>,
        room: usize,
    ) -> Vec<TaskId> {
        let now_ms = now.unix_ms();
        let mut chosen = Vec::new();
        let wanted = room.min(candidates.len());
        if self.blocked_until.is_some_and(|t| t > now_ms) || room == 0 {
            if wanted > 0 {
                self.throttled_claims += 1;
            }
            self.forget_idle(flow, now_ms);
            return chosen;
        }
        if let Some(rate) = &flow.rate {
            self.bucket = Some(Bucket::refilled(self.bucket, rate, now_ms));
        } else {
            self.bucket = None;
        }
        // Per key: its candidates, best first (popped from the back).
        candidates.sort_by_key(|c| std::cmp::Reverse(c.order()));
        let mut heads: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
        for c in candidates {
            heads.entry(c.key.clone()).or_default().push(c);
        }
        let mut taken: HashMap<String, u64> = HashMap::new();
        heads.retain(|key, _| {
            let state = self.keys.entry(key.clone()).or_default();
            if state.blocked_until.is_some_and(|t| t > now_ms) {
                return false;
            }
            match &flow.key_rate {
                Some(rate) => state.bucket = Some(Bucket::refilled(state.bucket, rate, now_ms)),
                None => state.bucket = None,
            }
            true
        });
        while chosen.len() < room {
            if self.bucket.is_some_and(|b| b.tokens < 1.0) {
                break;
            }
            let mut best: Option<(&String, f64, &Candidate)> = None;
            for (key, list) in &heads {
                let Some(head) = list.last() else { continue };
                let state = &self.keys[key];
                if state.bucket.is_some_and(|b| b.tokens < 1.0) {
                    continue;
                }
                if let Some(limit) = flow.key_concurrency {
                    let busy = in_flight.get(key).copied().unwrap_or(0)
                        + taken.get(key).copied().unwrap_or(0);
                    if busy >= limit {
                        continue;
                    }
                }
                let tag = match flow.fairness {
                    Fairness::Weighted => state.vtime.max(self.vclock),
                    Fairness::Fifo => 0.0,
                };
                // Priority first, then the fair start tag, then claim order.
                let better = best.is_none_or(|(_, best_tag, b)| {
                    b.priority
                        .cmp(&head.priority)
                        .then(tag.total_cmp(&best_tag))
                        .then(head.order().cmp(&b.order()))
                        .is_lt()
                });
                if better {
                    best = Some((key, tag, head));
                }
            }
            let Some((key, tag, _)) = best else { break };
            let key = key.to_owned();
            let Some(task) = heads.get_mut(&key).and_then(Vec::pop) else {
                break;
            };
            if let Some(b) = &mut self.bucket {
                b.tokens -= 1.0;
            }
            let weight = f64::from(flow.weight(&key));
            let state = self.keys.entry(key.clone()).or_default();
            if let Some(b) = &mut state.bucket {
                b.tokens -= 1.0;
            }
            if flow.fairness == Fairness::Weighted {
                state.vtime = tag + 1.0 / weight;
                self.vclock = tag;
            }
            *taken.entry(key).or_default() += 1;
            chosen.push(task.id);
        }
        if chosen.len() < wanted {
            self.throttled_claims += 1;
        }
        self.forget_idle(flow, now_ms);
        chosen
    }

    /// Throttles `key` (or the whole queue with `None`) until `until`; an
    /// earlier throttle never shortens a later one.
    pub fn throttle(&mut self, key: Option<&str>, until: Timestamp) {
        let until = until.unix_ms();
        let slot = match key {
            Some(k) => &mut self.keys.entry(k.to_owned()).or_default().blocked_until,
            None => &mut self.blocked_until,
        };
        *slot = Some(slot.map_or(until, |t| t.max(until)));
    }

    /// Drops keys whose state says nothing a fresh key would not: a full
    /// bucket, no throttle, and a virtual time at or behind the clock.
    fn forget_idle(&mut self, flow: &FlowPolicy, now_ms: i64) {
        let vclock = self.vclock;
        if self.blocked_until.is_some_and(|t| t <= now_ms) {
            self.blocked_until = None;
        }
        self.keys.retain(|_, s| {
            if s.blocked_until.is_some_and(|t| t <= now_ms) {
                s.blocked_until = None;
            }
            s.blocked_until.is_some()
                || s.vtime > vclock
                || s.bucket
                    .is_some_and(|b| !b.is_full(flow.key_rate.as_ref(), now_ms))
        });
    }

    /// What the queue's flow looks like at `now`, for the API and the
    /// dashboard: tokens left, throttles, and the busiest keys.
    pub fn status(
        &self,
        flow: &FlowPolicy,
        now: Timestamp,
        in_flight: &HashMap<String, u64>,
    ) -> FlowStatus {
        let now_ms = now.unix_ms();
        let live = |t: Option<i64>| t.filter(|&t| t > now_ms).and_then(Timestamp::from_unix_ms);
        let mut keys: Vec<KeyStatus> = in_flight
            .iter()
            .filter(|(k, n)| !k.is_empty() && **n > 0)
            .map(|(k, &n)| (k.clone(), n))
            .chain(
                self.keys
                    .keys()
                    .filter(|k| !in_flight.contains_key(*k))
                    .map(|k| (k.clone(), 0)),
            )
            .map(|(key, n)| {
                let state = self.keys.get(&key);
                KeyStatus {
                    tokens: flow
                        .key_rate
                        .as_ref()
                        .map(|r| Bucket::refilled(state.and_then(|s| s.bucket), r, now_ms).tokens),
                    blocked_until: live(state.and_then(|s| s.blocked_until)),
                    in_flight: n,
                    key,
                }
            })
            .collect();
        keys.sort_by(|a, b| {
            b.in_flight
                .cmp(&a.in_flight)
                .then(b.blocked_until.cmp(&a.blocked_until))
                .then(a.key.cmp(&b.key))
        });
        keys.truncate(STATUS_KEYS);
        FlowStatus {
            tokens: flow
                .rate
                .as_ref()
                .map(|r| Bucket::refilled(self.bucket, r, now_ms).tokens),
            blocked_until: live(self.blocked_until),
            in_flight: in_flight.values().sum(),
            keys,
            throttled_claims: self.throttled_claims,
        }
    }
}

/// A queue's flow as it is now ([`FlowLedger::status`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FlowStatus {
    /// Tokens left in the queue's rate bucket (`None`: no rate).
    pub tokens: Option<f64>,
    /// The whole queue is throttled until this time.
    pub blocked_until: Option<Timestamp>,
    /// The queue's IN_FLIGHT tasks.
    pub in_flight: u64,
    /// The busiest keys (most in flight first), and throttled keys; at most
    /// [`STATUS_KEYS`].
    pub keys: Vec<KeyStatus>,
    /// Claims so far that flow limits cut short ([`FlowLedger::throttled_claims`]).
    pub throttled_claims: u64,
}

/// One flow key in a [`FlowStatus`].
#[derive(Debug, Clone, PartialEq)]
pub struct KeyStatus {
    /// The key.
    pub key: String,
    /// Its IN_FLIGHT tasks.
    pub in_flight: u64,
    /// Tokens left in its rate bucket (`None`: no per-key rate).
    pub tokens: Option<f64>,
    /// Throttled until this time.
    pub blocked_until: Option<Timestamp>,
}

#[cfg(test)]
mod tests;
