//! The SDK end to end on every store: one suite (`suite/mod.rs`), instantiated
//! here once per store. A new store joins with one `sdk_suite!` line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod suite;

/// Instantiates every test of `suite` against the store `$open` returns.
macro_rules! sdk_suite {
    ($store:ident => $open:expr) => {
        mod $store {
            sdk_suite!(@tests $open;
                jobs_run_once_and_see_their_context,
                a_failing_job_is_retried_until_it_succeeds,
                a_permanent_failure_dead_letters_at_once_and_tells_the_hook,
                a_cancelled_job_never_runs_and_says_why_it_is_dead,
                a_running_job_hears_of_its_cancel_and_is_not_retried,
                a_live_handler_keeps_its_lease_by_heartbeat,
                schedules_declared_in_code_fire_and_undeclared_ones_are_reported,
                exhausted_attempts_dead_letter_under_the_worker_override,
                a_task_without_a_handler_is_dead_lettered_not_looped,
                an_undecodable_payload_is_dead_lettered_not_looped,
                a_handler_deferral_spends_no_attempt_and_returns_at_top_priority,
                a_producer_deferral_runs_ahead_of_the_backlog,
                enqueue_many_and_idempotency_keys,
                a_unique_key_has_one_holder_at_a_time,
                bad_submits_are_refused_with_their_codes,
                a_panicking_handler_is_a_retryable_failure,
                handler_version_mismatch_follows_the_queue_policy,
                an_overrun_lease_is_recorded_and_reported_as_lease_expired,
                extending_the_lease_keeps_a_long_job_alive,
                an_outcome_mapper_turns_a_returned_status_into_a_dead_letter,
                graceful_shutdown_under_load_loses_nothing,
                a_throttled_job_holds_back_its_flow_key,
            );
        }
    };
    (@tests $open:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                crate::suite::$name($open).await;
            }
        )*
    };
}

sdk_suite!(memory => crate::suite::Harness::memory());
sdk_suite!(embedded => crate::suite::Harness::embedded());
sdk_suite!(postgres => crate::suite::Harness::postgres().await);
