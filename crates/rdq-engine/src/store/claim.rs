//! [`ClaimRequest`]: what one claim asks of a store. Every limit that must
//! hold across processes travels here and is decided in the store's atomic
//! claim step, never in a process's memory.

use rdq_envelope::Timestamp;

use crate::error::EngineError;
use crate::flow::FlowPolicy;
use crate::store::WorkCapabilities;

/// One claim: take up to `max` due tasks of `queue` under a lease of
/// `lease_ms`, at `now`, within the limits the request carries.
/// `#[non_exhaustive]`: later limits, fairness and exclusions arrive as new
/// fields with a default that asks for nothing, so a store that does not
/// know of them still answers a plain claim.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClaimRequest {
    /// The queue.
    pub queue: String,
    /// At most this many tasks.
    pub max: usize,
    /// The lease each claimed task gets, in milliseconds.
    pub lease_ms: u64,
    /// The claim's time: what is due, and when the lease ends.
    pub now: Timestamp,
    /// Global concurrency: hand out tasks only while fewer than this many of
    /// the queue's tasks are IN_FLIGHT, across every process on the store
    /// (those in flight already count). `None`: no limit.
    pub max_in_flight: Option<u64>,
    /// Rate, per-key limits and fairness, decided by
    /// [`crate::FlowLedger::select`] inside the claim's atomic step. `None`
    /// (or a policy that [`FlowPolicy::needs_ledger`] says is plain): claim
    /// order only.
    pub flow: Option<FlowPolicy>,
}

impl ClaimRequest {
    /// A plain claim with no limits.
    pub fn new(queue: impl Into<String>, max: usize, lease_ms: u64, now: Timestamp) -> Self {
        Self {
            queue: queue.into(),
            max,
            lease_ms,
            now,
            max_in_flight: None,
            flow: None,
        }
    }

    /// With flow limits ([`ClaimRequest::flow`]); a section that needs no
    /// ledger leaves the request plain.
    #[must_use]
    pub fn with_flow(mut self, flow: FlowPolicy) -> Self {
        self.flow = flow.needs_ledger().then_some(flow);
        self
    }

    /// With a global concurrency limit ([`ClaimRequest::max_in_flight`]).
    #[must_use]
    pub fn with_max_in_flight(mut self, limit: u64) -> Self {
        self.max_in_flight = Some(limit);
        self
    }

    /// How many this claim may take when `in_flight` of the queue's tasks
    /// are IN_FLIGHT now: `max`, lowered to the room the limit leaves.
    pub fn room(&self, in_flight: u64) -> usize {
        match self.max_in_flight {
            Some(limit) => {
                let room = limit.saturating_sub(in_flight);
                self.max.min(usize::try_from(room).unwrap_or(usize::MAX))
            }
            None => self.max,
        }
    }

    /// `UNSUPPORTED` when the request asks for a part `honours` lacks: what
    /// a store answers before claiming anything, instead of ignoring it.
    pub fn refuse_unsupported(&self, honours: WorkCapabilities) -> Result<(), EngineError> {
        if self.max_in_flight.is_some() && !honours.claim_max_in_flight {
            return Err(EngineError::Unsupported(
                "this store cannot hold a claim to a global concurrency limit (max_in_flight)"
                    .into(),
            ));
        }
        if self.flow.is_some() && !honours.claim_flow {
            return Err(EngineError::Unsupported(
                "this store cannot hold a claim to rates, per-key limits or fairness (flow)".into(),
            ));
        }
        Ok(())
    }
}
