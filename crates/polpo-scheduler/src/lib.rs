//! The scheduler that `polpo serve` runs: it fires the project's schedules
//! (`.polpo/schedules/<id>.json`, checked by `polpo-core::schedules`) at the store's time.
//!
//! Exactly once across servers: an occurrence is claimed by creating its schedule-run record
//! `(schedule id, scheduled_for)` in the store's `RecordStore` with "create only" semantics
//! (a unique key on SQLite and PostgreSQL, an exclusive create on the file store), so of all
//! the servers sharing one store, one creates it and fires; the others see a conflict and
//! move on. Each fire is an invocation through `RunManager::invoke` with surface `schedule`,
//! and its record follows it: `running` with the run id, then `succeeded` or `failed`.
//! A claim is leased (`CLAIM_LEASE`): a server that dies between the claim and the start
//! leaves a `claimed` record that another server's pass takes over by compare-and-set once the
//! lease lapses. The durable run id is derived from the occurrence, so a run the dead server
//! already started is followed, never started twice. Task, loop and webhook fires are named by
//! the occurrence the same way (`targets`).

mod fire;
pub mod record;
pub mod scheduler;
mod targets;

pub use record::{RunError, RunState, ScheduleRun};
pub use scheduler::{PASS_EVERY, Pass, Scheduler, SchedulerError};
pub use targets::Targets;
