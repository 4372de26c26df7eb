//! The RabbitMQ store against the shared compliance suite.
//!
//! Every check runs on its own stores in a namespace of its own
//! (`rdq-test.<ulid>.`), and every queue they declared is deleted afterwards.
//! Checks skip themselves where the store's capabilities say it cannot
//! (lookup by id, counts, idempotent submits, pruning). Three checks cannot
//! apply to a broker at all and are listed, ignored, at the end with why.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{Stores, unique};

fn run<F: std::future::Future<Output = ()>>(check: fn(rdq_compliance::StoreFactory) -> F) {
    let stores = Stores::default();
    let namespace = format!("rdq-test.{}.", unique());
    let made = stores.clone();
    let factory = rdq_compliance::factory(move || {
        let namespace = namespace.clone();
        let store = made.make(|o| o.namespace = namespace);
        async move { store }
    });
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rdq_compliance::run_check(check, factory);
    }));
    stores.cleanup();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

macro_rules! checks {
    ($($check:ident)*) => {
        /// The checks run here.
        const LISTED: &[&str] = &[$(stringify!($check)),*];
        $(
            #[test]
            fn $check() {
                run(rdq_compliance::$check);
            }
        )*
    };
}

checks! {
    fixtures_round_trip
    concurrent_claimers_never_share_a_task
    expired_leases_are_reaped_exactly_once
    stale_settles_are_refused
    paused_queue_hands_out_nothing
    queue_config_changes_are_seen_by_the_next_claim
    extend_lease_moves_the_deadline_and_fences
    settle_batches_report_per_item
    dlq_paging_is_stable_under_concurrent_inserts
    a_dead_task_is_found_by_queue_and_id
    redrive_resets_attempts_and_keeps_history
    redrive_by_filter_with_dry_run_and_limit
    dead_reasons_are_kept_filtered_and_redriven
    cancelling_a_pending_task_is_terminal_and_redrivable
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
    // RabbitMQ declares no schedules: each of these checks that it says so.
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
    // RabbitMQ keeps no source cursors: these check that it says so, and
    // that an ingest is a submit under the records' locators.
    an_ingest_moves_the_cursor_with_its_tasks
    racing_ingests_from_one_cursor_have_one_winner
    a_replayed_record_is_one_task
    a_refused_record_is_kept_dead
}

// These checks advance a virtual clock and expect tasks to become claimable
// at the new virtual instant. On a broker a delay is a hold queue's TTL,
// timed by the broker's own clock: no caller clock can make a task due
// early, and none can hold back one the broker released. The behaviour they
// check is covered in real time by `tests/work_path.rs`.

#[test]
#[ignore = "virtual time: a broker releases delayed tasks on its own clock (see tests/work_path.rs)"]
fn claims_follow_priority_then_due_order() {
    run(rdq_compliance::claims_follow_priority_then_due_order);
}

#[test]
#[ignore = "virtual time: a broker releases delayed tasks on its own clock (see tests/work_path.rs)"]
fn not_yet_due_tasks_are_not_claimed() {
    run(rdq_compliance::not_yet_due_tasks_are_not_claimed);
}

#[test]
#[ignore = "virtual time: its retries wait a 100 ms backoff the broker times in real time (see tests/work_path.rs)"]
fn settled_tasks_reach_terminal_states() {
    run(rdq_compliance::settled_tasks_reach_terminal_states);
}

#[test]
#[ignore = "RabbitMQ cannot cancel a queued message; cancelling_a_pending_task_is_terminal_and_redrivable checks it says so"]
fn a_cancel_racing_a_claim_has_exactly_one_winner() {
    run(rdq_compliance::a_cancel_racing_a_claim_has_exactly_one_winner);
}

/// The checks ignored above.
const IGNORED: &[&str] = &[
    "a_cancel_racing_a_claim_has_exactly_one_winner",
    "claims_follow_priority_then_due_order",
    "not_yet_due_tasks_are_not_claimed",
    "settled_tasks_reach_terminal_states",
];

/// A check added to the suite must be run here or ignored with a reason:
/// the list above is written by hand, so this keeps it whole.
#[test]
fn every_compliance_check_is_run_or_ignored() {
    let all = rdq_compliance::all_checks();
    for (name, _) in &all {
        assert!(
            LISTED.contains(name) != IGNORED.contains(name),
            "compliance check {name} must be listed exactly once, as run or as ignored"
        );
    }
    assert_eq!(LISTED.len() + IGNORED.len(), all.len());
}
