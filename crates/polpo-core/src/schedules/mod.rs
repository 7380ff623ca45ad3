//! Schedules: agents that act on time, kept in `.polpo/schedules/<id>.json`.
//!
//! What can be decided from data lives here: the v2 definition and the legacy mission shape
//! it replaces ([`config`]), cron expressions ([`cron`]), the next occurrence after a given
//! instant in the schedule's time zone, DST included ([`timing`]), which occurrences of a
//! catch-up fire ([`plan`]), the cross-file checks ([`validate`]) and `settings.schedules`
//! ([`settings`]: the webhook host allowlist). Reading the files is
//! `polpo-project`'s job; firing them is `polpo-scheduler`'s.

pub mod codes;
pub mod config;
pub mod cron;
pub mod plan;
pub mod settings;
#[cfg(test)]
mod tests;
pub mod timing;
pub mod validate;

pub use config::{CatchUp, Invocation, Schedule, ScheduleConfig, SchedulePolicy, ScheduleStatus, parse_schedule};
pub use cron::{Cron, CronError};
pub use plan::{Due, plan_due};
pub use settings::{ScheduleSettings, webhook_allowlist};
pub use timing::{Timing, TimingConfig};
pub use validate::{schedule_warnings, validate_schedules};
