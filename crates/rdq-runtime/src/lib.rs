//! rdq's runtime: the worker loop and the background services.
//!
//! [`Worker`] claims, runs and settles tasks through an [`rdq_engine::Engine`];
//! [`run_reaper`] and [`run_pruner`] keep leases and retention in order;
//! [`run_scheduler`] fires periodic schedules. The
//! SDK wraps these; `rdq bench` drives them directly.

#![forbid(unsafe_code)]

pub mod prefetch;
mod scheduler;
mod services;
mod shutdown;
mod worker;

pub use prefetch::Prefetch;
pub use scheduler::{
    SchedulerConfig, run_scheduler, run_scheduler_with, tick_schedules, until_next,
};
pub use services::{PrunerConfig, ReaperConfig, run_pruner, run_reaper, run_reaper_with};
pub use shutdown::{Shutdown, ShutdownTrigger, shutdown_channel};
pub use worker::{Handler, Heartbeat, Task, Worker, WorkerConfig, WorkerStats};
