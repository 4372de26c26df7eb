//! rdq's runtime: the worker loop and the background services.
//!
//! [`Worker`] claims, runs and settles tasks through an [`rdq_engine::Engine`];
//! [`run_reaper`] and [`run_pruner`] keep leases and retention in order. The
//! SDK wraps these; `rdq bench` drives them directly.

#![forbid(unsafe_code)]

mod services;
mod shutdown;
mod worker;

pub use services::{PrunerConfig, ReaperConfig, run_pruner, run_reaper, run_reaper_with};
pub use shutdown::{Shutdown, ShutdownTrigger, shutdown_channel};
pub use worker::{Handler, Heartbeat, Task, Worker, WorkerConfig, WorkerStats};
