//! The compliance checks, grouped by what they exercise. Each is a
//! `pub async fn(StoreFactory)` that panics when the store is wrong and
//! returns early when the store lacks a capability the check needs.

mod admin;
mod cancel;
mod capabilities;
mod claim_request;
mod claiming;
mod dlq;
mod fixtures;
mod flow;
mod leases;
mod limits;
mod schedules;
mod sources;
mod unique;

pub use admin::{
    counts_purge_delete_and_prune, idempotent_submit_returns_the_original, unknown_ids_are_reported,
};
pub use cancel::{
    a_cancel_racing_a_claim_has_exactly_one_winner,
    a_cancel_racing_a_settle_has_exactly_one_winner,
    cancelling_a_pending_task_is_terminal_and_redrivable,
    cancelling_a_running_task_stops_it_without_a_retry,
};
pub use capabilities::capabilities_tell_the_truth;
pub use claim_request::{
    claim_request_limits_hold_or_are_refused, max_in_flight_holds_under_concurrent_claimers,
};
pub use claiming::{
    claims_follow_priority_then_due_order, concurrent_claimers_never_share_a_task,
    not_yet_due_tasks_are_not_claimed, paused_queue_hands_out_nothing,
    queue_config_changes_are_seen_by_the_next_claim,
};
pub use dlq::{
    a_dead_task_is_found_by_queue_and_id, dead_reasons_are_kept_filtered_and_redriven,
    dlq_paging_is_stable_under_concurrent_inserts, redrive_by_filter_with_dry_run_and_limit,
    redrive_resets_attempts_and_keeps_history,
};
pub use fixtures::fixtures_round_trip;
pub use flow::{
    a_backlog_spread_over_many_keys_cannot_starve_a_quiet_key, a_claim_cut_short_is_counted,
    a_deferral_and_a_lease_expiry_give_their_slot_back, a_flooding_key_cannot_starve_a_quiet_key,
    a_lowered_limit_is_obeyed_by_the_next_claim, a_throttle_passes_over_its_key_until_its_time,
    flow_limits_hold_or_are_refused, key_concurrency_holds_under_concurrent_claimers,
    local_concurrency_bounds_each_process, the_rate_never_exceeds_burst_plus_rate_times_the_window,
};
pub use leases::{
    expired_leases_are_reaped_exactly_once, extend_lease_moves_the_deadline_and_fences,
    settle_batches_report_per_item, settled_tasks_reach_terminal_states, stale_settles_are_refused,
};
pub use limits::{
    a_healthy_store_is_ready, counters_at_their_maximum_never_wedge_a_task,
    the_lease_secret_is_stable,
};
pub use schedules::{
    a_changed_schedule_keeps_its_cursor, a_deleted_or_invalid_schedule_fires_nothing,
    a_pause_racing_a_put_undoes_nothing, a_paused_schedule_skips_and_resumes_without_catching_up,
    many_fires_apply_each_from_its_own_cursor, schedules_catch_up_after_a_gap_by_policy,
    schedules_fire_each_due_time_once_across_racing_nodes,
    schedules_overlap_policies_read_the_previous_task,
};
pub use sources::{
    a_refused_record_is_kept_dead, a_replayed_record_is_one_task,
    an_ingest_moves_the_cursor_with_its_tasks, racing_ingests_from_one_cursor_have_one_winner,
};
pub use unique::{
    a_hold_for_a_duration_releases_at_its_expiry, batches_decide_unique_submits_in_order,
    each_hold_releases_when_its_holder_leaves_it,
    existing_answers_the_holder_and_is_the_idempotency_key,
    redrive_and_import_into_a_held_key_are_refused, replace_never_touches_a_running_holder,
    two_submitters_of_one_unique_key_get_one_holder,
};
