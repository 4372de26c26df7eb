//! The claim request: every part a store declares it honours holds, even
//! with many claimers at once, and every part it does not declare is
//! refused with `UNSUPPORTED` before anything is claimed, never ignored.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rdq_engine::{ClaimRequest, Settlement};
use rdq_envelope::Status;

use crate::StoreFactory;
use crate::harness::{Harness, code_of};

const QUEUE: &str = "compliance.claim-request";
const LIMIT: u64 = 3;

/// With `max_in_flight` declared, a claim hands out only the room the
/// limit leaves, counting tasks already in flight; a settle frees a slot.
/// Without it, the request is refused and nothing changes.
pub async fn claim_request_limits_hold_or_are_refused(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    h.submit_n(QUEUE, 8).await;
    let limited = |max| ClaimRequest::new(QUEUE, max, 1_000, h.now()).with_max_in_flight(LIMIT);
    if !h.caps().claim_max_in_flight {
        let refused = h.engine.claim_with(limited(8)).await;
        assert_eq!(
            code_of(&refused),
            "UNSUPPORTED",
            "a store that does not declare claim_max_in_flight must refuse the limit, not ignore it"
        );
        let direct = h.store.claim(&limited(8)).await;
        assert_eq!(
            code_of(&direct),
            "UNSUPPORTED",
            "the store itself must refuse a claim part it does not honour"
        );
        // A broker hands its deliveries over as they arrive: claim until
        // all eight are in, in bounded real time.
        let mut claimed = 0;
        for _ in 0..200 {
            claimed += h.claim(QUEUE, 8).await.len();
            if claimed >= 8 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(claimed, 8, "the refused claims took nothing");
        return;
    }
    let first = h.engine.claim_with(limited(2)).await.expect("claim");
    assert_eq!(first.len(), 2, "below the limit a claim takes what it asks");
    let second = h.engine.claim_with(limited(8)).await.expect("claim");
    assert_eq!(
        second.len(),
        1,
        "two in flight and a limit of three leave room for one"
    );
    let full = h.engine.claim_with(limited(8)).await.expect("claim");
    assert!(full.is_empty(), "at the limit a claim takes nothing");
    h.settle(&first[0], Settlement::Success).await;
    let freed = h.engine.claim_with(limited(8)).await.expect("claim");
    assert_eq!(freed.len(), 1, "a settle frees exactly one slot");
    assert_eq!(
        h.claim(QUEUE, 8).await.len(),
        4,
        "a claim without the limit is not held to it: it takes the four left"
    );
    if h.caps().counts {
        h.assert_status(first[0].envelope.id, Status::Succeeded, "settled")
            .await;
    }
}

/// Many claimers at once under one global limit: the number of tasks in
/// flight never exceeds it, however the claims interleave.
pub async fn max_in_flight_holds_under_concurrent_claimers(factory: StoreFactory) {
    let h = Harness::new(&factory).await;
    if h.skips_unless(
        "max_in_flight_holds_under_concurrent_claimers",
        h.caps().claim_max_in_flight,
    ) {
        return;
    }
    const TASKS: usize = 60;
    h.submit_n(QUEUE, TASKS).await;
    let in_flight = Arc::new(AtomicU64::new(0));
    let highest = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut claimers = Vec::new();
    for _ in 0..6 {
        let engine = h.engine.clone();
        let (in_flight, highest, done) = (in_flight.clone(), highest.clone(), done.clone());
        claimers.push(tokio::spawn(async move {
            let mut idle = 0;
            while done.load(Ordering::SeqCst) < TASKS as u64 && idle < 2_000 {
                let request =
                    ClaimRequest::new(QUEUE, 2, 60_000, engine.now()).with_max_in_flight(LIMIT);
                let claimed = engine.claim_with(request).await.expect("claim");
                if claimed.is_empty() {
                    idle += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                idle = 0;
                // Counted up before anyone can settle them: a store that
                // handed out more than the limit shows it here.
                let now = in_flight.fetch_add(claimed.len() as u64, Ordering::SeqCst)
                    + claimed.len() as u64;
                highest.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                for c in claimed {
                    // Counted down before the settle frees the slot.
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    engine
                        .settle(&c.envelope, c.token, Settlement::Success)
                        .await
                        .expect("settle");
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for c in claimers {
        c.await.expect("claimer");
    }
    assert_eq!(
        done.load(Ordering::SeqCst),
        TASKS as u64,
        "every task ran once"
    );
    let peak = highest.load(Ordering::SeqCst);
    assert!(
        peak <= LIMIT,
        "{peak} tasks were in flight at once under a limit of {LIMIT}"
    );
    assert!(peak >= 2, "the claimers did run side by side (peak {peak})");
}
