//! rdq's store compliance kit: one suite of checks that every store runs
//! against itself, so "implements the storage SPI" means the same thing for
//! the in-memory store, the embedded store and every database or broker store.
//!
//! A store's test file is one line plus a factory that makes a fresh, empty,
//! isolated store on every call:
//!
//! ```text
//! rdq_compliance::store_tests!(|| async { rdq_store_memory::MemoryStore::new() });
//! ```
//!
//! [`store_tests!`] expands to one test per check, each on a multi-threaded
//! runtime with two workers, so a check added here runs against every store
//! the next time its tests run. Each check reads the store's
//! [`Capabilities`](rdq_engine::Capabilities) first and skips itself (with a
//! note on stderr) when the store says it cannot do what the check needs.
//! Time is virtual throughout: checks drive an [`Engine`](rdq_engine::Engine)
//! with a [`ManualClock`](rdq_engine::ManualClock), and call the store directly
//! where the check is about the SPI itself.
//!
//! This crate asserts: a failed check panics with what the store did wrong.

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod checks;
mod harness;

use std::future::Future;
use std::sync::Arc;

pub use checks::*;
pub use futures::future::BoxFuture;
use rdq_engine::Store;

/// Makes a fresh, empty store, isolated from every store made before it.
/// Checks call it once or more; each call must yield a store of its own.
pub type StoreFactory = Arc<dyn Fn() -> BoxFuture<'static, Arc<dyn Store>> + Send + Sync>;

/// A check as a plain function, as [`all_checks`] lists them.
pub type Check = fn(StoreFactory) -> BoxFuture<'static, ()>;

/// Where the language-neutral envelope fixtures live (`manifest.json` and the
/// files it names), at the repository root.
pub const FIXTURES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../compliance/fixtures");

/// Wraps an async closure that builds a store into a [`StoreFactory`]:
/// `factory(|| async { MemoryStore::new() })`.
pub fn factory<F, Fut, S>(make: F) -> StoreFactory
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = S> + Send + 'static,
    S: Store,
{
    Arc::new(move || {
        let made = make();
        Box::pin(async move { Arc::new(made.await) as Arc<dyn Store> })
    })
}

/// Runs one check to completion on a fresh multi-threaded runtime with two
/// workers (what `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]`
/// would build), so a store's tests need no async runtime of their own.
pub fn run_check<C, Fut>(check: C, factory: StoreFactory)
where
    C: FnOnce(StoreFactory) -> Fut,
    Fut: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the compliance check");
    runtime.block_on(check(factory));
}

/// Every check by name, for harnesses that do not use [`store_tests!`].
pub fn all_checks() -> Vec<(&'static str, Check)> {
    crate::__with_every_check!(__check_table {})
}

/// Runs every check against the stores `factory` makes, one after another.
pub async fn run_all(factory: StoreFactory) {
    for (_name, check) in all_checks() {
        check(factory.clone()).await;
    }
}

/// Expands to one `#[test]` per compliance check against the stores the
/// factory expression makes. The expression is a closure returning a future
/// of a store: `rdq_compliance::store_tests!(|| async { MemoryStore::new() });`
/// A ready [`StoreFactory`] is passed as `store_tests!(factory: expr)`.
#[macro_export]
macro_rules! store_tests {
    (factory: $factory:expr $(,)?) => {
        $crate::__with_every_check!(__store_test_fns { $factory });
    };
    ($make_store:expr $(,)?) => {
        $crate::__with_every_check!(__store_test_fns { $crate::factory($make_store) });
    };
}

/// The one list of checks; calls `$callback` with the arguments and every
/// check's name. Not public API.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_every_check {
    ($callback:ident { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            fixtures_round_trip
            concurrent_claimers_never_share_a_task
            expired_leases_are_reaped_exactly_once
            stale_settles_are_refused
            claims_follow_priority_then_due_order
            not_yet_due_tasks_are_not_claimed
            paused_queue_hands_out_nothing
            queue_config_changes_are_seen_by_the_next_claim
            extend_lease_moves_the_deadline_and_fences
            settled_tasks_reach_terminal_states
            settle_batches_report_per_item
            dlq_paging_is_stable_under_concurrent_inserts
            a_dead_task_is_found_by_queue_and_id
            redrive_resets_attempts_and_keeps_history
            redrive_by_filter_with_dry_run_and_limit
            dead_reasons_are_kept_filtered_and_redriven
            cancelling_a_pending_task_is_terminal_and_redrivable
            a_cancel_racing_a_claim_has_exactly_one_winner
            cancelling_a_running_task_stops_it_without_a_retry
            a_cancel_racing_a_settle_has_exactly_one_winner
            idempotent_submit_returns_the_original
            counts_purge_delete_and_prune
            unknown_ids_are_reported
            counters_at_their_maximum_never_wedge_a_task
            the_lease_secret_is_stable
            a_healthy_store_is_ready
            capabilities_tell_the_truth
            claim_request_limits_hold_or_are_refused
            max_in_flight_holds_under_concurrent_claimers
            flow_limits_hold_or_are_refused
            key_concurrency_holds_under_concurrent_claimers
            the_rate_never_exceeds_burst_plus_rate_times_the_window
            a_flooding_key_cannot_starve_a_quiet_key
            a_backlog_spread_over_many_keys_cannot_starve_a_quiet_key
            a_lowered_limit_is_obeyed_by_the_next_claim
            a_deferral_and_a_lease_expiry_give_their_slot_back
            a_throttle_passes_over_its_key_until_its_time
            a_claim_cut_short_is_counted
            local_concurrency_bounds_each_process
            schedules_fire_each_due_time_once_across_racing_nodes
            many_fires_apply_each_from_its_own_cursor
            schedules_catch_up_after_a_gap_by_policy
            schedules_overlap_policies_read_the_previous_task
            a_paused_schedule_skips_and_resumes_without_catching_up
            a_pause_racing_a_put_undoes_nothing
            a_changed_schedule_keeps_its_cursor
            a_deleted_or_invalid_schedule_fires_nothing
            two_submitters_of_one_unique_key_get_one_holder
            each_hold_releases_when_its_holder_leaves_it
            a_hold_for_a_duration_releases_at_its_expiry
            replace_never_touches_a_running_holder
            redrive_and_import_into_a_held_key_are_refused
            batches_decide_unique_submits_in_order
            existing_answers_the_holder_and_is_the_idempotency_key
            an_ingest_moves_the_cursor_with_its_tasks
            racing_ingests_from_one_cursor_have_one_winner
            a_replayed_record_is_one_task
            a_refused_record_is_kept_dead
        }
    };
}

/// One `#[test]` per check name. Not public API.
#[doc(hidden)]
#[macro_export]
macro_rules! __store_test_fns {
    ({ $factory:expr } $($check:ident)*) => {
        $(
            #[test]
            fn $check() {
                $crate::run_check($crate::$check, $factory);
            }
        )*
    };
}

/// The `(name, check)` table of [`all_checks`]. Not public API.
#[doc(hidden)]
#[macro_export]
macro_rules! __check_table {
    ({} $($check:ident)*) => {
        vec![
            $((
                stringify!($check),
                (|factory: $crate::StoreFactory| -> $crate::BoxFuture<'static, ()> {
                    ::std::boxed::Box::pin($crate::$check(factory))
                }) as $crate::Check,
            ),)*
        ]
    };
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    #[test]
    fn every_check_is_listed_once() {
        let names: Vec<&str> = super::all_checks()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        let unique: HashSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len());
        assert!(names.contains(&"fixtures_round_trip"));
        assert_eq!(names.len(), 58);
    }
}
